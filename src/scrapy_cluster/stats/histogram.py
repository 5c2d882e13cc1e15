"""``RedisHistogram``: a cluster-wide cumulative histogram in one Redis HASH.

Several processes observe values (seconds, bytes) into the same histogram; the Rest service's
``/metrics`` exposes it as a Prometheus histogram (``_bucket{le=...}``, ``_sum``, ``_count``).

Key schema: ``keys.histogram(name)`` is a HASH with one field per bucket upper bound (the
bound written with ``repr``, e.g. ``0.25``; ``+Inf`` for the last), holding how many
observations fell into that bucket (not cumulative: one HINCRBY per non-empty bucket), plus
``sum`` (HINCRBYFLOAT) and ``count``. Cumulative counts are computed on read. No TTL.

Observations are counted locally; ``queue_flush(pipe)`` adds at most ``len(bounds) + 3``
commands to a pipeline the caller executes anyway, so observing costs no round trip of its own.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scrapy_cluster import keys

INF = "+Inf"
ENQUEUE_TO_FETCH = "enqueue_to_fetch_seconds"
"""The crawlers' histogram of seconds from queuing a request to fetching it."""
SECONDS_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                                      10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0)
"""Default bounds for latencies from milliseconds to an hour (enqueue-to-fetch can be long)."""


@dataclass(frozen=True)
class HistogramSnapshot:
    """Cumulative counts ``[(upper bound, observations <= bound)]`` ending with ``+Inf``."""

    buckets: list[tuple[float, int]]
    sum: float
    count: int


def _field(bound: float) -> str:
    return INF if math.isinf(bound) else repr(float(bound))


class RedisHistogram:
    """Counts observations locally and writes them with the caller's pipeline."""

    def __init__(self, client: Any, name: str,
                 bounds: Sequence[float] = SECONDS_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("bounds must be non-empty, increasing and unique")
        self.client = client
        self.key = keys.histogram(name)
        self.bounds = [float(b) for b in bounds if not math.isinf(b)]
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0.0
        self._count = 0

    def observe(self, value: float) -> None:
        """Count one observation locally. No Redis I/O."""
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self._sum += value
        self._count += 1

    @property
    def pending(self) -> int:
        """Observations not yet written."""
        return self._count

    def queue_flush(self, pipe: Any) -> None:
        """Queue the pending observations on ``pipe`` (0 round trips) and forget them locally.
        If the pipeline fails, they are lost (a metric, not data)."""
        if not self._count:
            return
        fields = [*(_field(b) for b in self.bounds), INF]
        for field, count in zip(fields, self._counts, strict=True):
            if count:
                pipe.hincrby(self.key, field, count)
        pipe.hincrbyfloat(self.key, "sum", self._sum)
        pipe.hincrby(self.key, "count", self._count)
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum, self._count = 0.0, 0

    def read(self) -> HistogramSnapshot:
        """The cluster-wide histogram. Round trips: 1."""
        return parse_snapshot(self.client.hgetall(self.key), self.bounds)


def parse_snapshot(raw: Mapping[Any, Any], bounds: Sequence[float]) -> HistogramSnapshot:
    """Cumulative snapshot from an HGETALL reply; bounds not in ``bounds`` are still counted
    in ``+Inf`` so a histogram whose bounds changed never loses observations."""
    values = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in raw.items()}
    total = int(values.pop("count", 0) or 0)
    observed_sum = float(values.pop("sum", 0) or 0)
    cumulative: list[tuple[float, int]] = []
    running = 0
    for bound in bounds:
        running += int(values.get(_field(bound), 0) or 0)
        cumulative.append((float(bound), running))
    cumulative.append((math.inf, max(total, running)))
    return HistogramSnapshot(cumulative, observed_sum, total)
