"""The Redis Monitor in process against a real Redis (jobs, frontier, stats) and the Redis
Streams bus: every answer's fields asserted against a state the test built."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.crawler.common.response_stats import ResponseStats
from scrapy_cluster.domain_config import frontier_domain
from scrapy_cluster.domain_config.redis_store import RedisDomainConfigStore
from scrapy_cluster.frontier import DispatchView, Frontier
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.redis_monitor.app import open_monitor
from scrapy_cluster.redis_monitor.jobs import Job
from scrapy_cluster.redis_monitor.monitor import RedisMonitor
from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor
from scrapy_cluster.settings import Settings, load_settings
from scrapy_cluster.stats import WindowedStats

NOW = 1_800_000_000.0
VIEW = DispatchView(spiderid="link", ip=None)


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Harness:
    """A monitor, a job writer and a reader of the outbound topic."""

    def __init__(self, settings: Settings, client: redis.Redis, monitor: RedisMonitor,
                 clock: Clock) -> None:
        self.settings, self.redis, self.monitor, self.clock = settings, client, monitor, clock
        self.frontier = Frontier.from_settings(settings, client)
        self.writer = JobWriter.from_settings(settings)
        self.bus = create_bus(settings)
        self.reader = self.bus.reader([f"{settings['KAFKA_TOPIC_PREFIX']}.outbound_firehose"],
                                      from_beginning=True)

    def job(self, job_type: str, key: str, payload: dict[str, Any]) -> None:
        pipe = self.redis.pipeline()
        self.writer.queue_job(pipe, job_type, key, payload)
        pipe.execute()

    def info(self, uid: str, crawlid: str | None = None, appid: str = "app") -> None:
        payload = {"action": "info", "appid": appid, "spiderid": "link", "uuid": uid,
                   **({"crawlid": crawlid} if crawlid else {})}
        self.job("info", keys.info_job("link", appid, crawlid, uid), payload)

    def stats(self, uid: str, stats_type: str) -> None:
        self.job("statsrequest", keys.stats_job(stats_type, "app", uid),
                 {"stats": stats_type, "appid": "app", "uuid": uid})

    def answers(self, expected: int, passes: int = 5) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        for _ in range(passes):
            self.monitor.run_once()
            got += [message.value for message in self.reader.poll(1000, 0.2)]
            if len(got) >= expected:
                break
        assert len(got) == expected, got
        return got

    def close(self) -> None:
        self.reader.close()
        self.bus.close()


@pytest.fixture
def harness(redis_client: redis.Redis, redis_url: str) -> Iterator[Harness]:
    yield from _harness(redis_client, redis_url, {})


def _harness(redis_client: redis.Redis, redis_url: str,
             overrides: dict[str, Any]) -> Iterator[Harness]:
    prefix = f"rm{uuid.uuid4().hex[:8]}"
    settings = load_settings("redis-monitor", overrides={
        "REDIS_URL": redis_url, "BUS_BACKEND": "redis", "KAFKA_TOPIC_PREFIX": prefix,
        "STATS_DUMP": 0, "REDIS_LOCK_EXPIRATION": 1, **overrides})
    clock = Clock()
    with open_monitor(settings, logging.getLogger("test-redis-monitor"), clock=clock) as monitor:
        harness = Harness(settings, redis_client, monitor, clock)
        yield harness
        harness.close()


def funnel(queued: int) -> dict[str, Any]:
    """The ``funnel`` of a crawl whose ``queued`` URLs were all new and nothing else happened."""
    return {"submitted": queued, "queued": queued, "deduplicated": 0, "filtered": {},
            "fetched": {}, "retried": 0, "dropped": 0, "delivered": 0}


def enqueue(harness: Harness, crawlid: str, urls: list[tuple[str, int]],
            appid: str = "app") -> None:
    result = harness.frontier.enqueue_many([
        {"url": url, "appid": appid, "crawlid": crawlid, "spiderid": "link", "priority": priority}
        for url, priority in urls])
    assert result.queued == len(urls)


def set_expiry(harness: Harness, crawlid: str, expires_s: int, appid: str = "app") -> None:
    pipe = harness.redis.pipeline()
    harness.writer.queue_timeout(pipe, "link", appid, crawlid, expires_s)
    pipe.execute()


# --- info ---------------------------------------------------------------------------------

def test_info_of_one_crawl_counts_domains_and_priorities(harness: Harness) -> None:
    enqueue(harness, "c1", [("http://a.com/1", 5), ("http://a.com/2", -9), ("http://b.com/1", 3)])
    enqueue(harness, "c2", [("http://c.com/1", 1)])
    set_expiry(harness, "c1", int(NOW) + 600)
    harness.info("u1", "c1")
    (answer,) = harness.answers(1)
    assert answer == {
        "server_time": int(NOW), "uuid": "u1", "spiderid": "link", "appid": "app",
        "crawlid": "c1", "total_pending": 3, "total_domains": 2, "expires": str(int(NOW) + 600),
        "domains": {"a.com": {"low_priority": -9, "high_priority": 5, "total": 2},
                    "b.com": {"low_priority": 3, "high_priority": 3, "total": 1}},
        "status": "running", "funnel": funnel(3), "reason": "no crawler for this spider"}


def test_info_of_an_app_breaks_its_crawls_down(harness: Harness) -> None:
    enqueue(harness, "c1", [("http://a.com/1", 1), ("http://b.com/1", 1)])
    enqueue(harness, "c2", [("http://a.com/2", 2), ("http://a.com/3", 2), ("http://d.com/", 0)])
    enqueue(harness, "other", [("http://z.com/", 0)], appid="otherapp")
    set_expiry(harness, "c2", int(NOW) + 60)
    harness.info("u2")
    (answer,) = harness.answers(1)
    assert answer == {
        "server_time": int(NOW), "uuid": "u2", "spiderid": "link", "appid": "app",
        "total_pending": 5, "total_domains": 3, "total_crawlids": 2,
        "crawlids": {
            "c1": {"domains": {"a.com": {"low_priority": 1, "high_priority": 1, "total": 1},
                               "b.com": {"low_priority": 1, "high_priority": 1, "total": 1}},
                   "distinct_domains": 2, "total": 2, "status": "running",
                   "funnel": funnel(2), "reason": "no crawler for this spider"},
            "c2": {"domains": {"a.com": {"low_priority": 2, "high_priority": 2, "total": 2},
                               "d.com": {"low_priority": 0, "high_priority": 0, "total": 1}},
                   "distinct_domains": 2, "total": 3, "expires": str(int(NOW) + 60),
                   "status": "running", "funnel": funnel(3),
                   "reason": "no crawler for this spider"}}}


def test_info_of_an_unknown_crawl_is_empty(harness: Harness) -> None:
    harness.info("u3", "nothing")
    (answer,) = harness.answers(1)
    assert (answer["total_pending"], answer["total_domains"], answer["domains"],
            answer["funnel"], answer["status"]) == (0, 0, {}, funnel(0), "unknown")


# --- stop and expire -------------------------------------------------------------------------

def test_stop_purges_blacklists_and_forgets_the_timeout(harness: Harness) -> None:
    enqueue(harness, "c1", [(f"http://d{i}.com/{i}", 0) for i in range(7)])
    enqueue(harness, "keep", [("http://d0.com/keep", 0)])
    set_expiry(harness, "c1", int(NOW) + 600)
    leased = harness.frontier.pop(VIEW, 2).requests
    in_flight_c1 = sum(item.request["crawlid"] == "c1" for item in leased)
    harness.job("stop", keys.stop_job("link", "app", "c1", "s1"),
                {"action": "stop", "appid": "app", "spiderid": "link", "crawlid": "c1",
                 "uuid": "s1"})
    (answer,) = harness.answers(1)
    assert answer == {"action": "stop", "total_purged": 7 - in_flight_c1,
                      "server_time": int(NOW), "crawlid": "c1", "uuid": "s1",
                      "spiderid": "link", "appid": "app"}
    # links found by a page of the stopped crawl that was in flight are refused
    links = harness.frontier.enqueue_many([{"url": "http://new.com/", "appid": "app",
                                            "crawlid": "c1", "spiderid": "link"}])
    assert (links.queued, links.blacklisted) == (0, 1)
    assert harness.frontier.crawl_info("link", "app", "c1").total_pending == 0
    # nothing of the stopped crawl is dispatched any more; the other crawl is untouched
    assert {item.request["crawlid"] for item in harness.frontier.pop(VIEW, 50).requests} <= {"keep"}
    assert harness.frontier.release([item.lease_id for item in leased]) == sum(
        item.request["crawlid"] == "keep" for item in leased)
    assert harness.redis.get(keys.crawl_timeout("link", "app", "c1")) is None
    assert harness.redis.zcard(keys.crawl_timeouts()) == 0


def test_expired_crawl_is_purged_and_announced(harness: Harness) -> None:
    enqueue(harness, "old", [("http://a.com/1", 0), ("http://b.com/1", 0)])
    enqueue(harness, "young", [("http://a.com/2", 0)])
    set_expiry(harness, "old", int(NOW) - 1)
    set_expiry(harness, "young", int(NOW) + 100)
    (answer,) = harness.answers(1)
    assert answer == {"total_expired": 2, "server_time": int(NOW), "crawlid": "old",
                      "spiderid": "link", "appid": "app", "action": "expired"}
    assert harness.frontier.crawl_info("link", "app", "young").total_pending == 1
    assert harness.redis.zrange(keys.crawl_timeouts(), 0, -1) == [
        keys.crawl_timeout("link", "app", "young").encode()]
    assert harness.redis.sismember(keys.crawl_blacklist("link"), "old")


# --- stats ----------------------------------------------------------------------------------

def test_component_stats_list_live_nodes_and_counters(harness: Harness) -> None:
    km = WindowedStats.from_settings(harness.settings, harness.redis,
                                     key_prefix="stats:kafka-monitor", clock=harness.clock)
    km.increment("total", amount=5)
    km.increment("fail", amount=1)
    km.increment("ScraperHandler", amount=4)
    km.heartbeat("host-a", "111-aaa")
    old = WindowedStats.from_settings(harness.settings, harness.redis,
                                      key_prefix="stats:kafka-monitor",
                                      clock=lambda: NOW - 1000)
    dead_key = old.heartbeat("host-b", "222-bbb", ttl_s=5000)
    harness.stats("k1", "kafka-monitor")
    (answer,) = harness.answers(1)
    windows = {"900": 5, "3600": 5, "21600": 5, "43200": 5, "86400": 5, "604800": 5,
               "lifetime": 5}
    assert answer == {"stats": "kafka-monitor", "appid": "app", "uuid": "k1",
                      "server_time": int(NOW), "nodes": {"host-a": ["111-aaa"]},
                      "total": windows, "fail": {name: 1 for name in windows},
                      "plugins": {"ScraperHandler": {name: 4 for name in windows}}}
    assert not harness.redis.exists(dead_key)
    assert harness.redis.zscore(keys.heartbeat_index("kafka-monitor"), "host-b:222-bbb") is None


def test_crawler_stats_sum_spiders_machines_and_queues(harness: Harness) -> None:
    for host, codes in (("m1", [200, 200, 404]), ("m2", [200, 504])):
        stats = ResponseStats.from_settings(harness.settings, harness.redis, hostname=host,
                                            spiderid="link")
        stats.windowed.clock = harness.clock
        for code in codes:
            stats.record("a.com", code)
        stats.flush()
    enqueue(harness, "c1", [("http://a.com/1", 0), ("http://a.com/2", 0), ("http://b.com/", 0)])
    harness.stats("c1", "crawler")
    (answer,) = harness.answers(1)
    every = ("900", "3600", "21600", "43200", "86400", "604800", "lifetime")
    assert answer["spiders"] == {
        "unique_spider_count": 1, "total_spider_count": 2,
        "link": {"count": 2, "200": {w: 3 for w in every}, "404": {w: 1 for w in every},
                 "504": {w: 1 for w in every}}}
    assert answer["machines"] == {
        "count": 2,
        "m1": {"200": {w: 2 for w in every}, "404": {w: 1 for w in every}},
        "m2": {"200": {w: 1 for w in every}, "504": {w: 1 for w in every}}}
    assert answer["queues"] == {
        "queue_link": {"domains": [{"domain": "a.com", "backlog": 2},
                                   {"domain": "b.com", "backlog": 1}],
                       "spider_backlog": 3, "num_domains": 2},
        "total_backlog": 3}


def test_all_stats_hold_every_component(harness: Harness) -> None:
    harness.stats("first", "queue")
    harness.answers(1)
    harness.stats("a1", "all")
    (answer,) = harness.answers(1)
    assert set(answer) == {"stats", "appid", "uuid", "server_time", "kafka-monitor",
                           "redis-monitor", "crawler", "rest"}
    own = answer["redis-monitor"]
    assert own["plugins"]["StatsMonitor"]["lifetime"] == 1
    assert own["total"]["lifetime"] == 1
    assert list(own["nodes"]) and "fail" not in own
    assert set(answer["crawler"]) == {"spiders", "machines", "queues"}


def test_unknown_stats_type_gets_an_error_answer(harness: Harness) -> None:
    harness.stats("bad", "nonsense")
    (answer,) = harness.answers(1)
    assert answer["uuid"] == "bad" and "unknown stats type 'nonsense'" in answer["error"]
    assert int(harness.redis.get("stats:redis-monitor:fail:lifetime")) == 1


# --- domain requests --------------------------------------------------------------------------

def domain_job(harness: Harness, uid: str, action: str, domain: str, **extra: Any) -> None:
    harness.job("zk", keys.domain_config_job(action, domain, "app", uid),
                {"action": action, "domain": domain, "appid": "app", "uuid": uid, **extra})


def test_domain_requests_change_the_domain_document(harness: Harness) -> None:
    domain_job(harness, "z1", "domain-update", "www.Example.com", hits=20, window=60, scale=1.5)
    domain_job(harness, "z2", "blacklist-update", "bad.org")
    domain_job(harness, "z3", "domain-update", "other.net", hits=3, window=1)
    answers = harness.answers(3)
    assert [(a["action"], a["domain"], a["uuid"], a["appid"]) for a in answers] == [
        ("domain-update", "example.com", "z1", "app"), ("blacklist-update", "bad.org", "z2", "app"),
        ("domain-update", "other.net", "z3", "app")]
    store = RedisDomainConfigStore.from_settings(harness.settings, harness.redis)
    document = store.read().document
    assert {d: (t.hits, t.window_s, t.scale) for d, t in document.throttles.items()} == {
        "example.com": (20, 60.0, 1.0), "other.net": (3, 1.0, 1.0)}
    assert document.blacklist == frozenset({"bad.org"})
    domain_job(harness, "z4", "domain-remove", "example.com")
    domain_job(harness, "z5", "blacklist-remove", "bad.org")
    harness.answers(2)
    document = store.read().document
    assert set(document.throttles) == {"other.net"} and document.blacklist == frozenset()
    assert frontier_domain()("www.Example.com") == "example.com"


def test_domain_update_without_hits_is_refused_clearly(harness: Harness) -> None:
    domain_job(harness, "z9", "domain-update", "example.com", window=60)
    (answer,) = harness.answers(1)
    assert answer["action"] == "domain-update" and "'hits' is required" in answer["error"]


# --- failures, duplicates, malformed jobs ---------------------------------------------------------

class ExplodingInfo(BaseMonitor):
    """Fails every info job of crawl 'boom'; answers the others."""

    job_types = ("info",)
    calls = 0

    def handle(self, job: Job) -> None:
        payload = self.validate(job)
        if payload.get("crawlid") == "boom":
            ExplodingInfo.calls += 1
            raise RuntimeError("plugin exploded")
        self.send({"uuid": payload["uuid"], "appid": payload["appid"], "ok": True})


@pytest.fixture
def exploding(redis_client: redis.Redis, redis_url: str) -> Iterator[Harness]:
    ExplodingInfo.calls = 0
    yield from _harness(redis_client, redis_url, {
        "PLUGINS": {"scrapy_cluster.redis_monitor.plugins.InfoMonitor": None,
                    f"{__name__}.ExplodingInfo": 50}, "RETRY_FAILURES_MAX": 2})


def test_failing_job_is_retried_then_dropped_while_others_are_answered(
        exploding: Harness) -> None:
    exploding.info("bad", "boom")
    exploding.info("good", "fine")
    got: list[dict[str, Any]] = []
    for _ in range(40):
        exploding.monitor.run_once()
        got += [message.value for message in exploding.reader.poll(100, 0.05)]
        if len(got) == 2:
            break
    assert ExplodingInfo.calls == 3  # first try and RETRY_FAILURES_MAX retries
    by_uuid = {answer["uuid"]: answer for answer in got}
    assert by_uuid["good"] == {"uuid": "good", "appid": "app", "ok": True}
    assert by_uuid["bad"]["error"] == "RuntimeError: plugin exploded"
    assert int(exploding.redis.get("stats:redis-monitor:fail:lifetime")) == 1
    assert int(exploding.redis.get("stats:redis-monitor:ExplodingInfo:lifetime")) == 1
    assert exploding.redis.xpending(keys.redis_monitor_jobs(), "redis-monitor")["pending"] == 0
    assert exploding.redis.hlen(keys.redis_monitor_taken()) == 0


def test_a_job_delivered_twice_is_answered_once(harness: Harness) -> None:
    harness.info("twice", "c1")
    harness.info("twice", "c1")  # the bus delivered the request again: same key, two entries
    (answer,) = harness.answers(1, passes=3)
    assert answer["uuid"] == "twice"
    assert harness.redis.xpending(keys.redis_monitor_jobs(), "redis-monitor")["pending"] == 0


def test_malformed_jobs_are_explained_and_the_monitor_goes_on(harness: Harness) -> None:
    stream = keys.redis_monitor_jobs()
    harness.redis.xadd(stream, {"key": "info:x", "type": "info"})  # no payload
    harness.redis.xadd(stream, {"key": "info:y", "type": "info", "payload": b"{not json"})
    for key, job_type, payload in (
            ("weird:1", "weird", {"appid": "app", "uuid": "w1"}),
            ("info:link:app::w2", "info", {"appid": "app", "uuid": "w2", "spiderid": 7}),
            ("info:link:app::w3", "info", {"appid": "app", "uuid": "w3"})):
        harness.redis.set(key, orjson.dumps(payload))
        harness.redis.xadd(stream, {"key": key, "type": job_type, "payload": orjson.dumps(payload)})
    harness.info("fine", "c1")
    answers = {answer["uuid"]: answer for answer in harness.answers(4)}
    assert "no plugin handles job type 'weird'" in answers["w1"]["error"]
    assert answers["w2"]["error"] == "info job field 'spiderid' has the wrong type (int)"
    assert answers["w3"]["error"] == "info job lacks required field 'spiderid'"
    assert answers["fine"]["total_pending"] == 0
    assert harness.redis.xpending(stream, "redis-monitor")["pending"] == 0


# --- monitoring line ----------------------------------------------------------------------------

def test_monitoring_update_reports_rates_statuses_limits_and_backlog(harness: Harness) -> None:
    from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
    from scrapy_cluster.redis_monitor.monitoring import MonitoringLine
    from scrapy_cluster.redis_monitor.plugins.circuit_breaker import breaker_for
    from scrapy_cluster.stats.cluster import ClusterStats

    stats = ResponseStats.from_settings(harness.settings, harness.redis, hostname="m1",
                                        spiderid="link")
    stats._clock = harness.clock  # statuses scored at the test's time
    for status in [200] * 6 + [500] * 3:
        stats.record("a.com", status)
    stats.record("b.com", 404)
    stats.flush()
    DomainConfig(harness.redis, harness.frontier).set_throttle(
        "a.com", DomainThrottle(window_s=2, hits=5))
    enqueue(harness, "c1", [("http://a.com/1", 0), ("http://b.com/1", 0)])
    line = MonitoringLine.from_settings(
        harness.settings, breaker=breaker_for(harness.settings, harness.redis, harness.clock),
        frontier=harness.frontier,
        cluster=ClusterStats(harness.redis, harness.settings, frontier=harness.frontier,
                             clock=harness.clock),
        redis_client=harness.redis, logger=logging.getLogger("test"))
    event = line.build()
    assert event["general"] == {"success_rps": round(7 / 60, 4), "error_rps": round(3 / 60, 4),
                                "circuit_breaker_tripped": [], "paused": [], "halted": []}
    assert event["specific"] == {
        "a.com": {"successful": 6, "error": 3, "last_50_statuses": {"200": 6, "500": 3},
                  "rate_limit": 2.5, "state": "active"},
        "b.com": {"successful": 1, "error": 0, "last_50_statuses": {"404": 1},
                  "rate_limit": round(10 / 60, 4), "state": "active"}}
    assert event["backlog"] == {"total": 2, "link": {"total": 2,
                                                      "domains": {"a.com": 1, "b.com": 1}}}
    assert event["crawler"]["link"]["200"]["lifetime"] == 6


def test_info_of_a_crawl_waiting_for_its_schedule_says_scheduled(harness: Harness) -> None:
    from scrapy_cluster.frontier import DispatchView, Revisit

    enqueue(harness, "c1", [("http://a.com/1", 1), ("http://b.com/1", 1)])
    leased = harness.frontier.pop(DispatchView("link", "10.0.0.1"), 2).requests
    before_s = harness.redis.time()[0]
    harness.frontier.ack([item.lease_id for item in leased],
                         revisits={item.lease_id: Revisit(600_000, "a") for item in leased})
    after_s = harness.redis.time()[0]
    harness.info("u4", "c1")
    harness.info("u5")
    one, app = harness.answers(2)
    next_due = one.pop("next_due")
    assert before_s + 600 <= next_due <= after_s + 602
    assert {name: one[name] for name in ("status", "scheduled", "due", "total_pending")} == {
        "status": "scheduled", "scheduled": 2, "due": 0, "total_pending": 0}
    assert "reason" not in one
    assert {name: app["crawlids"]["c1"][name] for name in ("status", "scheduled", "total")} == {
        "status": "scheduled", "scheduled": 2, "total": 0}
