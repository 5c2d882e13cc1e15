"""Throttle semantics with an injected clock: moderation, windows, overrides, views."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import DispatchView
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from tests.test_frontier_helpers import VIEW, ManualClock, make_frontier, pop_urls, req

pytestmark = pytest.mark.integration


def many(domain: str, count: int) -> list[dict[str, object]]:
    return [req(f"http://{domain}/{i}") for i in range(count)]


def test_moderated_spaces_requests_by_window_over_hits(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    frontier = make_frontier(redis_client, clock, QUEUE_HITS=2, QUEUE_WINDOW=10,
                             QUEUE_MODERATED=True)
    frontier.enqueue_many(many("a.com", 3))
    assert len(pop_urls(frontier, 5)) == 1
    result = frontier.pop(VIEW, 5)
    assert (result.requests, result.wait_s) == ([], 5.0)
    clock.advance(4999)
    assert pop_urls(frontier, 5) == []
    clock.advance(1)
    assert len(pop_urls(frontier, 5)) == 1


def test_unmoderated_allows_hits_per_sliding_window(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    frontier = make_frontier(redis_client, clock, QUEUE_HITS=3, QUEUE_WINDOW=10)
    frontier.enqueue_many(many("a.com", 10))
    assert len(pop_urls(frontier, 10)) == 3
    assert frontier.pop(VIEW, 10).wait_s == 10.0
    clock.advance(9999)
    assert pop_urls(frontier, 10) == []
    clock.advance(1)
    assert len(pop_urls(frontier, 10)) == 3


def test_idle_gap_gives_no_burst_beyond_the_limit(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    frontier = make_frontier(redis_client, clock, QUEUE_HITS=3, QUEUE_WINDOW=10,
                             QUEUE_MODERATED=True)
    frontier.enqueue_many(many("a.com", 20))
    assert len(pop_urls(frontier, 1)) == 1
    clock.advance(120_000)
    assert len(pop_urls(frontier, 20)) == 1


def test_unmoderated_idle_gap_allows_at_most_the_limit(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    frontier = make_frontier(redis_client, clock, QUEUE_HITS=3, QUEUE_WINDOW=10)
    frontier.enqueue_many(many("a.com", 20))
    clock.advance(600_000)
    assert len(pop_urls(frontier, 20)) == 3


def test_empty_pops_consume_no_throttle_slot(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    frontier = make_frontier(redis_client, clock, QUEUE_HITS=1, QUEUE_WINDOW=10,
                             QUEUE_MODERATED=True)
    frontier.enqueue_many(many("a.com", 1))
    assert len(pop_urls(frontier, 1)) == 1
    clock.advance(10_000)
    for _ in range(3):
        assert pop_urls(frontier, 1) == []
    frontier.enqueue_many([req("http://a.com/late")])
    assert pop_urls(frontier, 1) == ["http://a.com/late"]


def test_override_takes_effect_on_next_pop(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock())
    frontier.enqueue_many(many("a.com", 5) + many("b.com", 5))
    DomainConfig(redis_client, frontier).set_throttle("a.com", DomainThrottle(10, 1))
    urls = pop_urls(frontier, 10)
    assert sum(url.startswith("http://a.com") for url in urls) == 1
    assert sum(url.startswith("http://b.com") for url in urls) == 5


def test_scale_reduces_the_limit(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock())
    frontier.enqueue_many(many("a.com", 10))
    DomainConfig(redis_client, frontier).set_throttle("a.com", DomainThrottle(10, 10, scale=0.35))
    assert len(pop_urls(frontier, 10)) == 3


def test_zero_limit_pauses_the_domain(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock())
    frontier.enqueue_many(many("a.com", 2))
    config = DomainConfig(redis_client, frontier)
    config.set_throttle("a.com", DomainThrottle(10, 5, scale=0.0))
    result = frontier.pop(VIEW, 2)
    assert (result.requests, result.wait_s) == ([], 30.0)
    config.remove_throttle("a.com")
    assert len(pop_urls(frontier, 2)) == 2


def test_blacklist_and_unblacklist_take_effect_on_next_pop(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock())
    frontier.enqueue_many(many("a.com", 2))
    config = DomainConfig(redis_client, frontier)
    config.add_blacklist("a.com")
    assert pop_urls(frontier, 2) == []
    config.remove_blacklist("a.com")
    assert len(pop_urls(frontier, 2)) == 2


def test_replace_all_applies_a_whole_configuration(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock())
    config = DomainConfig(redis_client, frontier)
    config.set_throttle("old.com", DomainThrottle(5, 5))
    config.replace_all({"a.com": DomainThrottle(60, 2)}, {"bad.com"})
    assert config.throttles() == {"a.com": DomainThrottle(60.0, 2, 1.0)}
    assert config.blacklist() == {"bad.com"}


def test_malformed_override_falls_back_to_defaults(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock(), QUEUE_HITS=2, QUEUE_WINDOW=10)
    redis_client.hset(keys.domain_throttle_config(), "a.com", b"{not json")
    frontier.enqueue_many(many("a.com", 5))
    assert len(pop_urls(frontier, 5)) == 2


def test_each_ip_has_its_own_throttle(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock(), QUEUE_HITS=1, QUEUE_WINDOW=10)
    frontier.enqueue_many(many("a.com", 4))
    assert len(pop_urls(frontier, 4, DispatchView("link", "10.0.0.1"))) == 1
    assert len(pop_urls(frontier, 4, DispatchView("link", "10.0.0.2"))) == 1
    assert redis_client.exists(keys.throttle_window("a.com", spiderid="link", ip="10.0.0.2"))


def test_without_ip_scope_all_crawlers_share_the_throttle(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock(), QUEUE_HITS=1, QUEUE_WINDOW=10,
                             SCHEDULER_IP_ENABLED=False)
    frontier.enqueue_many(many("a.com", 4))
    assert len(pop_urls(frontier, 4, DispatchView("link", "10.0.0.1"))) == 1
    assert pop_urls(frontier, 4, DispatchView("link", "10.0.0.2")) == []
    assert redis_client.exists(keys.throttle_window("a.com", spiderid="link", ip=None))


def test_without_type_scope_spiders_share_the_throttle(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock(), QUEUE_HITS=1, QUEUE_WINDOW=10,
                             SCHEDULER_TYPE_ENABLED=False, SCHEDULER_IP_ENABLED=False)
    frontier.enqueue_many(many("a.com", 2) + [req("http://a.com/o", spiderid="other")])
    assert len(pop_urls(frontier, 4, DispatchView("link"))) == 1
    assert pop_urls(frontier, 4, DispatchView("other")) == []
    assert redis_client.exists(keys.throttle_window("a.com", spiderid=None, ip=None))


def test_wait_for_work_returns_once_work_was_enqueued(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/")])
    frontier.wait_for_work(VIEW, timeout_s=60)
    assert redis_client.llen(keys.wake_list("link")) == 0
    assert pop_urls(frontier, 1) == ["http://a.com/"]


def test_wait_for_work_times_out_without_work(redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, ManualClock())
    frontier.wait_for_work(VIEW, timeout_s=0.01)
    assert frontier.pop(VIEW, 1).wait_s is None
