"""``late_slot``: a request leaving more than the send allowance after its dispatch takes a
fresh throttle slot, or is told how long to wait (real Redis, injected clock)."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster import keys
from tests.support.frontier import VIEW, FrontierFactory, ManualClock, many
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients

pytestmark = pytest.mark.integration
MODERATED = {"QUEUE_HITS": 10, "QUEUE_WINDOW": 2, "QUEUE_MODERATED": True,
             "THROTTLE_SEND_ALLOWANCE_MS": 0}  # one slot every 200 ms
TIME_KEY = keys.throttle_time("a.com", spiderid="link", ip="10.0.0.1")
WINDOW_KEY = keys.throttle_window("a.com", spiderid="link", ip="10.0.0.1")


def test_a_late_request_whose_slot_is_still_the_last_takes_it_now(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, **MODERATED)
    frontier.enqueue_many(many("a.com", 3))
    first = frontier.pop(VIEW, 5).requests[0]
    clock.advance(440)
    assert frontier.late_slot(VIEW, "a.com", first.dispatched_at_ms) == 0
    assert int(redis_client.get(TIME_KEY)) == first.dispatched_at_ms + 440
    # the next dispatch is an interval after the fresh slot, not after the stale one
    assert frontier.pop(VIEW, 5).wait_s == 0.2


def test_a_late_request_waits_for_the_slot_after_one_dispatched_since(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, **MODERATED)
    frontier.enqueue_many(many("a.com", 3))
    first = frontier.pop(VIEW, 5).requests[0]
    clock.advance(200)
    second = frontier.pop(VIEW, 5).requests[0]
    clock.advance(240)  # the first leaves 440 ms late; the second was dispatched 240 ms ago
    assert frontier.late_slot(VIEW, "a.com", first.dispatched_at_ms) == 0
    clock.advance(10)  # the second leaves 250 ms late: 190 ms after the first's fresh slot
    assert frontier.late_slot(VIEW, "a.com", second.dispatched_at_ms) == 190
    clock.advance(189)
    assert frontier.late_slot(VIEW, "a.com", second.dispatched_at_ms) == 1
    clock.advance(1)
    assert frontier.late_slot(VIEW, "a.com", second.dispatched_at_ms) == 0
    assert int(redis_client.get(TIME_KEY)) == first.dispatched_at_ms + 640


def test_a_sliding_window_late_request_replaces_its_stale_entry(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=2, QUEUE_WINDOW=1,
                                THROTTLE_SEND_ALLOWANCE_MS=0)
    frontier.enqueue_many(many("a.com", 4))
    first, second = frontier.pop(VIEW, 5).requests
    clock.advance(300)
    # the window holds the other dispatch only: one more slot is free
    assert frontier.late_slot(VIEW, "a.com", first.dispatched_at_ms) == 0
    assert [int(v) for v in redis_client.lrange(WINDOW_KEY, 0, -1)] == \
        [second.dispatched_at_ms, first.dispatched_at_ms + 300]
    # a request whose entry was already replaced finds the window full until the oldest ages
    assert frontier.late_slot(VIEW, "a.com", 12345) == 700


def test_an_unthrottled_domain_needs_no_fresh_slot(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), QUEUE_WINDOW=0)
    frontier.enqueue_many(many("a.com", 1))
    leased = frontier.pop(VIEW, 5).requests[0]
    assert frontier.late_slot(VIEW, "a.com", leased.dispatched_at_ms) == 0
    assert not redis_client.exists(TIME_KEY, WINDOW_KEY)
