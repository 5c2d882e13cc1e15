"""Batches through the enqueue script: work it does once per batch (crawl blacklist
check, dupefilter TTL, sequence counter, crawl counts, app crawls) gives the
same result as doing it per request."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster import keys
from tests.support.frontier import FrontierFactory, ManualClock, drain, req
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients

pytestmark = pytest.mark.integration


def test_same_url_twice_in_one_batch_is_queued_once(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    result = frontier.enqueue_many([req("http://a.com/x"), req("HTTP://A.COM/x")], dedupe=True)
    assert (result.queued, result.duplicates) == (1, 1)


def test_dupefilter_of_every_crawl_in_a_batch_gets_its_ttl(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), DUPEFILTER_TIMEOUT=100)
    frontier.enqueue_many([req("http://a.com/1", crawlid="c1"), req("http://a.com/2", crawlid="c2"),
                           req("http://a.com/1", crawlid="c1")], dedupe=True)
    ttls_ms = [redis_client.pttl(keys.dupefilter("link", crawl)) for crawl in ("c1", "c2")]
    assert all(90_000 < ttl_ms <= 100_000 for ttl_ms in ttls_ms)


def test_sequence_counts_every_queued_request_across_batches(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req(f"http://a.com/{i}") for i in range(3)])
    frontier.enqueue_many([req(f"http://b.com/{i}") for i in range(4)])
    assert int(redis_client.get(keys.enqueue_sequence("link"))) == 7


def test_equal_priorities_stay_fifo_across_batches(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/first"), req("http://a.com/second")])
    frontier.enqueue_many([req("http://a.com/third"), req("http://a.com/fourth")])
    assert drain(frontier) == ["http://a.com/first", "http://a.com/second",
                               "http://a.com/third", "http://a.com/fourth"]


def test_crawl_counts_sum_a_batch_per_domain_and_priority(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/1"), req("http://a.com/2"),
                           req("http://a.com/3", priority=5), req("http://b.com/1")])
    counts = redis_client.hgetall(keys.crawl_counts("link", "c1"))
    assert counts == {b"a.com|1": b"2", b"a.com|5": b"1", b"b.com|1": b"1"}


def test_blacklisted_crawl_is_refused_for_every_request_of_a_batch(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    redis_client.sadd(keys.crawl_blacklist("link"), "stopped")
    result = frontier.enqueue_many([req("http://a.com/1", crawlid="stopped"), req("http://b.com/"),
                                    req("http://a.com/2", crawlid="stopped")])
    assert (result.queued, result.blacklisted) == (1, 2)


def test_app_crawls_lists_each_crawl_of_a_batch(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/1", crawlid="x"), req("http://a.com/2", crawlid="y"),
                           req("http://b.com/3", crawlid="x")])
    assert redis_client.smembers(keys.app_crawls("link", "app")) == {b"x", b"y"}
