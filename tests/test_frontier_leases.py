"""Leases (at-least-once), dedupe, crawl info and purge against a real redis-server, on both
frontier clients."""

from __future__ import annotations

import time

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import PurgeResult
from tests.support.frontier import (
    VIEW,
    FrontierFactory,
    ManualClock,
    drain,
    make_frontier,
    pop_urls,
    req,
)
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients

pytestmark = pytest.mark.integration


def test_acked_request_never_returns(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, LEASE_TIMEOUT=10)
    frontier.enqueue_many([req("http://a.com/")])
    leased = frontier.pop(VIEW, 1).requests
    assert frontier.ack([leased[0].lease_id]) == 1
    clock.advance(60_000)
    assert frontier.reap() == 0
    assert drain(frontier) == []


def test_released_request_goes_back_to_the_head(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/1"), req("http://a.com/2")])
    first = frontier.pop(VIEW, 1).requests[0]
    assert frontier.release([first.lease_id]) == 1
    assert drain(frontier) == ["http://a.com/1", "http://a.com/2"]


def test_release_with_negative_delta_lowers_priority(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/1"), req("http://a.com/2")])
    first = frontier.pop(VIEW, 1).requests[0]
    frontier.release([first.lease_id], priority_delta=-1)
    leased = frontier.pop(VIEW, 2).requests
    assert [(item.request["url"], item.request["priority"]) for item in leased] == [
        ("http://a.com/2", 1), ("http://a.com/1", 0)]


def test_reap_returns_expired_leases_only(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, LEASE_TIMEOUT=10)
    frontier.enqueue_many([req("http://a.com/1")])
    frontier.pop(VIEW, 1)
    clock.advance(9_999)
    frontier.enqueue_many([req("http://b.com/2")])
    frontier.pop(VIEW, 1)
    clock.advance(1)
    assert frontier.reap() == 1
    assert drain(frontier) == ["http://a.com/1"]


def test_release_held_gives_back_everything_on_shutdown(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req(f"http://d{i}.com/") for i in range(4)])
    leased = frontier.pop(VIEW, 4).requests
    frontier.ack([leased[0].lease_id])
    assert frontier.release_held() == 3
    assert len(drain(frontier)) == 3


def test_duplicate_is_counted_and_not_queued(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/?b=1&a=2")], dedupe=True)
    result = frontier.enqueue_many([req("http://a.com/?a=2&b=1"), req("http://a.com/new")],
                                   dedupe=True)
    assert (result.queued, result.duplicates) == (1, 1)


def test_dont_filter_skips_the_duplicate_check(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/")], dedupe=True)
    result = frontier.enqueue_many([req("http://a.com/", dont_filter=True)], dedupe=True)
    assert (result.queued, result.duplicates) == (1, 0)


def test_another_crawl_may_crawl_the_same_url(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/", crawlid="one")], dedupe=True)
    result = frontier.enqueue_many([req("http://a.com/", crawlid="two")], dedupe=True)
    assert result.queued == 1


def test_many_fingerprints_in_one_bucket_are_told_apart(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    batch = [req(f"http://a.com/{i}") for i in range(20_000)]
    assert frontier.enqueue_many(batch, dedupe=True).queued == 20_000
    assert frontier.enqueue_many(batch[::1000], dedupe=True).duplicates == 20


def test_dupefilter_expires_after_its_timeout(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), DUPEFILTER_TIMEOUT=0.2)
    frontier.enqueue_many([req("http://a.com/")], dedupe=True)
    filter_key = keys.dupefilter("link", "c1")
    assert 0 < redis_client.pttl(filter_key) <= 200
    deadline = time.monotonic() + 5
    while redis_client.exists(filter_key) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert frontier.enqueue_many([req("http://a.com/")], dedupe=True).queued == 1


def test_info_counts_match_queue_content(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/1", priority=5), req("http://a.com/2", priority=2),
                           req("http://b.com/1", priority=3), req("http://c.com/", crawlid="c2")])
    leased = frontier.pop(VIEW, 1).requests
    info = frontier.crawl_info("link", "app", "c1").as_dict()
    assert info == {"spiderid": "link", "appid": "app", "crawlid": "c1", "total_pending": 2,
                    "total_domains": 2, "in_flight": 1,
                    "domains": {"a.com": {"total": 1, "high_priority": 2, "low_priority": 2},
                                "b.com": {"total": 1, "high_priority": 3, "low_priority": 3}}}
    assert leased[0].request["url"] == "http://a.com/1"


def test_info_per_app_sums_its_crawls(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/1"), req("http://a.com/2", crawlid="c2"),
                           req("http://a.com/3", appid="other", crawlid="c3")])
    info = frontier.crawl_info("link", "app")
    assert (info.total_pending, info.crawlids) == (2, ["c1", "c2"])


def test_purge_removes_the_crawl_and_its_leases_only(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req(f"http://d{i}.com/{i}") for i in range(10)]
                          + [req(f"http://d{i}.com/keep", crawlid="c2") for i in range(3)])
    leased = frontier.pop(VIEW, 2).requests
    assert frontier.purge("link", "app", "c1") == 10 - sum(
        item.request["crawlid"] == "c2" for item in leased)
    assert frontier.release([item.lease_id for item in leased]) == sum(
        item.request["crawlid"] == "c2" for item in leased)
    assert sorted(drain(frontier)) == [f"http://d{i}.com/keep" for i in range(3)]
    assert redis_client.sismember(keys.crawl_blacklist("link"), "c1")
    assert frontier.enqueue_many([req("http://new.com/")]).blacklisted == 1


def test_purge_by_app_removes_all_its_crawls(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), FRONTIER_PURGE_CHUNK=3)
    frontier.enqueue_many([req(f"http://a.com/{i}", crawlid=f"c{i % 2}") for i in range(10)]
                          + [req("http://a.com/x", appid="other", crawlid="o")])
    assert frontier.purge("link", "app") == 10
    assert pop_urls(frontier, 10) == ["http://a.com/x"]


def test_purge_detail_tells_queued_from_leased_and_the_prior_status(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), FRONTIER_PURGE_CHUNK=2)
    frontier.enqueue_many([req(f"http://d{i}.com/") for i in range(5)])
    frontier.pop(VIEW, 2)
    assert frontier.purge_detail("link", "app", "c1", reason="expired") == \
        PurgeResult(queued=3, in_flight=2, prior_status="running")
    assert frontier.purge_detail("link", "app", "c1") == PurgeResult(0, 0, "expired")
    assert frontier.purge("link", "app", "c1") == 0


def test_a_queue_filled_by_frontier_is_served_by_either_client(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    make_frontier(redis_client).enqueue_many([req("http://a.com/1"), req("http://b.com/2")])
    frontier = frontier_factory(redis_client)
    popped = frontier.pop(VIEW, 5).requests
    assert sorted(item.request["url"] for item in popped) == ["http://a.com/1", "http://b.com/2"]
    assert frontier.ack([popped[0].lease_id]) == 1
    assert frontier.crawl_info("link", "app", "c1").in_flight == 1


def test_app_counts_sum_each_crawl_per_domain_and_drop_finished_crawls(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://d.com/", crawlid="done")])
    (finished,) = frontier.pop(VIEW, 1).requests
    assert frontier.ack([finished.lease_id]) == 1
    frontier.enqueue_many([req("http://a.com/1", priority=5), req("http://a.com/2", priority=-3),
                           req("http://a.com/3", priority=1), req("http://b.com/1"),
                           req("http://c.com/", crawlid="c2")])
    (leased,) = frontier.pop(VIEW, 1).requests
    counts = frontier.app_counts("link", "app")
    assert set(counts) == {"c1", "c2"}
    assert (leased.request["url"], counts["c1"].in_flight) == ("http://a.com/1", 1)
    assert counts["c1"].domains == {"a.com": (2, -3, 1), "b.com": (1, 1, 1)}  # default priority 1
    assert (counts["c1"].total, counts["c2"].domains) == (3, {"c.com": (1, 1, 1)})
    assert not redis_client.sismember(keys.app_crawls("link", "app"), "done")


def test_a_stopped_crawl_leaves_the_blacklist_after_crawl_blacklist_ttl(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, CRAWL_BLACKLIST_TTL=60)
    frontier.purge("link", "app", "c1")
    clock.advance(30_000)
    frontier.purge("link", "app", "c2")
    assert redis_client.smembers(keys.crawl_blacklist("link")) == {b"c1", b"c2"}
    clock.advance(31_000)  # c1 blacklisted 61 s ago: trimmed by the next stop
    frontier.purge("link", "app", "c3")
    assert redis_client.smembers(keys.crawl_blacklist("link")) == {b"c2", b"c3"}
    assert redis_client.zrange(keys.crawl_blacklist_since("link"), 0, -1) == [b"c2", b"c3"]
    assert frontier.enqueue_many([req("http://again.com/", crawlid="c1")]).queued == 1
    assert frontier.enqueue_many([req("http://late.com/", crawlid="c2")]).blacklisted == 1


def test_crawl_blacklist_ttl_0_keeps_stopped_crawls_for_ever(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, CRAWL_BLACKLIST_TTL=0)
    frontier.purge("link", "app", "c1")
    clock.advance(10 * 365 * 86_400_000)
    frontier.purge("link", "app", "c2")
    assert redis_client.smembers(keys.crawl_blacklist("link")) == {b"c1", b"c2"}
    assert not redis_client.exists(keys.crawl_blacklist_since("link"))
