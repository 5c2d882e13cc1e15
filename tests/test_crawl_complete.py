"""Crawl completion in the frontier scripts and the Redis Monitor: real Redis, injected clocks.

The idle index, the crawl state and its TTLs (frontier_enqueue / ack / purge /
complete scripts), then ``CompleteMonitor`` answering on the Redis Streams bus.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.frontier import DispatchView, Frontier
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.redis_monitor.app import open_monitor
from scrapy_cluster.settings import load_settings

T0 = 1_800_000_000_000
GRACE_MS, HOLD_MS, STATE_TTL_S = 3_000, 6_000, 50
DUPEFILTER_S = 600
VIEW = DispatchView("link")


class MsClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> MsClock:
    return MsClock()


@pytest.fixture
def frontier(redis_client: redis.Redis, clock: MsClock) -> Frontier:
    settings = load_settings("crawler", environ={}, overrides={
        "QUEUE_WINDOW": 0, "CRAWL_STATE_TTL": STATE_TTL_S, "DUPEFILTER_TIMEOUT": DUPEFILTER_S})
    return Frontier.from_settings(settings, redis_client, clock=clock)


def seed(frontier: Frontier, crawlid: str, *urls: str, appid: str = "app") -> int:
    return frontier.enqueue_many([{"url": url, "appid": appid, "crawlid": crawlid,
                                   "spiderid": "link"} for url in urls], dedupe=True).queued


def crawl_all(frontier: Frontier, funnel: dict[str, int] | None = None) -> int:
    """Pop and ack everything queued, with ``funnel`` counts for crawl c1 on the last ack."""
    done = 0
    while True:
        popped = frontier.pop(VIEW, 10).requests
        if not popped:
            return done
        done += len(popped)
        frontier.ack([leased.lease_id for leased in popped],
                     funnel={("link", "c1"): funnel} if funnel else None)


def take(frontier: Frontier) -> list[Any]:
    return frontier.take_completed(grace_ms=GRACE_MS, hold_ms=HOLD_MS)


def status(client: redis.Redis, crawlid: str = "c1") -> str | None:
    raw = client.hget(keys.crawl_state("link", crawlid), "status")
    return raw.decode() if raw else None


def test_a_seeded_crawl_is_running_from_its_first_enqueue(frontier: Frontier,
                                                           redis_client: redis.Redis) -> None:
    seed(frontier, "c1", "http://a.com/")
    state = redis_client.hgetall(keys.crawl_state("link", "c1"))
    assert state == {b"status": b"running", b"appid": b"app", b"started": str(T0).encode()}
    assert redis_client.ttl(keys.crawl_state("link", "c1")) == -1
    assert redis_client.zcard(keys.crawls_idle()) == 0


def test_a_crawl_becomes_idle_when_its_last_lease_is_acked(
        frontier: Frontier, redis_client: redis.Redis, clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/", "http://b.com/")
    popped = frontier.pop(VIEW, 10).requests
    frontier.ack([popped[0].lease_id])
    assert redis_client.zcard(keys.crawls_idle()) == 0, "a lease is still held"
    clock.now += 500
    frontier.ack([popped[1].lease_id])
    assert redis_client.zrange(keys.crawls_idle(), 0, -1, withscores=True) == [
        (b"link\tc1", T0 + 500)]


def test_completion_waits_for_the_grace_period_and_carries_the_funnel(
        frontier: Frontier, redis_client: redis.Redis, clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/", "http://b.com/")
    crawl_all(frontier, funnel={"fetched:200": 2, "delivered": 2})
    clock.now += GRACE_MS - 1
    assert take(frontier) == []
    clock.now += 1
    (done,) = take(frontier)
    assert (done.crawlid, done.appid, done.started_ms, done.finished_ms) == ("c1", "app", T0, T0)
    assert (done.funnel.fetched, done.funnel.delivered, done.funnel.queued) == ({"200": 2}, 2, 2)
    assert status(redis_client) == "complete"


def test_two_takers_never_both_get_a_crawl(frontier: Frontier, redis_client: redis.Redis,
                                           clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/")
    crawl_all(frontier)
    clock.now += GRACE_MS
    first, second = take(frontier), take(frontier)
    assert (len(first), second) == (1, [])


def test_a_notice_never_confirmed_is_taken_again_after_the_hold(
        frontier: Frontier, clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/")
    crawl_all(frontier)
    clock.now += GRACE_MS
    (taken,) = take(frontier)
    clock.now += HOLD_MS - 1
    assert take(frontier) == []
    clock.now += 1
    (again,) = take(frontier)
    assert (again.crawlid, again.finished_ms) == (taken.crawlid, taken.finished_ms)


def test_a_confirmed_notice_leaves_the_index(frontier: Frontier, redis_client: redis.Redis,
                                             clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/")
    crawl_all(frontier)
    clock.now += GRACE_MS
    assert frontier.confirm_completed(take(frontier)) == 1
    clock.now += 10 * HOLD_MS
    assert (take(frontier), redis_client.zcard(keys.crawls_idle())) == ([], 0)


def test_work_within_the_grace_period_restarts_the_wait(
        frontier: Frontier, redis_client: redis.Redis, clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/")
    crawl_all(frontier)
    clock.now += GRACE_MS - 100
    seed(frontier, "c1", "http://a.com/more")
    assert redis_client.zcard(keys.crawls_idle()) == 0
    crawl_all(frontier)
    clock.now += GRACE_MS - 1
    assert take(frontier) == []
    clock.now += 1
    assert [crawl.crawlid for crawl in take(frontier)] == ["c1"]


def test_a_reaped_lease_keeps_the_crawl_running(frontier: Frontier,
                                                redis_client: redis.Redis,
                                                clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/")
    frontier.pop(VIEW, 1)
    clock.now += 10 * 60_000 + 1  # past LEASE_TIMEOUT: the crawler died
    assert frontier.reap() == 1
    assert redis_client.zcard(keys.crawls_idle()) == 0
    clock.now += GRACE_MS
    assert take(frontier) == []


def test_completion_ends_the_crawl_keys_lives(frontier: Frontier, redis_client: redis.Redis,
                                              clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/", "http://b.com/")
    redis_client.set(keys.crawl_timeout("link", "app", "c1"), 1)
    redis_client.zadd(keys.crawl_timeouts(), {keys.crawl_timeout("link", "app", "c1"): 1})
    crawl_all(frontier)
    clock.now += GRACE_MS
    take(frontier)
    for key in (keys.crawl_state("link", "c1"), keys.crawl_funnel("link", "c1"),
                keys.dupefilter("link", "c1")):
        assert 0 < redis_client.ttl(key) <= STATE_TTL_S, key
    assert not redis_client.exists(keys.crawl_timeout("link", "app", "c1"),
                                   keys.crawl_counts("link", "c1"))
    assert redis_client.zcard(keys.crawl_timeouts()) == 0
    assert not redis_client.sismember(keys.app_crawls("link", "app"), "c1")


def test_a_running_crawl_keeps_the_dupefilter_timeout(frontier: Frontier,
                                                      redis_client: redis.Redis) -> None:
    seed(frontier, "c1", "http://a.com/")
    assert redis_client.ttl(keys.dupefilter("link", "c1")) > STATE_TTL_S
    assert redis_client.ttl(keys.crawl_funnel("link", "c1")) > STATE_TTL_S


def test_a_duplicate_seed_leaves_a_complete_crawl_complete_and_mortal(
        frontier: Frontier, redis_client: redis.Redis, clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/")
    crawl_all(frontier)
    clock.now += GRACE_MS
    frontier.confirm_completed(take(frontier))
    assert seed(frontier, "c1", "http://a.com/") == 0
    assert status(redis_client) == "complete"
    for key in (keys.crawl_funnel("link", "c1"), keys.dupefilter("link", "c1")):
        assert 0 < redis_client.ttl(key) <= STATE_TTL_S, key


def test_a_new_request_after_completion_runs_and_completes_the_crawl_again(
        frontier: Frontier, redis_client: redis.Redis, clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/")
    crawl_all(frontier)
    clock.now += GRACE_MS
    frontier.confirm_completed(take(frontier))
    clock.now += 1000
    assert seed(frontier, "c1", "http://a.com/new") == 1
    assert status(redis_client) == "running"
    assert redis_client.ttl(keys.crawl_state("link", "c1")) == -1
    assert redis_client.ttl(keys.crawl_funnel("link", "c1")) > STATE_TTL_S
    crawl_all(frontier)
    clock.now += GRACE_MS
    (again,) = take(frontier)
    assert (again.started_ms, again.finished_ms, again.funnel.queued) == (T0, T0 + GRACE_MS + 1000, 2)


def test_a_stopped_crawl_never_completes(frontier: Frontier, redis_client: redis.Redis,
                                         clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/", "http://b.com/")
    popped = frontier.pop(VIEW, 1).requests
    result = frontier.purge_detail("link", "app", "c1")
    assert (result.prior_status, status(redis_client)) == ("running", "stopped")
    frontier.ack([popped[0].lease_id], funnel={("link", "c1"): {"fetched:200": 1}})
    clock.now += GRACE_MS
    assert take(frontier) == []
    assert redis_client.zcard(keys.crawls_idle()) == 0
    for key in (keys.crawl_state("link", "c1"), keys.crawl_funnel("link", "c1")):
        assert 0 < redis_client.ttl(key) <= STATE_TTL_S, key


def test_the_first_end_wins(frontier: Frontier, redis_client: redis.Redis,
                            clock: MsClock) -> None:
    seed(frontier, "c1", "http://a.com/")
    crawl_all(frontier)
    clock.now += GRACE_MS
    frontier.confirm_completed(take(frontier))
    result = frontier.purge_detail("link", "app", "c1", reason="expired")
    assert (result.prior_status, status(redis_client)) == ("complete", "complete")


def test_ack_funnel_counts_of_a_crawl_without_leases_are_written(
        frontier: Frontier, redis_client: redis.Redis) -> None:
    assert frontier.ack([], funnel={("link", "other"): {"fetched:0": 2, "dropped": 1}}) == 0
    assert redis_client.hgetall(keys.crawl_funnel("link", "other")) == {
        b"fetched:0": b"2", b"dropped": b"1"}
    assert redis_client.ttl(keys.crawl_funnel("link", "other")) > STATE_TTL_S


# --- the Redis Monitor ---------------------------------------------------------------------

class Monitor:
    def __init__(self, settings: Any, client: redis.Redis, monitor: Any) -> None:
        self.settings, self.client, self.monitor = settings, client, monitor
        self.frontier = Frontier.from_settings(settings, client)
        self.bus = create_bus(settings)
        self.reader = self.bus.reader([f"{settings['KAFKA_TOPIC_PREFIX']}.outbound_firehose"],
                                      from_beginning=True)
        self.seen: list[dict[str, Any]] = []

    def run_for(self, seconds: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.monitor.run_once()
            self.seen += [message.value for message in self.reader.poll(100, 0.05)]
        return self.seen

    def run_until(self, predicate: Any, timeout_s: float = 15.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.run_for(0.1)
            if predicate(self.seen):
                return self.seen
        raise AssertionError(f"no matching answer in {timeout_s} s: {self.seen}")


@pytest.fixture
def monitor(redis_client: redis.Redis, redis_url: str) -> Iterator[Monitor]:
    settings = load_settings("redis-monitor", environ={}, overrides={
        "REDIS_URL": redis_url, "BUS_BACKEND": "redis", "STATS_DUMP": 0,
        "KAFKA_TOPIC_PREFIX": f"cc{uuid.uuid4().hex[:8]}", "CRAWL_COMPLETE_GRACE_S": 0.3,
        "REDIS_LOCK_EXPIRATION": 1})
    with open_monitor(settings, logging.getLogger("test-crawl-complete")) as redis_monitor:
        running = Monitor(settings, redis_client, redis_monitor)
        yield running
        running.reader.close()
        running.bus.close()


def completes(crawlid: str) -> Any:
    return lambda seen: any(answer.get("action") == "complete" and answer["crawlid"] == crawlid
                            for answer in seen)


def test_the_monitor_announces_a_complete_crawl_with_its_totals(monitor: Monitor) -> None:
    frontier = monitor.frontier
    seed(frontier, "c1", "http://a.com/", "http://b.com/", "http://c.com/")
    seed(frontier, "c1", "http://a.com/")
    funnel = {"fetched:200": 2, "fetched:503": 2, "fetched:0": 1, "retried": 2,
              "delivered": 3, "filtered:offsite": 4, "filtered:robots": 1, "submitted": 4}
    crawl_all(frontier, funnel=funnel)
    seen = monitor.run_until(completes("c1"))
    (notice,) = [answer for answer in seen if answer.get("action") == "complete"]
    assert notice["started"] <= notice["finished"] <= notice["server_time"] + 1
    assert {**notice, "server_time": 0, "started": 0, "finished": 0} == {
        "action": "complete", "appid": "app", "crawlid": "c1", "spiderid": "link",
        "server_time": 0, "started": 0, "finished": 0,
        "totals": {"fetched": 5, "by_status": {"0": 1, "200": 2, "503": 2}, "errors": 3,
                   "retried": 2, "filtered": 5, "duplicates": 1, "delivered": 3}}
    assert monitor.run_for(1.5).count(notice) == 1, "announced once"
    assert monitor.client.zcard(keys.crawls_idle()) == 0


def test_info_says_complete_after_the_notice(monitor: Monitor) -> None:
    seed(monitor.frontier, "c1", "http://a.com/")
    crawl_all(monitor.frontier)
    monitor.run_until(completes("c1"))
    writer = JobWriter.from_settings(monitor.settings)
    pipe = monitor.client.pipeline()
    writer.queue_job(pipe, "info", keys.info_job("link", "app", "c1", "u1"), {
        "action": "info", "appid": "app", "spiderid": "link", "crawlid": "c1", "uuid": "u1"})
    pipe.execute()
    seen = monitor.run_until(lambda seen: any(a.get("uuid") == "u1" for a in seen))
    (info,) = [answer for answer in seen if answer.get("uuid") == "u1"]
    assert (info["status"], info["total_pending"]) == ("complete", 0)


def test_an_expiry_after_completion_is_not_announced(monitor: Monitor) -> None:
    seed(monitor.frontier, "c1", "http://a.com/")
    crawl_all(monitor.frontier)
    monitor.run_until(completes("c1"))
    timeout = keys.crawl_timeout("link", "app", "c1")
    monitor.client.set(timeout, 1)  # as if the expiry raced the completion
    monitor.client.zadd(keys.crawl_timeouts(), {timeout: 1})
    seen = monitor.run_for(1.5)
    assert monitor.client.zcard(keys.crawl_timeouts()) == 0
    assert [answer["action"] for answer in seen] == ["complete"]
    assert status(monitor.client) == "complete"


def test_an_expiring_running_crawl_is_announced_expired_not_complete(monitor: Monitor) -> None:
    seed(monitor.frontier, "c1", "http://a.com/")
    timeout = keys.crawl_timeout("link", "app", "c1")
    monitor.client.set(timeout, 1)
    monitor.client.zadd(keys.crawl_timeouts(), {timeout: 1})
    seen = monitor.run_until(lambda seen: any(a.get("action") == "expired" for a in seen))
    seen = monitor.run_for(1.0)
    assert [answer["action"] for answer in seen] == ["expired"]
    assert status(monitor.client) == "expired"
