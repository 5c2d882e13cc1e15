"""The values the dashboard's snapshot is built from and made of."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from scrapy_cluster.frontier.model import Backlog
from scrapy_cluster.rest.dashboard.records import LeaseRecord
from scrapy_cluster.stats.reader import CrawlerSource
from scrapy_cluster.stats.recrawl import RecrawlIndex
from scrapy_cluster.statuses import ErrorStatuses

CrawlKey = tuple[str, str]


@dataclass(frozen=True)
class Policy:
    """The settings the dashboard reads (docs/settings.md)."""

    heartbeat_timeout_s: float
    status_window_s: float
    errors: ErrorStatuses
    default_hits: int
    default_window_s: float

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Policy:
        return cls(heartbeat_timeout_s=float(settings["HEARTBEAT_TIMEOUT"]),
                   status_window_s=float(settings["CRAWLER_STATUS_WINDOW_S"]),
                   errors=ErrorStatuses.parse(settings["CIRCUIT_BREAKER_ERROR_STATUSES"]),
                   default_hits=int(settings["QUEUE_HITS"]),
                   default_window_s=float(settings["QUEUE_WINDOW"]))


@dataclass
class Raw:
    """The replies of one build, decoded only as far as needed to plan the next round trip."""

    now_s: float
    redis_now_ms: int
    backlog: Mapping[str, Backlog]
    chart_window_s: int
    heartbeats: dict[str, list[tuple[str, float]]]
    sources: list[CrawlerSource]
    error_names: list[str]
    active_domains: list[str]
    paused: dict[str, int]
    breaker: dict[str, bytes]
    throttles: dict[str, bytes]
    blacklist: list[str]
    leases: list[LeaseRecord]
    timeouts: dict[str, int]
    spiders: list[str]
    filtered_totals: Mapping[bytes, bytes]
    node_infos: dict[tuple[str, str], bytes | None]
    source_names: dict[CrawlerSource, list[str]]
    status_windows: dict[str, list[str]]
    last_errors: dict[str, bytes | None]
    subqueues: dict[tuple[str, str], list[str]]
    error_buckets: dict[str, Mapping[bytes, bytes]]
    status_buckets: dict[tuple[CrawlerSource, str], Mapping[bytes, bytes]]
    ready: dict[str, dict[str, float]]
    crawl_apps: dict[CrawlKey, str]
    crawl_counts: dict[CrawlKey, tuple[Mapping[bytes, bytes], Mapping[bytes, bytes]]]
    recrawl: dict[str, RecrawlIndex] = field(default_factory=dict)
    """Each spider's crawls with a re-crawl schedule, earliest due first (``stats.recrawl``)."""


@dataclass
class Snapshot:
    """``overview`` is pushed to every viewer; ``domains`` and ``crawls`` (sorted, busiest
    first) are served a page at a time."""

    generated_at_ms: int
    overview: dict[str, Any]
    domains: list[dict[str, Any]] = field(default_factory=list)
    crawls: list[dict[str, Any]] = field(default_factory=list)


def json_object(raw: bytes | str | None) -> dict[str, Any] | None:
    """A stored JSON object, or None when absent or not an object."""
    if not raw:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
