"""The ``monitoring_update`` event: one log record every STATS_DUMP seconds that says how the
crawl is going, for a log pipeline (LOG_JSON=True makes it one JSON line).

Fields (in the record's extras, under ``monitoring``):

- ``general``: ``success_rps`` and ``error_rps`` over the breaker's window
  (CRAWLER_STATUS_WINDOW_S, every domain), ``circuit_breaker_tripped`` (paused and halted
  domains), ``paused``, ``halted``;
- ``specific``: per recently active domain ``successful``, ``error``, ``last_50_statuses``
  (histogram of its last CRAWLER_STATUS_LAST_N statuses), ``rate_limit`` (hits / window
  seconds in force: its override or QUEUE_HITS / QUEUE_WINDOW), ``state``;
- ``backlog`` (STATS_DUMP_QUEUE): ``total`` and per spider ``{total, domains}``;
- ``recrawl`` (STATS_DUMP_QUEUE): the re-crawl backlog, ``scheduled`` (URLs waiting in
  schedules), ``overdue_crawls`` and ``oldest_overdue_s`` (the age of the oldest URL due and
  not yet queued again, 0 when none) over every spider, and ``spiders``: per spider with a
  schedule ``{crawls, scheduled, overdue_crawls, oldest_overdue_s, complete}``
  (``stats.recrawl``);
- ``crawler`` (STATS_DUMP_CRAWL): the ``spider`` stats answer.

Round trips: 2 (breaker snapshot) + 1 (throttle overrides) + 1 (backlog) + 3 (re-crawl
schedules, ``ClusterReader.recrawl``; fewer when none) + about 3 (crawler stats), once per
STATS_DUMP.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.config import DomainThrottle
from scrapy_cluster.outage import is_redis_outage
from scrapy_cluster.redis_monitor.breaker import CircuitBreaker
from scrapy_cluster.stats.cluster import ClusterStats
from scrapy_cluster.stats.reader import ClusterReader
from scrapy_cluster.stats.recrawl import SpiderSchedules

EVENT = "monitoring_update"


@dataclass(frozen=True)
class MonitoringPolicy:
    """The settings the event obeys: how often (STATS_DUMP, 0 = never), the status window
    (CRAWLER_STATUS_WINDOW_S), the default rate limit (QUEUE_HITS / QUEUE_WINDOW, hits per
    second) and whether to add the backlog and the crawler stats."""

    interval_s: float
    window_s: float
    default_rate: float
    dump_queue: bool
    dump_crawl: bool

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> MonitoringPolicy:
        window = float(settings["QUEUE_WINDOW"])
        return cls(interval_s=float(settings["STATS_DUMP"]),
                   window_s=float(settings["CRAWLER_STATUS_WINDOW_S"]),
                   default_rate=float(settings["QUEUE_HITS"]) / window if window > 0 else 0.0,
                   dump_queue=bool(settings["STATS_DUMP_QUEUE"]),
                   dump_crawl=bool(settings["STATS_DUMP_CRAWL"]))


@dataclass(frozen=True)
class MonitoringParts:
    """What the event is read from: the breaker's snapshot, the frontier's backlog, the
    cluster's crawler stats and the throttle overrides (through ``redis_client``)."""

    breaker: CircuitBreaker
    frontier: Frontier
    cluster: ClusterStats
    redis_client: redis.Redis
    logger: logging.Logger


class MonitoringLine:
    """Builds and logs the event; ``log_if_due`` is a monitor chore."""

    def __init__(self, parts: MonitoringParts, *, policy: MonitoringPolicy,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.breaker, self.frontier, self.cluster = parts.breaker, parts.frontier, parts.cluster
        self.redis, self.logger = parts.redis_client, parts.logger
        self.policy = policy
        self.clock = clock
        self._next_s = clock() + policy.interval_s

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], *, breaker: CircuitBreaker,
                      frontier: Frontier, cluster: ClusterStats, redis_client: redis.Redis,
                      logger: logging.Logger) -> MonitoringLine:
        return cls(MonitoringParts(breaker=breaker, frontier=frontier, cluster=cluster,
                                   redis_client=redis_client, logger=logger),
                   policy=MonitoringPolicy.from_settings(settings))

    def log_if_due(self) -> None:
        if self.policy.interval_s <= 0 or self.clock() < self._next_s:
            return
        self._next_s = self.clock() + self.policy.interval_s
        try:
            event = self.build()
        except Exception as exc:
            if not is_redis_outage(exc):
                raise
            self.logger.warning("monitoring update skipped, Redis unreachable: %s", exc)
            return
        self.logger.info(EVENT, extra={"event": EVENT, "monitoring": event})

    def build(self) -> dict[str, Any]:
        snapshot = self.breaker.snapshot()
        raw_overrides: Any = self.redis.hgetall(keys.domain_throttle_config())
        overrides = {name.decode(): DomainThrottle.from_json(raw)
                     for name, raw in raw_overrides.items()}
        specific: dict[str, Any] = {}
        successes = errors = 0
        for domain, seen in snapshot["domains"].items():
            throttle = overrides.get(domain)
            rate = (throttle.limit / throttle.window_s if throttle and throttle.window_s
                    else self.policy.default_rate)
            specific[domain] = {"successful": seen["successful"], "error": seen["error"],
                                "last_50_statuses": seen["last_statuses"],
                                "rate_limit": round(rate, 4), "state": seen["state"]}
            successes += seen["successful"]
            errors += seen["error"]
        event: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "general": {"success_rps": round(successes / self.policy.window_s, 4),
                        "error_rps": round(errors / self.policy.window_s, 4),
                        "circuit_breaker_tripped": sorted({*snapshot["paused"],
                                                           *snapshot["halted"]}),
                        "paused": snapshot["paused"], "halted": snapshot["halted"]},
            "specific": specific}
        if self.policy.dump_queue:
            backlog = self.frontier.backlog(most_domains=100)
            event["backlog"] = {"total": sum(b.total for b in backlog.values()),
                                **{spider: {"total": b.total, "domains": b.domains}
                                   for spider, b in backlog.items()}}
            event["recrawl"] = recrawl_summary(ClusterReader(self.redis).recrawl())
        if self.policy.dump_crawl:
            event["crawler"] = self.cluster.spiders()
        return event


def recrawl_summary(schedules: Mapping[str, SpiderSchedules]) -> dict[str, Any]:
    """The event's ``recrawl`` field (module docstring)."""
    rows = {spider: found.summary() for spider, found in sorted(schedules.items())
            if found.crawls}
    return {"scheduled": sum(row["scheduled"] for row in rows.values()),
            "overdue_crawls": sum(row["overdue_crawls"] for row in rows.values()),
            "oldest_overdue_s": max((row["oldest_overdue_s"] for row in rows.values()),
                                    default=0.0),
            "spiders": rows}

