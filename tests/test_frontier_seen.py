"""The crawler's seen cache (``frontier/seen.py``): repeated links never reach Redis, and the
queue, the dupefilter and the URL funnel end exactly as they would without it. The cache
itself is pure (unit tests); the rest runs against a real redis-server."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.crawler.common.funnel import FunnelCounter
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.seen import SeenCache, safe_window_s
from tests.support.frontier import (
    VIEW,
    CountingConnection,
    FrontierFactory,
    ManualClock,
    req,
    settings,
)
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients


class Seconds:
    """A monotonic clock the test moves (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def key(url: str, crawlid: str = "c1") -> str:
    found = SeenCache.key(req(url, crawlid=crawlid))
    assert found is not None
    return found


# --- the cache alone ---------------------------------------------------------------------------

def test_a_learned_link_covers_its_depth_and_deeper_only() -> None:
    cache = SeenCache(60, 100, clock=Seconds())
    cache.learn([(key("http://a.com/1"), 3)])
    assert cache.covers(key("http://a.com/1"), 3)
    assert cache.covers(key("http://a.com/1"), 9)
    assert not cache.covers(key("http://a.com/1"), 2)  # shallower: may be a depth upgrade
    assert not cache.covers(key("http://a.com/1", crawlid="c2"), 5)  # another crawl
    assert not cache.covers(key("http://a.com/2"), 5)
    assert (cache.hits, cache.misses) == (2, 3)


def test_relearning_keeps_the_smaller_live_depth_and_forgets_a_dead_one() -> None:
    clock = Seconds()
    cache = SeenCache(60, 100, clock=clock)
    cache.learn([(key("http://a.com/"), 1)])
    cache.learn([(key("http://a.com/"), 4)])
    assert cache.covers(key("http://a.com/"), 1)
    clock.now += 61  # the depth-1 entry died: what it said may no longer hold
    cache.learn([(key("http://a.com/"), 4)])
    assert not cache.covers(key("http://a.com/"), 1)
    assert cache.covers(key("http://a.com/"), 4)


def test_entries_die_after_the_window() -> None:
    clock = Seconds()
    cache = SeenCache(60, 100, clock=clock)
    cache.learn([(key("http://a.com/"), 0)])
    clock.now += 59.9
    assert cache.covers(key("http://a.com/"), 0)
    clock.now += 0.2
    assert not cache.covers(key("http://a.com/"), 0)


def test_memory_is_bounded_by_two_generations() -> None:
    cache = SeenCache(60, 10, clock=Seconds())
    cache.learn([(key(f"http://a.com/{i}"), 0) for i in range(100)])
    assert len(cache) <= 10
    assert cache.covers(key("http://a.com/99"), 0)
    assert not cache.covers(key("http://a.com/0"), 0)


def test_only_plain_gets_are_cacheable() -> None:
    assert SeenCache.key(req("http://a.com/")) == "link\0c1\0http://a.com/"
    assert SeenCache.key(req("http://a.com/", method="POST")) is None
    assert SeenCache.key(req("http://a.com/", body="x=1")) is None
    assert SeenCache.key(req("http://a.com/", body_b64="eA==")) is None
    assert SeenCache.key(req("http://a.com/", dont_filter=True)) is None


@pytest.mark.parametrize("fields", [
    {}, {"method": "GET"}, {"method": None}, {"method": "POST"}, {"body": "x=1"}, {"body": ""},
    {"body_b64": "eA=="}, {"dont_filter": True}, {"dont_filter": 0}, {"crawlid": 7},
    {"spiderid": None}, {"crawlid": "c\0d"}])
def test_the_key_is_its_prefix_and_the_url(fields: dict[str, Any]) -> None:
    """``key_prefix`` (shared by a page's links in one enqueue call) is what ``key`` puts
    before a str url, and None exactly when ``key`` is."""
    request = {**req("http://a.com/é?q=1"), **fields}
    prefix, whole = SeenCache.key_prefix(request), SeenCache.key(request)
    assert (prefix is None) == (whole is None)
    assert whole is None or whole == prefix + request["url"]


def test_the_window_never_outlives_half_a_dupefilter() -> None:
    assert safe_window_s(settings()) == 120
    assert safe_window_s(settings(DUPEFILTER_TIMEOUT=100)) == 50
    assert safe_window_s(settings(CRAWL_STATE_TTL=30)) == 15
    assert SeenCache.from_settings(settings(FRONTIER_SEEN_CACHE_SIZE=0)) is None


# --- against Redis -----------------------------------------------------------------------------

def cached_frontier(frontier_factory: FrontierFactory, client: redis.Redis,
                    clock: ManualClock | None = None, seconds: Seconds | None = None,
                    **overrides: Any) -> Frontier:
    frontier = frontier_factory(client, clock, seen_cache=True, **overrides)
    assert frontier.seen is not None
    frontier.seen = SeenCache(frontier.seen.window_s, 1000, clock=seconds or Seconds())
    return frontier


def links(n: int, depth: int = 1, crawlid: str = "c1") -> list[dict[str, Any]]:
    return [req(f"http://a.com/{i}", crawlid=crawlid, curdepth=depth, maxdepth=5)
            for i in range(n)]


def test_a_repeated_batch_costs_no_round_trip(
        redis_url: str, frontier_factory: FrontierFactory) -> None:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    client.flushdb()
    try:
        frontier = cached_frontier(frontier_factory, client, ManualClock())
        first = frontier.enqueue_many(links(20), dedupe=True)
        assert (first.queued, first.cached) == (20, 0)
        before = CountingConnection.sent
        again = frontier.enqueue_many(links(20) + links(20, depth=3), dedupe=True)
        assert CountingConnection.sent == before
        assert (again.queued, again.duplicates, again.cached) == (0, 40, 40)
        assert again.cached_by_crawl == {("link", "c1"): 40}
        mixed = frontier.enqueue_many(links(21), dedupe=True)  # one new link: one round trip
        assert CountingConnection.sent == before + 1
        assert (mixed.queued, mixed.duplicates, mixed.cached) == (1, 20, 20)
    finally:
        client.flushdb()
        client.close()


def test_queue_dupefilter_and_funnel_end_as_without_the_cache(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    """The same sequence of batches on two crawls, one through a cached frontier (its skipped
    links counted by the crawler's funnel and written by an ack), one without: same queue
    contents, same dupefilter, same funnel."""
    clock = ManualClock()
    plain = frontier_factory(redis_client, clock)
    cached = cached_frontier(frontier_factory, redis_client, clock)
    counter = FunnelCounter()
    batches = [links(10, 2), links(15, 3), links(15, 1), links(5, 4) + links(20, 2), links(3, 0)]
    for batch in batches:
        plain.enqueue_many([{**r, "crawlid": "plain"} for r in batch], dedupe=True)
        result = cached.enqueue_many([{**r, "crawlid": "cached"} for r in batch], dedupe=True)
        counter.add_cached(result.cached_by_crawl)
    taken = counter.take()
    assert sum(taken[("link", "cached")].values()) > 0  # the cache did skip links
    cached.ack([], funnel=taken)
    plain_funnel = plain.crawl_funnels("link", ["plain"])["plain"].as_dict()
    cached_funnel = cached.crawl_funnels("link", ["cached"])["cached"].as_dict()
    assert cached_funnel == plain_funnel
    assert (plain_funnel["submitted"], plain_funnel["queued"]) == (68, 20)
    assert redis_client.hgetall(keys.dupefilter("link", "cached")) == \
        redis_client.hgetall(keys.dupefilter("link", "plain"))
    by_crawl: dict[str, list[tuple[str, int]]] = {"plain": [], "cached": []}
    while batch := plain.pop(VIEW, 100).requests:
        for leased in batch:
            by_crawl[leased.request["crawlid"]].append(
                (leased.request["url"], leased.request["curdepth"]))
    assert sorted(by_crawl["cached"]) == sorted(by_crawl["plain"])
    assert len(by_crawl["plain"]) == 20  # each URL once, at its smallest depth


def test_a_shallower_repeat_still_reaches_redis_as_a_depth_upgrade(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = cached_frontier(frontier_factory, redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/x", curdepth=3, maxdepth=5)], dedupe=True)
    upgraded = frontier.enqueue_many([req("http://a.com/x", curdepth=1, maxdepth=5)], dedupe=True)
    assert (upgraded.cached, upgraded.depth_upgrades, upgraded.queued) == (0, 1, 1)
    assert [leased.request["curdepth"] for leased in frontier.pop(VIEW, 10).requests] == [1]
    deeper = frontier.enqueue_many([req("http://a.com/x", curdepth=2, maxdepth=5)], dedupe=True)
    assert (deeper.cached, deeper.queued) == (1, 0)


def test_a_batch_with_a_blacklisted_request_teaches_nothing(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = cached_frontier(frontier_factory, redis_client, ManualClock())
    redis_client.sadd(keys.crawl_blacklist("link"), "stopped")
    result = frontier.enqueue_many([req("http://a.com/1"), req("http://a.com/2", crawlid="stopped")],
                                   dedupe=True)
    assert (result.queued, result.blacklisted) == (1, 1)
    assert frontier.seen is not None and len(frontier.seen) == 0
    again = frontier.enqueue_many([req("http://a.com/1")], dedupe=True)
    assert (again.cached, again.duplicates) == (0, 1)  # asked Redis, then learned
    assert frontier.seen.covers(key("http://a.com/1"), 0)


def test_after_the_window_a_repeat_asks_redis_again(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    seconds = Seconds()
    frontier = cached_frontier(frontier_factory, redis_client, ManualClock(), seconds)
    frontier.enqueue_many(links(5), dedupe=True)
    assert frontier.enqueue_many(links(5), dedupe=True).cached == 5
    seconds.now += 121
    result = frontier.enqueue_many(links(5), dedupe=True)
    assert (result.cached, result.duplicates, result.queued) == (0, 5, 0)


def test_retries_and_dont_filter_requests_bypass_the_cache(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = cached_frontier(frontier_factory, redis_client, ManualClock())
    frontier.enqueue_many(links(3), dedupe=True)
    assert frontier.enqueue_many(links(3), dedupe=False).queued == 3
    forced = [{**r, "dont_filter": True} for r in links(3)]
    assert frontier.enqueue_many(forced, dedupe=True).queued == 3


pytestmark = pytest.mark.integration
