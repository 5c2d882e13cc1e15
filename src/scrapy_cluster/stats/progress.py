"""The cluster's progress in three numbers: pages fetched, errors, requests queued.

Read from the crawlers' lifetime counters and the frontier, for a terminal line printed every
few seconds (``scrapy-cluster up``). Only indexes are read, never the keyspace:

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

Four round trips per reading; commands grow with crawler hosts x statuses, not with pages.
The backlog per spider and the live crawler heartbeats name the spiders with queued work
that no crawler runs (``unserved``).

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
from typing import Any, Protocol

import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier.model import Backlog
from scrapy_cluster.stats.reasons import DroppedUrls, live_crawler_spiders, unserved_backlog
from scrapy_cluster.stats.windowed import LIFETIME
from scrapy_cluster.statuses import ErrorStatuses

NO_RESPONSE = 0


class BacklogSource(Protocol):
    """What the reader needs of ``Frontier``."""

    def backlog(self, most_domains: int = ...) -> dict[str, Backlog]: ...


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


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class ProgressReader:
    """Reads a ``ProgressReading`` in four round trips (module docstring)."""

    def __init__(self, client: redis.Redis, frontier: BacklogSource, *,
                 error_statuses: ErrorStatuses, heartbeat_timeout_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        self.frontier = frontier
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
        pipe = self.redis.pipeline(transaction=False)
        pipe.smembers(keys.crawler_stats_sources())
        pipe.smembers(keys.stats_names_index(keys.crawler_error_stats()))
        pipe.hgetall(keys.funnel_filtered_totals())
        pipe.zrangebyscore(keys.heartbeat_index("crawler"),
                           f"({now_s - self.heartbeat_timeout_s}", "+inf", withscores=True)
        sources, error_names, dropped, heartbeats = pipe.execute()
        live = live_crawler_spiders(((_text(member), float(score)) for member, score in heartbeats),
                                    now_s=now_s, heartbeat_timeout_s=self.heartbeat_timeout_s)
        pages, errors = self._pages_and_errors(sorted(map(_text, sources)),
                                               sorted(map(_text, error_names)))
        per_spider = {spider: queued.total for spider, queued in self.frontier.backlog(0).items()}
        return ProgressReading(at_s=self.clock(), pages=pages, errors=errors,
                               backlog=sum(per_spider.values()),
                               dropped=DroppedUrls.from_totals(dropped),
                               unserved=unserved_backlog(per_spider, live))

    def _pages_and_errors(self, sources: Sequence[str],
                          failures: Sequence[str]) -> tuple[int, int]:
        """Round trips 2 and 3 (module docstring)."""
        prefixes = [keys.stats_key("crawler", *source.split(":", 1))
                    for source in sources if ":" in source]
        statuses = self._status_names(prefixes)
        counters = [(prefix, status) for prefix, names in zip(prefixes, statuses, strict=True)
                    for status in names]
        wanted = [keys.stats_name(prefix, status, LIFETIME) for prefix, status in counters]
        wanted += [keys.stats_name(keys.crawler_error_stats(), name, LIFETIME)
                   for name in failures]
        values = [int(value or 0) for value in self.redis.mget(wanted)] if wanted else []
        by_status = [(int(status), count) for (_, status), count
                     in zip(counters, values, strict=False) if status != str(NO_RESPONSE)]
        pages = sum(count for _, count in by_status)
        errors = sum(count for status, count in by_status if status in self.error_statuses)
        return pages, errors + sum(values[len(counters):])

    def _status_names(self, prefixes: Sequence[str]) -> list[list[str]]:
        """The numeric status names each crawler stats prefix has counted. One round trip."""
        if not prefixes:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for prefix in prefixes:
            pipe.smembers(keys.stats_names_index(prefix))
        return [sorted(name for name in map(_text, reply) if name.isdigit())
                for reply in pipe.execute()]


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
