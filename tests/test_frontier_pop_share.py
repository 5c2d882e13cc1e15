"""An unthrottled domain hands out its share of a pop at once (``take_items`` in
frontier_pop.lua): same requests, same order and same counts as one at a time. Real
redis-server, injected clock."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster import keys
from tests.support.frontier import VIEW, FrontierFactory, ManualClock, req
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients

pytestmark = pytest.mark.integration


def test_a_domain_alone_gives_the_whole_pop_in_queue_order(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req(f"http://a.com/{i}") for i in range(30)])
    urls = [leased.request["url"] for leased in frontier.pop(VIEW, 12).requests]
    assert urls == [f"http://a.com/{i}" for i in range(12)]
    assert [leased.request["url"] for leased in frontier.pop(VIEW, 100).requests] == \
        [f"http://a.com/{i}" for i in range(12, 30)]
    assert frontier.pop(VIEW, 5).requests == []
    assert redis_client.hgetall(keys.crawl_counts("link", "c1")) == {b"~leased": b"30"}


def test_two_crawls_of_one_domain_keep_their_interleaved_order(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    """Two sub-queues at one priority: the share stops where the other crawl's head is older."""
    frontier = frontier_factory(redis_client, ManualClock())
    for i in range(6):
        frontier.enqueue_many([req(f"http://a.com/x{i}", crawlid="x")])
        frontier.enqueue_many([req(f"http://a.com/y{i}", crawlid="y")])
    urls = [leased.request["url"] for leased in frontier.pop(VIEW, 12).requests]
    assert urls == [f"http://a.com/{c}{i}" for i in range(6) for c in "xy"]


def test_a_higher_priority_queue_comes_first_whatever_the_share(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req(f"http://a.com/low{i}", priority=1) for i in range(5)])
    frontier.enqueue_many([req(f"http://a.com/high{i}", priority=5) for i in range(3)])
    urls = [leased.request["url"] for leased in frontier.pop(VIEW, 8).requests]
    assert urls == [f"http://a.com/high{i}" for i in range(3)] + \
        [f"http://a.com/low{i}" for i in range(5)]


def test_due_domains_share_a_pop_evenly(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    for domain in ("a.com", "b.com", "c.com"):
        frontier.enqueue_many([req(f"http://{domain}/{i}") for i in range(20)])
    domains = [leased.domain for leased in frontier.pop(VIEW, 12).requests]
    assert sorted(domains.count(d) for d in ("a.com", "b.com", "c.com")) == [4, 4, 4]


def test_a_throttled_domain_still_gives_one_per_pass(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_WINDOW=60, QUEUE_HITS=3,
                                QUEUE_MODERATED=False)
    frontier.enqueue_many([req(f"http://a.com/{i}") for i in range(10)])
    assert len(frontier.pop(VIEW, 10).requests) == 3  # the window's 3 hits, then its limit
