"""Throttle semantics with an injected clock: moderation, windows, overrides, views."""

from __future__ import annotations

import time

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import FrontierError
from scrapy_cluster.frontier import DispatchView, LateSend
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from tests.support.frontier import (
    VIEW,
    FrontierFactory,
    ManualClock,
    many,
    pop_urls,
    req,
)
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients

pytestmark = pytest.mark.integration


def test_moderated_spaces_requests_by_window_over_hits(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=2, QUEUE_WINDOW=10,
                                QUEUE_MODERATED=True)
    frontier.enqueue_many(many("a.com", 3))
    assert len(pop_urls(frontier, 5)) == 1
    result = frontier.pop(VIEW, 5)
    assert (result.requests, result.wait_s) == ([], 5.0)
    clock.advance(4999)
    assert pop_urls(frontier, 5) == []
    clock.advance(1)
    assert len(pop_urls(frontier, 5)) == 1


@pytest.mark.parametrize("moderated", [True, False])
def test_the_send_allowance_lengthens_every_window(
        redis_client: redis.Redis, moderated: bool, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=2, QUEUE_WINDOW=10,
                                QUEUE_MODERATED=moderated, THROTTLE_SEND_ALLOWANCE_MS=30)
    frontier.enqueue_many(many("a.com", 5))
    first = len(pop_urls(frontier, 5))
    reopens_ms = 5015 if moderated else 10030
    assert frontier.pop(VIEW, 5).wait_s == reopens_ms / 1000
    clock.advance(reopens_ms - 1)
    assert pop_urls(frontier, 5) == []
    clock.advance(1)
    assert (first, len(pop_urls(frontier, 5))) == ((1, 1) if moderated else (2, 2))


def test_unmoderated_allows_hits_per_sliding_window(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=3, QUEUE_WINDOW=10)
    frontier.enqueue_many(many("a.com", 10))
    assert len(pop_urls(frontier, 10)) == 3
    assert frontier.pop(VIEW, 10).wait_s == 10.0
    clock.advance(9999)
    assert pop_urls(frontier, 10) == []
    clock.advance(1)
    assert len(pop_urls(frontier, 10)) == 3


@pytest.mark.parametrize(("moderated", "after_idling"), [(True, 1), (False, 3)],
                         ids=["moderated", "sliding_window"])
def test_an_idle_gap_gives_no_burst_beyond_the_limit(
        redis_client: redis.Redis, frontier_factory: FrontierFactory, moderated: bool,
        after_idling: int) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=3, QUEUE_WINDOW=10,
                                QUEUE_MODERATED=moderated)
    frontier.enqueue_many(many("a.com", 20))
    assert len(pop_urls(frontier, 1)) == 1
    clock.advance(600_000)
    assert len(pop_urls(frontier, 20)) == after_idling


def test_empty_pops_consume_no_throttle_slot(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=1, QUEUE_WINDOW=10,
                                QUEUE_MODERATED=True)
    frontier.enqueue_many(many("a.com", 1))
    assert len(pop_urls(frontier, 1)) == 1
    clock.advance(10_000)
    for _ in range(3):
        assert pop_urls(frontier, 1) == []
    frontier.enqueue_many([req("http://a.com/late")])
    assert pop_urls(frontier, 1) == ["http://a.com/late"]


def test_override_takes_effect_on_next_pop(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many(many("a.com", 5) + many("b.com", 5))
    DomainConfig(redis_client, frontier).set_throttle("a.com", DomainThrottle(10, 1))
    urls = pop_urls(frontier, 10)
    assert sum(url.startswith("http://a.com") for url in urls) == 1
    assert sum(url.startswith("http://b.com") for url in urls) == 5


def test_scale_reduces_the_limit(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many(many("a.com", 10))
    DomainConfig(redis_client, frontier).set_throttle("a.com", DomainThrottle(10, 10, scale=0.35))
    assert len(pop_urls(frontier, 10)) == 3


def test_zero_limit_pauses_the_domain(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many(many("a.com", 2))
    config = DomainConfig(redis_client, frontier)
    config.set_throttle("a.com", DomainThrottle(10, 5, scale=0.0))
    result = frontier.pop(VIEW, 2)
    assert (result.requests, result.wait_s) == ([], 30.0)
    config.remove_throttle("a.com")
    assert len(pop_urls(frontier, 2)) == 2


def test_blacklist_and_unblacklist_take_effect_on_next_pop(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many(many("a.com", 2))
    config = DomainConfig(redis_client, frontier)
    config.add_blacklist("a.com")
    assert pop_urls(frontier, 2) == []
    config.remove_blacklist("a.com")
    assert len(pop_urls(frontier, 2)) == 2


def test_replace_all_applies_a_whole_configuration(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    config = DomainConfig(redis_client, frontier)
    config.set_throttle("old.com", DomainThrottle(5, 5))
    config.replace_all({"a.com": DomainThrottle(60, 2)}, {"bad.com"})
    assert config.throttles() == {"a.com": DomainThrottle(60.0, 2, 1.0)}
    assert config.blacklist() == {"bad.com"}


def test_malformed_override_falls_back_to_defaults(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), QUEUE_HITS=2, QUEUE_WINDOW=10)
    redis_client.hset(keys.domain_throttle_config(), "a.com", b"{not json")
    frontier.enqueue_many(many("a.com", 5))
    assert len(pop_urls(frontier, 5)) == 2


def test_each_ip_has_its_own_throttle(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), QUEUE_HITS=1, QUEUE_WINDOW=10)
    frontier.enqueue_many(many("a.com", 4))
    assert len(pop_urls(frontier, 4, DispatchView("link", "10.0.0.1"))) == 1
    assert len(pop_urls(frontier, 4, DispatchView("link", "10.0.0.2"))) == 1
    assert redis_client.exists(keys.throttle_window("a.com", spiderid="link", ip="10.0.0.2"))


def test_without_ip_scope_all_crawlers_share_the_throttle(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), QUEUE_HITS=1, QUEUE_WINDOW=10,
                                SCHEDULER_IP_ENABLED=False)
    frontier.enqueue_many(many("a.com", 4))
    assert len(pop_urls(frontier, 4, DispatchView("link", "10.0.0.1"))) == 1
    assert pop_urls(frontier, 4, DispatchView("link", "10.0.0.2")) == []
    assert redis_client.exists(keys.throttle_window("a.com", spiderid="link", ip=None))


def test_without_type_scope_spiders_share_the_throttle(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), QUEUE_HITS=1, QUEUE_WINDOW=10,
                                SCHEDULER_TYPE_ENABLED=False, SCHEDULER_IP_ENABLED=False)
    frontier.enqueue_many(many("a.com", 2) + [req("http://a.com/o", spiderid="other")])
    assert len(pop_urls(frontier, 4, DispatchView("link"))) == 1
    assert pop_urls(frontier, 4, DispatchView("other")) == []
    assert redis_client.exists(keys.throttle_window("a.com", spiderid=None, ip=None))


def test_wait_for_work_returns_once_work_was_enqueued(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/")])
    assert frontier.wait_for_work(VIEW, time.monotonic() + 60) is True
    assert redis_client.llen(keys.wake_list("link")) == 0
    assert pop_urls(frontier, 1) == ["http://a.com/"]


def test_wait_for_work_times_out_without_work(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    assert frontier.wait_for_work(VIEW, time.monotonic() + 0.01) is False
    assert frontier.pop(VIEW, 1).wait_s is None


def test_short_pop_reports_its_ready_moment_on_the_monotonic_clock(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), QUEUE_HITS=2, QUEUE_WINDOW=10,
                                QUEUE_MODERATED=True)
    frontier.enqueue_many(many("a.com", 2))
    frontier.pop(VIEW, 5)
    before = time.monotonic()
    result = frontier.pop(VIEW, 5)
    after = time.monotonic()
    assert result.wait_s == 5.0
    assert result.ready_at_s is not None and before + 5.0 <= result.ready_at_s <= after + 5.0


def test_empty_frontier_pop_has_no_ready_moment(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    result = frontier_factory(redis_client, ManualClock()).pop(VIEW, 5)
    assert (result.requests, result.wait_s, result.ready_at_s) == ([], None, None)


def test_waiting_on_a_short_pop_ends_when_its_domain_may_dispatch(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    """Real Redis time: 1 request per 0.3 s. The wait returns without any token, and not
    before the domain is allowed: the pop right after it dispatches."""
    frontier = frontier_factory(redis_client, None, QUEUE_HITS=1, QUEUE_WINDOW=0.3,
                                QUEUE_MODERATED=True)
    frontier.enqueue_many(many("a.com", 3))
    redis_client.delete(keys.wake_list("link"))
    for _ in range(2):
        assert len(pop_urls(frontier, 5)) == 1
        short = frontier.pop(VIEW, 5)
        assert short.requests == [] and short.wait_s is not None and short.wait_s > 0
        assert frontier.wait_for_work(VIEW, short) is False
    assert len(pop_urls(frontier, 5)) == 1


def test_waiting_on_a_pop_with_nothing_throttled_returns_at_once(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many(many("a.com", 3))
    redis_client.delete(keys.wake_list("link"))
    result = frontier.pop(VIEW, 1)
    assert result.wait_s == 0
    assert frontier.wait_for_work(VIEW, result) is False
    assert redis_client.llen(keys.wake_list("link")) == 0


def test_a_domain_config_change_wakes_waiting_crawlers(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), QUEUE_HITS=1, QUEUE_WINDOW=60)
    frontier.enqueue_many(many("a.com", 3))
    pop_urls(frontier, 5)
    redis_client.delete(keys.wake_list("link"))
    DomainConfig(redis_client, frontier).set_throttle("a.com", DomainThrottle(60, 10))
    assert frontier.wait_for_work(VIEW, time.monotonic() + 60) is True
    assert pop_urls(frontier, 5) == ["http://a.com/1", "http://a.com/2"]


@pytest.mark.parametrize(("default_moderated", "override_moderated", "first_pops"), [
    (False, True, ["even.com", "other.com", "other.com", "other.com"]),
    (True, False, ["even.com", "even.com", "even.com", "other.com"]),
])
def test_a_domain_override_chooses_its_own_throttle_style(
        redis_client: redis.Redis, default_moderated: bool, override_moderated: bool,
        first_pops: list[str], frontier_factory: FrontierFactory) -> None:
    """3 per 10 s everywhere; ``even.com`` overrides the style: moderated gives it one request
    now and the next 3.33 s later, burst gives it all three at once."""
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=3, QUEUE_WINDOW=10,
                                QUEUE_MODERATED=default_moderated)
    DomainConfig(redis_client, frontier).set_throttle(
        "even.com", DomainThrottle(window_s=10, hits=3, moderated=override_moderated))
    frontier.enqueue_many(many("even.com", 5) + many("other.com", 5))
    assert sorted(url.split("/")[2] for url in pop_urls(frontier, 10)) == first_pops


def test_domain_throttle_refuses_a_non_boolean_moderated() -> None:
    with pytest.raises(FrontierError, match="moderated"):
        DomainThrottle(window_s=10, hits=3, moderated="yes")  # type: ignore[arg-type]


def test_domain_throttle_json_round_trip_keeps_moderated() -> None:
    for moderated in (None, True, False):
        throttle = DomainThrottle(window_s=2.5, hits=4, scale=0.5, moderated=moderated)
        assert DomainThrottle.from_json(throttle.to_json()) == throttle


def test_a_late_send_moves_a_moderated_slot_to_the_send(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=2, QUEUE_WINDOW=10,
                                QUEUE_MODERATED=True)
    frontier.enqueue_many(many("a.com", 3))
    leased = frontier.pop(VIEW, 5).requests[0]
    late = LateSend("a.com", leased.dispatched_at_ms, leased.dispatched_at_ms + 300)
    assert frontier.restamp(VIEW, [late]) == 1
    assert frontier.pop(VIEW, 5).wait_s == 5.3
    clock.advance(5299)
    assert pop_urls(frontier, 5) == []
    clock.advance(1)
    assert pop_urls(frontier, 5) == ["http://a.com/1"]


def test_a_late_send_moves_its_sliding_window_entry(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=2, QUEUE_WINDOW=10)
    frontier.enqueue_many(many("a.com", 4))
    first, second = frontier.pop(VIEW, 5).requests
    clock.advance(100)
    assert frontier.restamp(VIEW, [LateSend("a.com", first.dispatched_at_ms,
                                            first.dispatched_at_ms + 400)]) == 1
    window = keys.throttle_window("a.com", spiderid="link", ip="10.0.0.1")
    assert [int(v) for v in redis_client.lrange(window, 0, -1)] == \
        [second.dispatched_at_ms, first.dispatched_at_ms + 400]
    clock.advance(9_900)
    assert pop_urls(frontier, 5) == ["http://a.com/2"]
    clock.advance(399)
    assert pop_urls(frontier, 5) == []
    clock.advance(1)
    assert pop_urls(frontier, 5) == ["http://a.com/3"]


def test_a_late_send_of_an_unthrottled_domain_changes_nothing(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), QUEUE_WINDOW=0)
    frontier.enqueue_many(many("a.com", 1))
    leased = frontier.pop(VIEW, 5).requests[0]
    late = LateSend("a.com", leased.dispatched_at_ms, leased.dispatched_at_ms + 300)
    assert frontier.restamp(VIEW, [late]) == 0
    assert frontier.restamp(VIEW, []) == 0


def test_a_late_send_never_moves_a_later_moderated_slot_back(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=10, QUEUE_WINDOW=1,
                                QUEUE_MODERATED=True)
    frontier.enqueue_many(many("a.com", 3))
    first = frontier.pop(VIEW, 5).requests[0]
    clock.advance(100)
    second = frontier.pop(VIEW, 5).requests[0]
    late = LateSend("a.com", first.dispatched_at_ms, first.dispatched_at_ms + 50)
    assert frontier.restamp(VIEW, [late]) == 0
    assert frontier.pop(VIEW, 5).wait_s == (second.dispatched_at_ms + 100 - clock()) / 1000


def test_a_pop_says_which_requests_took_a_throttle_slot(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), QUEUE_WINDOW=0)
    DomainConfig(redis_client, frontier).set_throttle("slow.com", DomainThrottle(60, 10))
    frontier.enqueue_many([req("http://slow.com/1"), req("http://free.com/1")])
    assert sorted((r.domain, r.throttled) for r in frontier.pop(VIEW, 5).requests) == \
        [("free.com", False), ("slow.com", True)]
