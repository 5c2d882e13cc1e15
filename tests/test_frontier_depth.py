"""Depth upgrades: a URL found again at a smaller depth than the crawl first saw it is queued at
that depth, once, inside the enqueue round trip (real Redis)."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import Frontier
from tests.support.frontier import VIEW, FrontierFactory, ManualClock, drain, req
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients

pytestmark = pytest.mark.integration


def link(url: str, depth: int, **fields: object) -> dict[str, object]:
    return req(url, **{"curdepth": depth, "maxdepth": 3, "priority": -10 * depth, **fields})


@pytest.fixture
def frontier(redis_client: redis.Redis, frontier_factory: FrontierFactory) -> Frontier:
    return frontier_factory(redis_client, ManualClock())


def popped(frontier: Frontier) -> list[tuple[str, int, int, bool]]:
    return [(item.request["url"], item.request["curdepth"], item.request["priority"],
             bool(item.request.get("depth_upgrade")))
            for item in frontier.pop(VIEW, 100).requests]


def test_a_queued_copy_moves_to_the_smaller_depth(frontier: Frontier) -> None:
    first = frontier.enqueue_many([link("http://a.com/x", 3), link("http://a.com/y", 3)],
                                  dedupe=True)
    again = frontier.enqueue_many([link("http://a.com/x", 2)], dedupe=True)
    assert (first.queued, again.queued, again.depth_upgrades, again.duplicates) == (2, 1, 1, 0)
    assert frontier.crawl_info("link", "app", "c1").domains["a.com"].total == 2
    assert popped(frontier) == [("http://a.com/x", 2, -20, False), ("http://a.com/y", 3, -30, False)]


def test_a_fetched_url_found_nearer_comes_again_marked(frontier: Frontier,
                                                       redis_client: redis.Redis) -> None:
    frontier.enqueue_many([link("http://a.com/x", 3)], dedupe=True)
    (leased,) = frontier.pop(VIEW, 1).requests
    assert frontier.ack([leased.lease_id]) == 1
    again = frontier.enqueue_many([link("http://a.com/x", 1)], dedupe=True)
    assert (again.queued, again.depth_upgrades) == (1, 1)
    assert popped(frontier) == [("http://a.com/x", 1, -10, True)]


def test_the_same_or_a_larger_depth_is_a_duplicate(frontier: Frontier) -> None:
    frontier.enqueue_many([link("http://a.com/x", 2)], dedupe=True)
    again = frontier.enqueue_many([link("http://a.com/x", 2), link("http://a.com/x", 3)],
                                  dedupe=True)
    assert (again.queued, again.duplicates, again.depth_upgrades) == (0, 2, 0)
    assert drain(frontier) == ["http://a.com/x"]


def test_within_one_batch_the_smaller_depth_wins_once(frontier: Frontier) -> None:
    result = frontier.enqueue_many([link("http://a.com/x", 3), link("http://a.com/x", 1),
                                    link("http://a.com/x", 2)], dedupe=True)
    assert (result.queued, result.depth_upgrades, result.duplicates) == (2, 1, 1)
    assert frontier.crawl_info("link", "app", "c1").total_pending == 1
    assert popped(frontier) == [("http://a.com/x", 1, -10, False)]


def test_removing_the_head_keeps_the_domain_order_and_counts(frontier: Frontier,
                                                              redis_client: redis.Redis) -> None:
    frontier.enqueue_many([link(f"http://a.com/{i}", 3) for i in range(4)], dedupe=True)
    frontier.enqueue_many([link("http://a.com/0", 2), link("http://a.com/3", 2)], dedupe=True)
    counts = redis_client.hgetall(keys.crawl_counts("link", "c1"))
    assert counts == {b"a.com|-30": b"2", b"a.com|-20": b"2"}
    assert [url for url, *_ in popped(frontier)] == [
        "http://a.com/0", "http://a.com/3", "http://a.com/1", "http://a.com/2"]
    assert redis_client.hgetall(keys.crawl_counts("link", "c1")) == {b"~leased": b"4"}


def test_requests_without_dedupe_or_depth_are_unchanged(frontier: Frontier) -> None:
    seeds = frontier.enqueue_many([req("http://a.com/"), req("http://a.com/")])
    assert (seeds.queued, seeds.depth_upgrades) == (2, 0)
    deduped = frontier.enqueue_many([req("http://b.com/"), req("http://b.com/")], dedupe=True)
    assert (deduped.queued, deduped.duplicates) == (1, 1)


def test_a_crawl_inside_its_depth_limit_never_fetches_a_page_twice(
        frontier: Frontier, redis_client: redis.Redis) -> None:
    deep = {"maxdepth": 10}
    frontier.enqueue_many([link("http://a.com/x", 3, **deep)], dedupe=True)
    (leased,) = frontier.pop(VIEW, 1).requests
    assert frontier.ack([leased.lease_id]) == 1
    again = frontier.enqueue_many([link("http://a.com/x", 1, **deep)], dedupe=True)
    assert (again.queued, again.duplicates, again.depth_upgrades) == (0, 0, 1)
    assert redis_client.llen(keys.crawl_held_upgrades("link", "c1")) == 1  # held, not queued
    # a queued copy still moves (no extra fetch), and the record keeps the smaller depth
    frontier.enqueue_many([link("http://a.com/y", 4, **deep)], dedupe=True)
    moved = frontier.enqueue_many([link("http://a.com/y", 2, **deep)], dedupe=True)
    assert (moved.queued, moved.depth_upgrades) == (1, 1)
    assert popped(frontier) == [("http://a.com/y", 2, -20, False)]
    assert frontier.enqueue_many([link("http://a.com/x", 2, **deep)], dedupe=True).duplicates == 1


def test_held_upgrades_are_released_when_the_crawl_reaches_its_maxdepth(
        frontier: Frontier, redis_client: redis.Redis) -> None:
    deep = {"maxdepth": 4}
    frontier.enqueue_many([link("http://a.com/x", 3, **deep)], dedupe=True)
    (leased,) = frontier.pop(VIEW, 1).requests
    frontier.ack([leased.lease_id])
    frontier.enqueue_many([link("http://a.com/x", 2, **deep)], dedupe=True)
    frontier.enqueue_many([link("http://a.com/x", 1, **deep)], dedupe=True)  # one hold per URL
    assert redis_client.llen(keys.crawl_held_upgrades("link", "c1")) == 1
    assert frontier.crawl_info("link", "app", "c1").total_pending == 0
    limit = frontier.enqueue_many([link("http://b.com/deep", 4, **deep)], dedupe=True)
    assert limit.queued == 2  # the page at maxdepth and the released upgrade
    assert sorted(popped(frontier)) == [("http://a.com/x", 1, -10, True),
                                        ("http://b.com/deep", 4, -40, False)]
    assert not redis_client.exists(keys.crawl_held_upgrades("link", "c1"))


def test_a_purge_drops_the_held_upgrades(frontier: Frontier, redis_client: redis.Redis) -> None:
    frontier.enqueue_many([link("http://a.com/x", 3, maxdepth=9)], dedupe=True)
    (leased,) = frontier.pop(VIEW, 1).requests
    frontier.ack([leased.lease_id])
    frontier.enqueue_many([link("http://a.com/x", 1, maxdepth=9)], dedupe=True)
    assert redis_client.exists(keys.crawl_held_upgrades("link", "c1"))
    frontier.purge("link", "app", "c1")
    assert not redis_client.exists(keys.crawl_held_upgrades("link", "c1"))


def test_a_url_with_escaped_characters_is_found_in_the_queue(frontier: Frontier) -> None:
    odd = 'http://a.com/q?x="1"&y=\\z'
    frontier.enqueue_many([link(odd, 3), link(odd + "2", 3)], dedupe=True)
    moved = frontier.enqueue_many([link(odd, 2)], dedupe=True)
    assert (moved.queued, moved.depth_upgrades) == (1, 1)
    assert frontier.crawl_info("link", "app", "c1").total_pending == 2
    assert sorted(popped(frontier)) == [(odd, 2, -20, False), (odd + "2", 3, -30, False)]
