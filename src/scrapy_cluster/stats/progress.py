"""The cluster's progress in three numbers: pages fetched, errors, requests queued.

Read from the crawlers' lifetime counters and the frontier through ``stats.reader``, for a
terminal line printed every few seconds (``scrapy-cluster up``). Only indexes are read, never
the keyspace:

1. one pipeline: ``stats:crawler:_sources`` (the ``<hostname>:<spiderid>`` that counted
   responses), ``stats:crawler-errors:_names`` (the exception classes of failed downloads),
   the lifetime totals of refused and filtered URLs ``stats:crawl-funnel:filtered`` and the
   live crawler heartbeats ``stats:crawler:self`` (which spiders are crawled: see
   ``stats.reasons``);
2. one pipeline: each source's status names ``stats:crawler:<hostname>:<spiderid>:_names``
   (skipped while no crawler has counted anything);
3. one MGET of the ``...:<status>:lifetime`` and ``stats:crawler-errors:<exception>:lifetime``
   counters (skipped when there are none);
4. the frontier's backlog script (``Frontier.backlog(0)``: lengths only, no domain listed).

Four round trips per reading (``tests/test_cluster_read_budgets.py`` counts them); commands
grow with crawler hosts x statuses, not with pages. The backlog per spider and the live
crawler heartbeats name the spiders with queued work that no crawler runs (``unserved``).

``pages`` counts responses with a status in STATUS_RESPONSE_CODES (the codes crawlers count
cluster-wide, default 200, 403, 404, 504); ``errors`` counts those among them in
CIRCUIT_BREAKER_ERROR_STATUSES plus every download that got no response (by exception class,
``stats:crawler-errors``). Status ``0`` is never a page and, being counted as a failed download
already, never a second error. The counters live as long as the Redis data: a cluster that
resumes from its data directory continues its totals.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.stats.reader import BacklogSource, ClusterReader, CrawlerSource
from scrapy_cluster.stats.reasons import DroppedUrls, live_crawler_spiders, unserved_backlog
from scrapy_cluster.statuses import ErrorStatuses

NO_RESPONSE = 0


@dataclass(frozen=True)
class ProgressReading:
    """Cluster totals at ``at_s`` (the reader's clock, monotonic by default)."""

    at_s: float
    pages: int
    errors: int
    backlog: int
    dropped: DroppedUrls = field(default_factory=DroppedUrls)
    """URLs refused and filtered over the cluster's lifetime, by reason."""
    unserved: dict[str, int] = field(default_factory=dict)
    """``{spiderid: requests queued}`` for spiders with work and no live crawler."""


class ProgressReader:
    """Reads a ``ProgressReading`` in four round trips (module docstring)."""

    def __init__(self, client: redis.Redis, frontier: BacklogSource, *,
                 error_statuses: ErrorStatuses, heartbeat_timeout_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.reader = ClusterReader(client, frontier)
        self.error_statuses = error_statuses
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.clock = clock
        self.wall_clock = wall_clock

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], client: redis.Redis) -> ProgressReader:
        from scrapy_cluster.frontier.sync import Frontier

        return cls(client, Frontier.from_settings(settings, client),
                   error_statuses=ErrorStatuses.parse(settings["CIRCUIT_BREAKER_ERROR_STATUSES"]),
                   heartbeat_timeout_s=float(settings["HEARTBEAT_TIMEOUT"]))

    def read(self) -> ProgressReading:
        now_s = self.wall_clock()
        batch = self.reader.batch()
        sources = batch.crawler_sources()
        error_names = batch.names(keys.crawler_error_stats())
        dropped = batch.filtered_totals()
        heartbeats = batch.live_heartbeats("crawler", now_s - self.heartbeat_timeout_s)
        batch.run()
        live = live_crawler_spiders(heartbeats.value, now_s=now_s,
                                    heartbeat_timeout_s=self.heartbeat_timeout_s)
        pages, errors = self._pages_and_errors(sources.value, error_names.value)
        per_spider = {spider: queued.total for spider, queued in self.reader.backlog(0).items()}
        return ProgressReading(at_s=self.clock(), pages=pages, errors=errors,
                               backlog=sum(per_spider.values()),
                               dropped=DroppedUrls.from_totals(dropped.value),
                               unserved=unserved_backlog(per_spider, live))

    def _pages_and_errors(self, sources: Sequence[CrawlerSource],
                          failures: Sequence[str]) -> tuple[int, int]:
        """Round trips 2 and 3 (module docstring)."""
        errors_prefix = keys.crawler_error_stats()
        totals = self.reader.lifetime_totals(sources, {errors_prefix: failures})
        by_status = [(int(status), count) for source in sources
                     for status, count in totals.get(source.prefix, {}).items()
                     if status.isdigit() and status != str(NO_RESPONSE)]
        pages = sum(count for _, count in by_status)
        errors = sum(count for status, count in by_status if status in self.error_statuses)
        return pages, errors + sum(totals.get(errors_prefix, {}).values())


class ProgressRate:
    """Pages per second over the readings of the last ``window_s`` seconds.

    Crawlers write their counters every STATS_CYCLE seconds, so the rate between two
    consecutive readings jumps; over a window of several cycles it does not. Pure: no I/O.
    """

    def __init__(self, window_s: float = 15.0) -> None:
        self.window_s = window_s
        self._readings: deque[ProgressReading] = deque()

    def add(self, reading: ProgressReading) -> float | None:
        """Record ``reading``; returns pages/s since the oldest reading kept (None for the first)."""
        self._readings.append(reading)
        while len(self._readings) > 2 and reading.at_s - self._readings[1].at_s >= self.window_s:
            self._readings.popleft()
        oldest = self._readings[0]
        elapsed_s = reading.at_s - oldest.at_s
        if elapsed_s <= 0:
            return None
        return max(0, reading.pages - oldest.pages) / elapsed_s
