"""Re-crawl schedules as the readers of the cluster show them: ``/metrics``, the dashboard
snapshot and the Redis Monitor's monitoring line, against a real Redis whose schedules the real
frontier wrote (enqueue, pop, ack with ``Revisit``), its clock set before Redis ``TIME``.

The state (``Schedules``), on the frontier's clock, with T the Redis time at the start:

- crawl r1 (two URLs): fetched at T-200 s, due again at T-199 s, queued again and re-fetched at
  T-150 s (one 200, one 304), then due again at T-100 s: overdue by 100 s at T;
- crawl r2 (one URL): fetched at T-150 s, due again at T+3,450 s: scheduled, not overdue;
- crawl q1: one URL queued, no schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from scrapy_cluster.frontier import DispatchView, Frontier, Revisit
from scrapy_cluster.redis_monitor.monitoring import MonitoringLine
from scrapy_cluster.redis_monitor.plugins.circuit_breaker import breaker_for
from scrapy_cluster.rest.dashboard.snapshot import SnapshotBuilder
from scrapy_cluster.rest.metrics import RestMetrics
from scrapy_cluster.settings import load_settings
from scrapy_cluster.stats import recrawl
from scrapy_cluster.stats.cluster import ClusterStats
from scrapy_cluster.stats.reader import ClusterReader, ScheduleRead
from tests.support.cluster_state import Scene, request, settings_for

pytestmark = pytest.mark.integration

VIEW = DispatchView("link")
OVERDUE_S = 99.0
"""r1's due time, T-100 s, rounded up to its 1 s re-crawl bucket: overdue by at least 99 s."""
SLACK_S = 61.0
"""How much later than T a test may read (a bound, never a timing assertion)."""


class FrontierClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples_of(body: bytes) -> Samples:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def series(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: found for (sample, labels), found in samples.items() if sample == name}


class CountingConnection(redis.Connection):
    """Counts what it sends: one ``send_packed_command`` per round trip (as in
    ``tests/test_cluster_read_budgets.py``)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


class Counted:
    def __init__(self, redis_url: str, settings: dict[str, Any]) -> None:
        pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
        self.client = redis.Redis(connection_pool=pool)
        self.client.ping()
        self.settings = settings
        self.frontier = Frontier.from_settings(settings, self.client)

    def round_trips(self, read: Any) -> int:
        before = CountingConnection.sent
        read()
        return CountingConnection.sent - before


def redis_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


class Schedules:
    """The state of the module docstring, written by the real frontier."""

    def __init__(self, client: redis.Redis, settings: dict[str, Any]) -> None:
        self.t_ms = redis_ms(client)
        clock = FrontierClock(self.t_ms - 200_000)
        frontier = Frontier.from_settings(settings, client, clock=clock)
        frontier.enqueue_many([request("http://r1a.test/1", "r1", "app"),
                               request("http://r1b.test/1", "r1", "app")])
        first = frontier.pop(VIEW, 2).requests
        assert len(first) == 2
        frontier.ack([item.lease_id for item in first],
                     funnel={("link", "r1"): {"fetched:200": 2}},
                     revisits={item.lease_id: Revisit(1_000, "s1") for item in first})
        clock.ms = self.t_ms - 150_000
        again = frontier.pop(VIEW, 2).requests
        assert sorted(item.revisit or "" for item in again) == ["s1", "s1"]
        frontier.ack([item.lease_id for item in again],
                     funnel={("link", "r1"): {"fetched:200": 1, "fetched:304": 1}},
                     revisits={item.lease_id: Revisit(50_000, "s2") for item in again})
        frontier.enqueue_many([request("http://r2.test/1", "r2", "app")])
        other = frontier.pop(VIEW, 1).requests
        assert len(other) == 1
        frontier.ack([other[0].lease_id], funnel={("link", "r2"): {"fetched:200": 1}},
                     revisits={other[0].lease_id: Revisit(3_600_000, "s1")})
        frontier.enqueue_many([request("http://q1.test/1", "q1", "app")])
        self.frontier, self.clock = frontier, clock

    def take_due(self) -> None:
        """A pop at T: the due URLs of r1 are queued again (no longer overdue)."""
        self.clock.ms = self.t_ms
        self.frontier.pop(VIEW, 1)


def assert_overdue_age(age: float) -> None:
    assert OVERDUE_S <= age < OVERDUE_S + SLACK_S


@pytest.fixture
def settings(redis_url: str) -> dict[str, Any]:
    return settings_for(redis_url)


@pytest.fixture
def schedules(redis_client: redis.Redis, settings: dict[str, Any]) -> Schedules:
    return Schedules(redis_client, settings)


# --- the reader ---------------------------------------------------------------------------------

def test_the_reader_finds_scheduled_urls_and_the_oldest_overdue_crawl(
        redis_client: redis.Redis, schedules: Schedules) -> None:
    found = ClusterReader(redis_client).recrawl(funnels=True)["link"]
    assert (found.crawls, found.scheduled, found.complete) == (2, 3, True)
    assert [crawl.crawlid for crawl in found.read] == ["r1", "r2"]
    assert [crawl.crawlid for crawl in found.overdue()] == ["r1"]
    assert_overdue_age(found.oldest_overdue_s)
    assert (found.fetched, found.not_modified) == (5, 1)
    schedules.take_due()
    after = ClusterReader(redis_client).recrawl()["link"]
    assert (after.crawls, after.scheduled, after.overdue(), after.oldest_overdue_s) == (
        1, 1, [], 0.0)


def test_the_reader_takes_the_earliest_due_crawls_first_when_bounded(
        redis_client: redis.Redis, schedules: Schedules) -> None:
    plan = ScheduleRead(["link"], most=1)
    reader = ClusterReader(redis_client)
    for step in (plan.first, plan.second):
        batch = reader.batch()
        step(batch)
        batch.run()
    found = plan.result(redis_ms(redis_client))["link"]
    assert (found.crawls, [crawl.crawlid for crawl in found.read], found.complete) == (
        2, ["r1"], False)
    assert found.scheduled == 2
    assert_overdue_age(found.oldest_overdue_s)


def test_a_spider_without_schedules_reads_as_empty(redis_client: redis.Redis,
                                                   settings: dict[str, Any]) -> None:
    Frontier.from_settings(settings, redis_client).enqueue_many(
        [request("http://a.test/1", "c1", "app")])
    found = ClusterReader(redis_client).recrawl()
    assert found["link"].summary() == {"crawls": 0, "scheduled": 0, "overdue_crawls": 0,
                                       "oldest_overdue_s": 0.0, "complete": True}


def test_shares_and_ages_from_the_stored_hashes() -> None:
    assert recrawl.not_modified_share({b"fetched:200": b"3", b"fetched:304": b"1",
                                       b"queued": b"9"}) == 0.25
    assert recrawl.not_modified_share({b"queued": b"9"}) is None
    assert recrawl.overdue_seconds(1_000, 3_500) == 2.5
    assert recrawl.overdue_seconds(4_000, 3_500) == 0.0
    assert recrawl.overdue_seconds(None, 3_500) == 0.0


# --- /metrics -----------------------------------------------------------------------------------

def test_metrics_expose_the_recrawl_backlog_per_spider_and_the_304_counts(
        redis_client: redis.Redis, settings: dict[str, Any], schedules: Schedules) -> None:
    metrics = RestMetrics(settings, redis_client, frontier=schedules.frontier)
    scraped = samples_of(metrics.render()[0])
    assert value(scraped, "scrapy_cluster_recrawl_crawls", spider="link") == 2
    assert value(scraped, "scrapy_cluster_recrawl_scheduled_urls", spider="link") == 3
    assert value(scraped, "scrapy_cluster_recrawl_overdue_crawls", spider="link") == 1
    assert_overdue_age(value(scraped, "scrapy_cluster_recrawl_oldest_overdue_seconds",
                             spider="link"))
    per_crawl = series(scraped, "scrapy_cluster_recrawl_crawl_overdue_seconds")
    assert list(per_crawl) == [(("crawlid", "r1"), ("spider", "link"))]
    assert_overdue_age(next(iter(per_crawl.values())))
    assert value(scraped, "scrapy_cluster_recrawl_fetched_pages", spider="link") == 5
    assert value(scraped, "scrapy_cluster_recrawl_not_modified_pages", spider="link") == 1
    schedules.take_due()
    scraped = samples_of(metrics.render()[0])
    assert value(scraped, "scrapy_cluster_recrawl_overdue_crawls", spider="link") == 0
    assert value(scraped, "scrapy_cluster_recrawl_oldest_overdue_seconds", spider="link") == 0
    assert series(scraped, "scrapy_cluster_recrawl_crawl_overdue_seconds") == {}


def test_only_the_most_overdue_crawls_get_a_series(
        redis_client: redis.Redis, redis_url: str, schedules: Schedules) -> None:
    clock = FrontierClock(schedules.t_ms - 120_000)
    late = Frontier.from_settings(settings_for(redis_url), redis_client, clock=clock)
    late.enqueue_many([request("http://r3.test/1", "r3", "app")])
    leased = [item for item in late.pop(VIEW, 5).requests if item.request["crawlid"] == "r3"]
    assert len(leased) == 1
    late.ack([leased[0].lease_id], revisits={leased[0].lease_id: Revisit(30_000, "s1")})
    metrics = RestMetrics(settings_for(redis_url, METRICS_TOP_DOMAINS=1), redis_client,
                          frontier=late)
    scraped = samples_of(metrics.render()[0])
    assert value(scraped, "scrapy_cluster_recrawl_overdue_crawls", spider="link") == 2
    assert list(series(scraped, "scrapy_cluster_recrawl_crawl_overdue_seconds")) == [
        (("crawlid", "r1"), ("spider", "link"))]


# --- the dashboard ------------------------------------------------------------------------------

def test_the_snapshot_lists_scheduled_crawls_with_their_schedule_and_304_share(
        redis_client: redis.Redis, settings: dict[str, Any], schedules: Schedules) -> None:
    snapshot = SnapshotBuilder(redis_client, schedules.frontier, settings).build()
    rows = {row["crawlid"]: row for row in snapshot.crawls}
    assert set(rows) == {"r1", "r2", "q1"}
    r1, r2, q1 = rows["r1"], rows["r2"], rows["q1"]
    assert (r1["appid"], r1["pending"], r1["in_flight"], r1["scheduled"],
            r1["not_modified_share"]) == ("app", 0, 0, 2, 0.25)
    assert_overdue_age(r1["oldest_overdue_s"])
    assert (r2["scheduled"], r2["oldest_overdue_s"], r2["not_modified_share"]) == (1, 0.0, 0.0)
    assert (q1["pending"], q1["scheduled"], q1["oldest_overdue_s"],
            q1["not_modified_share"]) == (1, 0, None, None)
    overview = snapshot.overview
    spider = overview["recrawl"]["link"]
    assert (spider["crawls"], spider["scheduled"], spider["overdue_crawls"],
            spider["complete"]) == (2, 3, 1, True)
    assert_overdue_age(spider["oldest_overdue_s"])
    summary = overview["summary"]
    assert (summary["scheduled"], summary["overdue_crawls"]) == (3, 1)
    assert_overdue_age(summary["oldest_overdue_s"])
    one = SnapshotBuilder(redis_client, schedules.frontier, settings).funnel("link", "r1")
    assert (one["scheduled"], one["not_modified_share"], one["funnel"]["fetched"]) == (
        2, 0.25, {"200": 3, "304": 1})


# --- the monitoring line ------------------------------------------------------------------------

def test_the_monitoring_line_carries_the_recrawl_backlog(
        redis_client: redis.Redis, redis_url: str, schedules: Schedules) -> None:
    settings = dict(load_settings("redis-monitor", environ={}, settings_file=None,
                                  overrides={"REDIS_URL": redis_url, "BUS_BACKEND": "redis"}))
    line = MonitoringLine.from_settings(
        settings, breaker=breaker_for(settings, redis_client, lambda: schedules.t_ms / 1000),
        frontier=schedules.frontier,
        cluster=ClusterStats(redis_client, settings, frontier=schedules.frontier),
        redis_client=redis_client, logger=logging.getLogger("test"))
    event = line.build()["recrawl"]
    assert (event["scheduled"], event["overdue_crawls"]) == (3, 1)
    assert_overdue_age(event["oldest_overdue_s"])
    assert list(event["spiders"]) == ["link"]
    assert (event["spiders"]["link"]["crawls"], event["spiders"]["link"]["scheduled"]) == (2, 3)


# --- round trips --------------------------------------------------------------------------------

@pytest.fixture
def counted(redis_client: redis.Redis, redis_url: str) -> Iterator[Counted]:
    settings = settings_for(redis_url)
    Scene(redis_client, settings)
    Schedules(redis_client, settings)
    reader = Counted(redis_url, settings)
    yield reader
    reader.client.close()


def test_schedules_cost_the_metrics_and_the_snapshot_no_round_trip(counted: Counted) -> None:
    metrics = RestMetrics(counted.settings, counted.client, frontier=counted.frontier)
    metrics.render()
    assert counted.round_trips(metrics.render) == 4
    SnapshotBuilder(counted.client, counted.frontier, counted.settings).build()
    builder = SnapshotBuilder(counted.client, counted.frontier, counted.settings)
    assert counted.round_trips(builder.build) == 4
    assert counted.round_trips(lambda: ClusterReader(counted.client).recrawl(funnels=True)) == 3

