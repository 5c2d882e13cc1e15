"""The URL funnel as the frontier writes it (inside the enqueue script) and reads it, and the
enqueue time every queued item carries. Real redis-server, injected clock."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster import keys
from tests.support.frontier import (
    START_MS,
    VIEW,
    CountingConnection,
    FrontierFactory,
    ManualClock,
    drain,
    req,
)
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients

pytestmark = pytest.mark.integration

ZERO_FUNNEL = {"submitted": 0, "queued": 0, "deduplicated": 0, "filtered": {}, "fetched": {},
               "retried": 0, "dropped": 0, "delivered": 0}


def funnel(frontier, crawlid: str = "c1") -> dict:  # type: ignore[no-untyped-def]
    return frontier.crawl_funnels("link", [crawlid])[crawlid].as_dict()


def test_new_duplicate_and_stopped_crawl_urls_are_counted_exactly(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/1"), req("http://a.com/2"), req("http://a.com/1")],
                          dedupe=True)
    frontier.enqueue_many([req("http://a.com/2"), req("http://b.com/3")], dedupe=True)
    redis_client.sadd(keys.crawl_blacklist("link"), "c1")
    frontier.enqueue_many([req("http://a.com/4"), req("http://a.com/5")], dedupe=True)
    assert funnel(frontier) == {**ZERO_FUNNEL, "submitted": 7, "queued": 3, "deduplicated": 2,
                                "filtered": {"blacklisted": 2}}


def test_each_crawl_of_a_batch_has_its_own_funnel(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/", crawlid="x"), req("http://a.com/", crawlid="y"),
                           req("http://a.com/", crawlid="y")], dedupe=True)
    funnels = frontier.crawl_funnels("link", ["x", "y"])
    assert {crawlid: f.as_dict() for crawlid, f in funnels.items()} == {
        "x": {**ZERO_FUNNEL, "submitted": 1, "queued": 1},
        "y": {**ZERO_FUNNEL, "submitted": 2, "queued": 1, "deduplicated": 1}}


def test_a_domain_blacklisted_without_backlog_is_its_own_reason(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), SCHEDULER_BACKLOG_BLACKLIST=False)
    redis_client.sadd(keys.domain_blacklist(), "bad.com")
    frontier.enqueue_many([req("http://www.bad.com/"), req("http://good.com/")], dedupe=True)
    assert funnel(frontier) == {**ZERO_FUNNEL, "submitted": 2, "queued": 1,
                                "filtered": {"domain_blacklisted": 1}}


def test_requests_without_dedupe_count_as_queued(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/"), req("http://a.com/")], dedupe=False)
    assert funnel(frontier) == {**ZERO_FUNNEL, "submitted": 2, "queued": 2}


def test_a_retry_enqueued_outside_the_funnel_is_not_counted_again(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/")], dedupe=True)
    frontier.enqueue_many([req("http://a.com/", retry_times=1, dont_filter=True)], funnel=False)
    assert (funnel(frontier), len(drain(frontier))) == (
        {**ZERO_FUNNEL, "submitted": 1, "queued": 1}, 2)


def test_a_depth_upgrade_counts_as_deduplicated(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/x", curdepth=3, maxdepth=5)], dedupe=True)
    result = frontier.enqueue_many([req("http://a.com/x", curdepth=1, maxdepth=5)], dedupe=True)
    assert (result.depth_upgrades, funnel(frontier)) == (
        1, {**ZERO_FUNNEL, "submitted": 2, "queued": 1, "deduplicated": 1})


def test_the_funnel_outlives_a_purge_of_its_crawl(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/1"), req("http://b.com/2")], dedupe=True)
    removed = frontier.purge("link", "app", "c1")
    frontier.enqueue_many([req("http://a.com/3")], dedupe=True)  # a link found in flight
    assert (removed, funnel(frontier)) == (
        2, {**ZERO_FUNNEL, "submitted": 3, "queued": 2, "filtered": {"blacklisted": 1}})


def test_the_funnel_expires_with_the_dupefilter_timeout_renewed_on_write(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), DUPEFILTER_TIMEOUT=300)
    key = keys.crawl_funnel("link", "c1")
    frontier.enqueue_many([req("http://a.com/1")], dedupe=True)
    first_ttl_ms = redis_client.pttl(key)
    redis_client.pexpire(key, 1000)
    frontier.enqueue_many([req("http://a.com/2")], dedupe=True)
    assert (0 < first_ttl_ms <= 300_000, 1000 < redis_client.pttl(key) <= 300_000) == (True, True)


def test_an_unknown_crawl_has_an_all_zero_funnel(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    assert (funnel(frontier, "never"), frontier.crawl_funnels("link", [])) == (ZERO_FUNNEL, {})


def test_funnels_of_many_crawls_are_read_in_one_round_trip(
        redis_url: str, frontier_factory: FrontierFactory) -> None:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    frontier = frontier_factory(client, ManualClock())
    frontier.enqueue_many([req("http://a.com/", crawlid=f"k{i}") for i in range(20)], dedupe=True)
    CountingConnection.sent = 0
    funnels = frontier.crawl_funnels("link", [f"k{i}" for i in range(20)])
    assert (CountingConnection.sent, sum(f.queued for f in funnels.values())) == (1, 20)
    client.flushdb()
    client.close()


def test_a_popped_request_carries_its_enqueue_time(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    frontier.enqueue_many([req("http://a.com/1")])
    clock.advance(2500)
    frontier.enqueue_many([req("http://a.com/2")])
    clock.advance(700)
    leased = frontier.pop(VIEW, 2).requests
    assert [(r.request["url"], r.enqueued_at_ms, r.dispatched_at_ms) for r in leased] == [
        ("http://a.com/1", START_MS, START_MS + 3200),
        ("http://a.com/2", START_MS + 2500, START_MS + 3200)]


def test_a_request_released_to_a_lower_priority_keeps_its_enqueue_time(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    frontier.enqueue_many([req("http://a.com/1")])
    clock.advance(100)
    frontier.release([frontier.pop(VIEW, 1).requests[0].lease_id], priority_delta=-10)
    clock.advance(100)
    again = frontier.pop(VIEW, 1).requests[0]
    assert (again.request["priority"], again.enqueued_at_ms) == (-9, START_MS)


def test_an_item_queued_without_an_enqueue_time_still_pops(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/old")])
    sub = keys.domain_subqueue("link", "a.com", 1, "c1")
    item = redis_client.lindex(sub, 0)
    assert item is not None
    head, body = item.split(b" ", 1)
    redis_client.lset(sub, 0, head.split(b":")[0] + b" " + body)  # the item as older versions wrote it
    leased = frontier.pop(VIEW, 1).requests[0]
    assert (leased.request["url"], leased.enqueued_at_ms) == ("http://a.com/old", None)
