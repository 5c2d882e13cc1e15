"""Cluster-wide domain pauses and halts as the pop obeys them, with an injected clock."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.pause import HALT_UNTIL_MS, DomainPauses
from tests.support.frontier import (
    START_MS,
    VIEW,
    FrontierFactory,
    ManualClock,
    drain,
    pop_urls,
    req,
)
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients

pytestmark = pytest.mark.integration

YEAR_MS = 365 * 86_400_000


def queue(frontier: Frontier, domain: str, count: int) -> None:
    frontier.enqueue_many([req(f"http://{domain}/{i}") for i in range(count)])


def test_a_paused_domain_is_not_dispatched_while_others_are(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    queue(frontier, "bad.com", 3)
    queue(frontier, "good.com", 3)
    DomainPauses(redis_client, clock=clock).pause("bad.com", 10_000)
    assert sorted(drain(frontier)) == [f"http://good.com/{i}" for i in range(3)]


def test_a_paused_domain_keeps_its_requests_queued(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    queue(frontier, "bad.com", 3)
    DomainPauses(redis_client, clock=clock).pause("bad.com", 10_000)
    assert drain(frontier) == []
    assert frontier.crawl_info("link", "app", "c1").total_pending == 3


def test_a_paused_domain_is_dispatched_again_when_the_pause_is_over(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, FRONTIER_RECHECK_S=30)
    queue(frontier, "bad.com", 2)
    DomainPauses(redis_client, clock=clock).pause("bad.com", 10_000)
    result = frontier.pop(VIEW, 5)
    assert (result.requests, result.wait_s) == ([], 10.0)
    clock.advance(9_999)
    assert pop_urls(frontier, 5) == []
    clock.advance(1)
    assert drain(frontier) == ["http://bad.com/0", "http://bad.com/1"]


def test_a_pause_longer_than_the_recheck_is_looked_at_again_at_the_recheck(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, FRONTIER_RECHECK_S=30)
    queue(frontier, "bad.com", 1)
    DomainPauses(redis_client, clock=clock).pause("bad.com", 100_000)
    assert frontier.pop(VIEW, 5).wait_s == 30.0
    clock.advance(30_000)
    assert frontier.pop(VIEW, 5).wait_s == 30.0
    clock.advance(70_000)
    assert pop_urls(frontier, 5) == ["http://bad.com/0"]


def test_a_pop_removes_a_pause_that_is_over(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    queue(frontier, "bad.com", 1)
    DomainPauses(redis_client, clock=clock).pause("bad.com", 1_000)
    clock.advance(1_000)
    assert pop_urls(frontier, 5) == ["http://bad.com/0"]
    assert redis_client.hgetall(keys.domain_paused()) == {}


def test_a_pause_is_never_shortened(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    pauses = DomainPauses(redis_client, clock=clock)
    assert pauses.pause("bad.com", 10_000) == START_MS + 10_000
    assert pauses.pause("bad.com", 2_000) == START_MS + 10_000
    assert pauses.pause("bad.com", 20_000) == START_MS + 20_000
    assert pauses.paused_until() == {"bad.com": START_MS + 20_000}


def test_a_halt_is_stored_exactly_and_not_shortened_by_a_pause(
        redis_client: redis.Redis) -> None:
    pauses = DomainPauses(redis_client, clock=ManualClock())
    assert pauses.halt("bad.com") == HALT_UNTIL_MS
    assert pauses.pause("bad.com", 5_000) == HALT_UNTIL_MS
    assert redis_client.hget(keys.domain_paused(), "bad.com") == str(HALT_UNTIL_MS).encode()


def test_a_halted_domain_is_not_dispatched_until_resumed(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    queue(frontier, "bad.com", 2)
    pauses = DomainPauses(redis_client, clock=clock)
    pauses.halt("bad.com")
    assert drain(frontier) == []
    clock.advance(YEAR_MS)
    assert drain(frontier) == []
    assert pauses.resume("bad.com", frontier) is True
    assert drain(frontier) == ["http://bad.com/0", "http://bad.com/1"]


def test_resume_wakes_waiting_crawlers_and_says_whether_it_was_paused(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    queue(frontier, "bad.com", 1)
    pauses = DomainPauses(redis_client, clock=clock)
    pauses.halt("bad.com")
    assert drain(frontier) == []
    redis_client.delete(keys.wake_list("link"))
    assert pauses.resume("bad.com", frontier) is True
    assert redis_client.llen(keys.wake_list("link")) == 1
    assert pauses.resume("bad.com", frontier) is False


def test_a_pause_must_be_positive(redis_client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="positive"):
        DomainPauses(redis_client).pause("bad.com", 0)


def test_without_a_clock_a_pause_is_counted_from_redis_time(redis_client: redis.Redis) -> None:
    seconds, micros = redis_client.time()
    until = DomainPauses(redis_client).pause("bad.com", 5_000)
    assert 0 <= until - (seconds * 1000 + micros // 1000 + 5_000) < 1_000
