"""Which spiders live crawlers run, read from the crawler heartbeats, for ``feed`` and ``info``.

``live_spiders`` is ONE round trip (through ``stats.reader``): a ZRANGEBYSCORE of
``stats:crawler:self`` (the members younger than HEARTBEAT_TIMEOUT). ``SpiderCoverage`` keeps the answer ``max_age_s`` seconds,
so a Rest process asks once per interval however many requests ``/feed`` serves: 0 round
trips per request while the answer is fresh, 1 per ``max_age_s`` otherwise (refreshes are
serialised, so concurrent requests never read twice).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis

from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.stats.reader import ClusterReader
from scrapy_cluster.stats.reasons import NO_CRAWLER, live_crawler_spiders

COVERAGE_MAX_AGE_S = 5.0
"""How long ``/feed`` trusts its last read of the crawler heartbeats."""


def live_spiders(client: redis.Redis, *, heartbeat_timeout_s: float, now_s: float) -> set[str]:
    """The spiders of the crawlers with a heartbeat younger than ``heartbeat_timeout_s``.
    ONE round trip."""
    batch = ClusterReader(client).batch()
    heartbeats = batch.live_heartbeats("crawler", now_s - heartbeat_timeout_s)
    batch.run()
    return live_crawler_spiders(heartbeats.value, now_s=now_s,
                                heartbeat_timeout_s=heartbeat_timeout_s)


def crawl_spider(request: Mapping[str, Any]) -> str | None:
    """The spider a request queues work for: the ``spiderid`` of a crawl request (one with a
    ``url``; the schema's default ``link`` when absent), None for any other request."""
    if not isinstance(request.get("url"), str):
        return None
    spiderid = request.get("spiderid", "link")
    return spiderid if isinstance(spiderid, str) else None


def missing_spider_warning(request: Mapping[str, Any], spiders: set[str]) -> str | None:
    """The warning for a crawl request whose spider no live crawler runs, else None."""
    spiderid = crawl_spider(request)
    if spiderid is None or spiderid in spiders:
        return None
    return (f"{NO_CRAWLER}: no live crawler runs spider {spiderid!r}; the crawl is queued "
            f"and waits until one starts (scrapy-cluster crawler --spider {spiderid})")


def feed_warning(settings: Mapping[str, Any], request: Mapping[str, Any]) -> str | None:
    """``missing_spider_warning`` for ``scrapy-cluster feed``: ONE round trip on a client of
    its own, only for a crawl request; None when Redis cannot be read (the feed went out)."""
    if crawl_spider(request) is None:
        return None
    client = RedisConfig.from_settings(settings).sync_client(socket_timeout=5)
    try:
        spiders = live_spiders(client, heartbeat_timeout_s=float(settings["HEARTBEAT_TIMEOUT"]),
                               now_s=time.time())
    except redis.RedisError:
        return None
    finally:
        client.close()
    return missing_spider_warning(request, spiders)


class SpiderCoverage:
    """``live_spiders`` cached for ``max_age_s`` (module docstring). Thread-safe."""

    def __init__(self, client: redis.Redis, *, heartbeat_timeout_s: float,
                 max_age_s: float = COVERAGE_MAX_AGE_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.max_age_s = max_age_s
        self.clock = clock
        self.reads = 0
        self._spiders: set[str] | None = None
        self._read_at_s = float("-inf")
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], client: redis.Redis) -> SpiderCoverage:
        return cls(client, heartbeat_timeout_s=float(settings["HEARTBEAT_TIMEOUT"]))

    def fresh(self) -> bool:
        """The last read is younger than ``max_age_s`` (no I/O)."""
        return self._spiders is not None and self.clock() - self._read_at_s < self.max_age_s

    def refresh(self) -> None:
        """Read the live spiders unless another caller just did: at most ONE round trip."""
        with self._lock:
            if self.fresh():
                return
            now_s = self.clock()
            self._spiders = live_spiders(self.redis, heartbeat_timeout_s=self.heartbeat_timeout_s,
                                         now_s=now_s)
            self._read_at_s = now_s
            self.reads += 1

    def warnings(self, request: Mapping[str, Any]) -> list[str]:
        """The warnings for ``request`` from the last read (no I/O; none before a read)."""
        if self._spiders is None:
            return []
        warning = missing_spider_warning(request, self._spiders)
        return [] if warning is None else [warning]
