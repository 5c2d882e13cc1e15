"""Re-crawl schedules in the frontier: an acked lease scheduled again (``Revisit``), its due
bucket, the pop that queues it when due, info, purge, TTLs and memory, against a real
redis-server on both frontier clients."""

from __future__ import annotations

import hashlib

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import Revisit
from scrapy_cluster.frontier.calls import SCHEDULED_FIELD
from tests.support.frontier import (
    START_MS,
    VIEW,
    FrontierFactory,
    ManualClock,
    drain,
    req,
)
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients

pytestmark = pytest.mark.integration

STATE = '3c,1,0a1b2c3d,sabcde,"6571a2b3-1b58"'


def _scheduled_one(frontier: object, clock: ManualClock, url: str = "http://a.com/p",
                   delay_ms: int = 60_000, **fields: object) -> None:
    frontier.enqueue_many([req(url, **fields)], dedupe=True)  # type: ignore[attr-defined]
    leased = frontier.pop(VIEW, 1).requests  # type: ignore[attr-defined]
    assert [item.revisit for item in leased] == [None]
    assert frontier.ack([leased[0].lease_id],  # type: ignore[attr-defined]
                        revisits={leased[0].lease_id: Revisit(delay_ms, STATE)}) == 1


def test_a_scheduled_url_comes_back_when_due_with_its_state(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    _scheduled_one(frontier, clock, maxdepth=2, attrs={"k": "v"}, curdepth=1)
    early = frontier.pop(VIEW, 5)
    assert early.requests == []
    assert early.wait_s == 60.0
    clock.advance(59_999)
    assert frontier.pop(VIEW, 5).requests == []
    clock.advance(1)
    again = frontier.pop(VIEW, 5).requests
    assert len(again) == 1
    item = again[0]
    assert item.revisit == STATE
    assert item.enqueued_at_ms == START_MS + 60_000
    assert {name: item.request[name] for name in ("url", "crawlid", "appid", "curdepth",
                                                   "maxdepth", "attrs", "priority")} == {
        "url": "http://a.com/p", "crawlid": "c1", "appid": "app", "curdepth": 1,
        "maxdepth": 2, "attrs": {"k": "v"}, "priority": 1}
    assert redis_client.hget(keys.crawl_counts("link", "c1"), SCHEDULED_FIELD) is None
    assert redis_client.exists(keys.crawl_due_index("link", "c1"),
                               keys.recrawl_due_crawls("link")) == 0


def test_the_bucket_rounds_the_due_time_up(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock(START_MS + 250)
    frontier = frontier_factory(redis_client, clock, FRONTIER_RECRAWL_BUCKET_MS=1000)
    _scheduled_one(frontier, clock, delay_ms=1500)
    assert redis_client.zrange(keys.crawl_due_index("link", "c1"), 0, -1, withscores=True) == [
        (str(START_MS + 2000).encode(), float(START_MS + 2000))]
    assert redis_client.zscore(keys.recrawl_due_crawls("link"), "c1") == START_MS + 2000


def test_a_scheduled_crawl_is_not_idle_and_info_shows_its_schedule(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    frontier.enqueue_many([req("http://a.com/1"), req("http://b.com/2")])
    leased = frontier.pop(VIEW, 2).requests
    frontier.ack([item.lease_id for item in leased],
                 revisits={leased[0].lease_id: Revisit(10_000, "a"),
                           leased[1].lease_id: Revisit(30_000, "b")})
    assert redis_client.zscore(keys.crawls_idle(), "link\tc1") is None
    info = frontier.crawl_info("link", "app", "c1")
    assert (info.scheduled, info.due, info.next_due_ms, info.total_pending, info.in_flight) == (
        2, 0, START_MS + 10_000, 0, 0)
    assert info.as_dict()["next_due"] == (START_MS + 10_000) / 1000
    clock.advance(20_000)
    info = frontier.crawl_info("link", "app", "c1")
    assert (info.scheduled, info.due, info.next_due_ms) == (2, 1, START_MS + 30_000)
    assert frontier.app_counts("link", "app")["c1"].scheduled == 2


def test_a_url_that_leaves_the_schedule_lets_the_crawl_complete(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    _scheduled_one(frontier, clock, delay_ms=1000)
    clock.advance(1000)
    again = frontier.pop(VIEW, 1).requests
    assert redis_client.zscore(keys.crawls_idle(), "link\tc1") is None
    frontier.ack([again[0].lease_id])  # no Revisit: its schedule ends
    assert redis_client.zscore(keys.crawls_idle(), "link\tc1") == START_MS + 1000
    assert frontier.crawl_info("link", "app", "c1").scheduled == 0


def test_a_due_url_is_not_a_duplicate_of_itself_but_its_links_are_deduplicated(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    _scheduled_one(frontier, clock, delay_ms=1000)
    assert frontier.enqueue_many([req("http://a.com/p")], dedupe=True).duplicates == 1
    clock.advance(1000)
    assert drain(frontier) == ["http://a.com/p"]


def test_due_urls_obey_the_domain_throttle(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_HITS=1, QUEUE_WINDOW=10,
                                QUEUE_MODERATED=True)
    frontier.enqueue_many([req("http://a.com/1")])
    first = frontier.pop(VIEW, 1).requests
    clock.advance(10_000)
    frontier.enqueue_many([req("http://a.com/2")])
    second = frontier.pop(VIEW, 1).requests
    frontier.ack([first[0].lease_id, second[0].lease_id],
                 revisits={first[0].lease_id: Revisit(0, "x"),
                           second[0].lease_id: Revisit(0, "y")})
    clock.advance(10_000)
    got = frontier.pop(VIEW, 5)
    assert [item.revisit for item in got.requests] == ["x"]
    assert got.wait_s == 10.0
    clock.advance(9_999)
    assert frontier.pop(VIEW, 5).requests == []
    clock.advance(1)
    assert [item.revisit for item in frontier.pop(VIEW, 5).requests] == ["y"]


def test_a_pop_queues_a_bounded_number_of_due_urls_and_the_rest_on_later_pops(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, FRONTIER_POP_LOOKAHEAD=0)
    frontier.enqueue_many([req(f"http://a.com/{i}") for i in range(30)])
    leased = frontier.pop(VIEW, 30).requests
    frontier.ack([item.lease_id for item in leased],
                 revisits={item.lease_id: Revisit(0, "s") for item in leased})
    clock.advance(1000)
    first = frontier.pop(VIEW, 4)
    assert len(first.requests) == 4
    assert frontier.crawl_info("link", "app", "c1").scheduled == 26
    assert sorted(drain(frontier)) == sorted(f"http://a.com/{i}" for i in range(4, 30))


def test_a_reaped_revisit_keeps_its_state(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, LEASE_TIMEOUT=10)
    _scheduled_one(frontier, clock, delay_ms=0)
    clock.advance(1000)
    assert [item.revisit for item in frontier.pop(VIEW, 1).requests] == [STATE]
    clock.advance(11_000)
    assert frontier.reap() == 1
    again = frontier.pop(VIEW, 1).requests
    assert [(item.request["url"], item.revisit) for item in again] == [("http://a.com/p", STATE)]


def test_stop_removes_the_schedule_and_no_ack_schedules_again(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    frontier.enqueue_many([req(f"http://a.com/{i}") for i in range(3)])
    leased = frontier.pop(VIEW, 3).requests
    frontier.ack([leased[0].lease_id, leased[1].lease_id],
                 revisits={leased[0].lease_id: Revisit(5000, "s"),
                           leased[1].lease_id: Revisit(9000, "s")})
    assert frontier.purge("link", "app", "c1") == 3  # 2 scheduled, 1 in flight
    for key in (keys.crawl_due_index("link", "c1"), keys.crawl_revisit_tails("link", "c1"),
                keys.crawl_due_bucket("link", "c1", START_MS + 5000),
                keys.crawl_counts("link", "c1")):
        assert redis_client.exists(key) == 0, key
    assert redis_client.zscore(keys.recrawl_due_crawls("link"), "c1") is None
    frontier.ack([leased[2].lease_id], revisits={leased[2].lease_id: Revisit(0, "s")})
    assert redis_client.exists(keys.crawl_due_index("link", "c1")) == 0
    clock.advance(10_000)
    assert frontier.pop(VIEW, 5).requests == []


def test_a_bad_state_is_refused_before_anything_is_sent(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/p")])
    leased = frontier.pop(VIEW, 1).requests[0]
    for bad in ("", "has space", "tab\there", "x" * 121, "caf\u00e9"):
        with pytest.raises(ValueError, match="revisit state"):
            frontier.ack([leased.lease_id], revisits={leased.lease_id: Revisit(0, bad)})
    assert redis_client.hexists(keys.frontier_lease_items(), leased.lease_id)


def test_a_schedule_keeps_the_dupefilter_and_funnel_alive_until_due(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, DUPEFILTER_TIMEOUT=600)
    _scheduled_one(frontier, clock, delay_ms=3_600_000)
    for key in (keys.dupefilter("link", "c1"), keys.crawl_funnel("link", "c1")):
        assert redis_client.pttl(key) > 3_600_000 + 590_000, key


def test_records_share_their_crawl_fields_and_fall_back_inline_on_an_id_clash(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    tail = ',"a":"app","md":3}'
    shared = f"a.com\t1\t{tail}"
    clash_id = hashlib.sha1(shared.encode()).hexdigest()[:8]
    redis_client.hset(keys.crawl_revisit_tails("link", "c1"), clash_id, "someone else")
    frontier.enqueue_many([req("http://a.com/1", maxdepth=3), req("http://b.com/2", maxdepth=3)])
    leased = frontier.pop(VIEW, 2).requests
    frontier.ack([item.lease_id for item in leased],
                 revisits={item.lease_id: Revisit(1000, "st") for item in leased})
    records = redis_client.lrange(keys.crawl_due_bucket("link", "c1", START_MS + 1000), 0, -1)
    other_id = hashlib.sha1(f"b.com\t1\t{tail}".encode()).hexdigest()[:8]
    assert sorted(records) == [
        b'\ta.com\t1\tst\t{"u":"http://a.com/1","a":"app","md":3}',
        f'{other_id}st\t"http://b.com/2"'.encode()]
    clock.advance(1000)
    again = frontier.pop(VIEW, 5).requests
    assert sorted((item.request["url"], item.request["maxdepth"], item.revisit)
                  for item in again) == [("http://a.com/1", 3, "st"), ("http://b.com/2", 3, "st")]


def test_a_scheduled_url_costs_under_100_bytes_of_redis(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    """10,000 URLs of 36 characters over 1,000 one-second buckets, each with a realistic
    state (interval, fetch count, digest, Last-Modified, an nginx ETag)."""
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock, QUEUE_WINDOW=0)
    urls = [f"http://127.1.30.{i % 50}:41234/p/{i:05d}.html" for i in range(10_000)]
    before = None
    for start in range(0, len(urls), 1000):
        frontier.enqueue_many([req(url, maxdepth=3, curdepth=2) for url in urls[start:start + 1000]])
        leased = frontier.pop(VIEW, 1000).requests
        assert len(leased) == 1000
        if before is None:
            before = int(redis_client.info("memory")["used_memory"])
            # the queued items, leases and dupefilter of the first batch are counted in
            # ``before``; the later batches' ones are gone once acked, but for the dupefilter
            # (12 bytes per URL, there without a schedule too)
        frontier.ack([item.lease_id for item in leased],
                     revisits={item.lease_id: Revisit(1000 * (1 + i % 1000),
                                                      f'2s,4,{i:08x},t3k9x2,"6571a2b3-1b58"')
                               for i, item in enumerate(leased)})
    after = int(redis_client.info("memory")["used_memory"])
    assert frontier.crawl_info("link", "app", "c1").scheduled == 10_000
    per_url = (after - (before or 0)) / 10_000
    print(f"redis bytes per scheduled URL: {per_url:.1f}")
    assert per_url <= 100, per_url
