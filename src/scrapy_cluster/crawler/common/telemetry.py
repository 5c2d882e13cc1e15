"""Per-download telemetry of one crawler, counted locally and written by ``ResponseStats.flush``.

* ``enqueue_to_fetch_seconds`` (``stats.histogram.RedisHistogram``): from the moment the
  frontier queued a request (the item's enqueue time) to its response here;
* failed downloads by exception class name (``WindowedStats`` under
  ``keys.crawler_error_stats()``, e.g. ``ConnectionRefusedError``);
* per domain, the most recent failure (``keys.crawler_domain_last_error``, JSON ``{at_ms,
  status, error, url}``; ``status`` 0 and the exception's class for a download that got no
  response, ``HTTP <status>`` for a status in CIRCUIT_BREAKER_ERROR_STATUSES), TTL one day.

Everything is queued on the flush's pipeline: no round trip of its own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import orjson
import redis

from scrapy_cluster import keys
from scrapy_cluster.crawler.common.response_stats import DOMAIN_KEYS_TTL_S, NO_RESPONSE
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.stats.histogram import ENQUEUE_TO_FETCH, RedisHistogram
from scrapy_cluster.statuses import ErrorStatuses


class FetchTelemetry:
    """Counts latencies and failures locally; ``queue_flush(pipe)`` writes them."""

    def __init__(self, histogram: RedisHistogram, errors: WindowedStats,
                 error_statuses: ErrorStatuses, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.histogram, self.errors, self.error_statuses = histogram, errors, error_statuses
        self._clock = clock
        self._failures: Counter[str] = Counter()
        self._last_errors: dict[str, dict[str, Any]] = {}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], client: redis.Redis) -> FetchTelemetry:
        return cls(RedisHistogram(client, ENQUEUE_TO_FETCH),
                   WindowedStats.from_settings(settings, client,
                                               key_prefix=keys.crawler_error_stats()),
                   ErrorStatuses.parse(settings["CIRCUIT_BREAKER_ERROR_STATUSES"]))

    def response(self, domain: str, url: str, status: int, waited_s: float | None) -> None:
        """A response: ``waited_s`` since the request was queued (None: unknown). No I/O."""
        if waited_s is not None:
            self.histogram.observe(max(0.0, waited_s))
        if status in self.error_statuses:
            self._remember(domain, url, status, f"HTTP {status}")

    def failure(self, domain: str, url: str, exception: BaseException) -> None:
        """A download that got no response. No I/O."""
        name = type(exception).__name__
        self._failures[name] += 1
        self._remember(domain, url, NO_RESPONSE, name)

    def _remember(self, domain: str, url: str, status: int, error: str) -> None:
        self._last_errors[domain] = {"at_ms": int(self._clock() * 1000), "status": status,
                                     "error": error, "url": url}

    def queue_flush(self, pipe: Any) -> None:
        """Queue everything counted on ``pipe`` (0 round trips) and forget it locally."""
        failures, self._failures = self._failures, Counter()
        last_errors, self._last_errors = self._last_errors, {}
        self.histogram.queue_flush(pipe)
        for name, count in failures.items():
            self.errors.increment(name, pipe=pipe, amount=count)
        for domain, error in last_errors.items():
            pipe.set(keys.crawler_domain_last_error(domain), orjson.dumps(error),
                     ex=DOMAIN_KEYS_TTL_S)
