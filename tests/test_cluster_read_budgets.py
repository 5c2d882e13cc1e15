"""The Redis round trips of one reading of the cluster, counted against a real Redis.

Four entry points read the cluster's Redis data, through ``stats.reader``: ``/metrics``, the
dashboard snapshot, the progress line of ``up`` and the Stats API answers. Each writes its
budget in its docstring; these tests hold them to it on the small cluster of
``tests/support/cluster_state.Scene`` (queued and leased requests, a paused domain, crawler
responses, monitor heartbeats, a live and a dead node) with Kafka Monitor counters. A round trip is one
``send_packed_command`` on a connection: a pipeline is one, a command or a script call is one.
Every count is taken after a first reading, so that the frontier's scripts are loaded and no
dead node is left to remove (except where that is the point).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.rest.dashboard.snapshot import SnapshotBuilder
from scrapy_cluster.rest.metrics import RestMetrics
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.stats.cluster import ClusterStats
from scrapy_cluster.stats.progress import ProgressReader
from scrapy_cluster.stats.reader import ClusterReader
from tests.support.cluster_state import Scene, settings_for

pytestmark = pytest.mark.integration


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one ``send_packed_command`` per round trip."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


class Counted:
    """A client whose round trips are counted, with the frontier and settings of the scene."""

    def __init__(self, redis_url: str, settings: dict[str, Any]) -> None:
        pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
        self.client = redis.Redis(connection_pool=pool)
        self.client.ping()  # the connection's handshake is not a reading's round trip
        self.settings = settings
        self.frontier = Frontier.from_settings(settings, self.client)

    def round_trips(self, read: Any) -> int:
        before = CountingConnection.sent
        read()
        return CountingConnection.sent - before

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def counted(redis_client: redis.Redis, redis_url: str) -> Iterator[Counted]:
    settings = settings_for(redis_url)
    Scene(redis_client, settings)
    kafka_monitor = WindowedStats.from_settings(settings, redis_client,
                                                key_prefix=keys.stats_key("kafka-monitor"))
    for name in ("total", "total", "fail", "ScraperHandler"):
        kafka_monitor.increment(name)
    reader = Counted(redis_url, settings)
    yield reader
    reader.close()


def test_metrics_scrape_costs_four_round_trips(counted: Counted) -> None:
    metrics = RestMetrics(counted.settings, counted.client, frontier=counted.frontier)
    metrics.render()
    assert counted.round_trips(metrics.render) == 4


def test_dashboard_snapshot_costs_four_round_trips(counted: Counted) -> None:
    SnapshotBuilder(counted.client, counted.frontier, counted.settings).build()
    builder = SnapshotBuilder(counted.client, counted.frontier, counted.settings)
    assert counted.round_trips(builder.build) == 4


def test_dashboard_funnel_costs_one_round_trip(counted: Counted) -> None:
    builder = SnapshotBuilder(counted.client, counted.frontier, counted.settings)
    assert counted.round_trips(lambda: builder.funnel("link", "c1")) == 1


def test_progress_line_costs_four_round_trips(counted: Counted) -> None:
    reader = ProgressReader.from_settings(counted.settings, counted.client)
    reader.read()
    assert counted.round_trips(reader.read) == 4


STATS_ROUND_TRIPS = {"kafka-monitor": 3, "redis-monitor": 2, "rest": 1, "spider": 4,
                     "machine": 3, "queue": 1, "crawler": 5, "all": 11}
"""Per stats type: the component types read nodes, names and counters (names alone when no
counter was ever counted, nodes alone for ``rest``); ``spider`` and ``machine`` the crawler
sources, their names and counters, and for ``spider`` the crawler nodes; ``queue`` the
backlog script; ``crawler`` all of those; ``all`` every component and the crawler."""


@pytest.mark.parametrize(("stats_type", "expected"), sorted(STATS_ROUND_TRIPS.items()))
def test_stats_answer_round_trips(counted: Counted, stats_type: str, expected: int) -> None:
    stats = ClusterStats(counted.client, counted.settings, frontier=counted.frontier)
    stats.answer(stats_type)
    assert counted.round_trips(lambda: stats.answer(stats_type)) == expected


def test_stats_answer_removing_a_dead_node_costs_one_more(counted: Counted) -> None:
    stats = ClusterStats(counted.client, counted.settings, frontier=counted.frontier)
    stats.answer("kafka-monitor")
    dead = WindowedStats.from_settings(counted.settings, counted.client,
                                       key_prefix=keys.stats_key("kafka-monitor"),
                                       clock=lambda: time.time() - 500)
    dead.heartbeat("km-host", "33-cc")
    assert counted.round_trips(lambda: stats.answer("kafka-monitor")) == \
        STATS_ROUND_TRIPS["kafka-monitor"] + 1


def test_an_empty_batch_costs_no_round_trip(counted: Counted) -> None:
    batch = ClusterReader(counted.client).batch()
    assert counted.round_trips(batch.run) == 0


def test_a_batch_of_reads_costs_one_round_trip(counted: Counted) -> None:
    batch = ClusterReader(counted.client).batch()
    batch.crawler_sources()
    batch.heartbeats("crawler")
    batch.filtered_totals()
    assert counted.round_trips(batch.run) == 1
