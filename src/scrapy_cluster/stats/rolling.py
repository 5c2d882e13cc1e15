"""``RollingTimeWindow``: hits in the last N seconds, in bounded memory.

The counter is one Redis HASH whose fields are time-bucket numbers
(``floor(now / bucket_s)``) and whose values are the hits counted in that
bucket. With ``bucket_s = window_s / buckets`` the hash never holds much more
than ``buckets`` fields, however many hits arrive: a one-week window costs the
same few hundred bytes at 1 hit/s or 10,000 hits/s. Up to 127 fields the hash
stays in Redis's compact listpack encoding.

Exactness: ``value()`` sums the current bucket and the ``buckets - 1`` before
it, so the window's far edge is accurate to one bucket (hits between
``window_s - bucket_s`` and ``window_s`` seconds ago may be left out).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import redis

from scrapy_cluster.stats.windows import SECONDS_1_HOUR, Clock, system_clock

DEFAULT_BUCKETS = 60


class RollingTimeWindow:
    """Counts hits over the last ``window_s`` seconds (a sliding window).

    Key schema: ``key`` is a HASH ``{bucket number: hits}`` with a TTL of
    ``window_s + 2 * bucket_s`` refreshed whenever a new bucket starts, so an
    idle counter disappears on its own. Buckets that left the window are
    removed with one HDEL when this process first writes into a new bucket;
    no thread, no extra round trip.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        key: str,
        *,
        window_s: float = SECONDS_1_HOUR,
        bucket_s: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        self.redis = redis_client
        self.key = key
        self.window_s = window_s
        self.bucket_s = bucket_s if bucket_s is not None else window_s / DEFAULT_BUCKETS
        if self.bucket_s <= 0 or self.bucket_s > window_s:
            raise ValueError(f"bucket_s must be in (0, window_s], got {self.bucket_s!r}")
        self.buckets = math.ceil(window_s / self.bucket_s)
        self.ttl_s = math.ceil(window_s + 2 * self.bucket_s)
        self.clock = clock or system_clock
        self._last_bucket: int | None = None

    def get_key(self) -> str:
        """The Redis key of the bucket hash."""
        return self.key

    def current_bucket(self) -> int:
        """The bucket number the clock is in now."""
        return math.floor(self.clock() / self.bucket_s)

    def increment(self, amount: int = 1, *, pipe: Any = None) -> None:
        """Count ``amount`` hits now.

        Round trips: 0 when ``pipe`` (a redis pipeline the caller executes) is
        given, else 1. Commands: one HINCRBY; when a new bucket starts, also
        one HDEL of expired buckets and one EXPIRE.
        """
        if pipe is not None:
            self.queue_increment(pipe, amount)
            return
        own_pipe = self.redis.pipeline(transaction=False)
        self.queue_increment(own_pipe, amount)
        own_pipe.execute()

    def queue_increment(self, pipe: Any, amount: int = 1) -> bool:
        """Add the increment's commands to ``pipe``; True when a new bucket started."""
        bucket = self.current_bucket()
        pipe.hincrby(self.key, str(bucket), amount)
        if bucket == self._last_bucket:
            return False
        self._last_bucket = bucket
        pipe.hdel(self.key, *self._expired_fields(bucket))
        pipe.expire(self.key, self.ttl_s)
        return True

    def _expired_fields(self, bucket: int) -> list[str]:
        """Buckets that fell out of the window during the last two window lengths."""
        newest_expired = bucket - self.buckets
        oldest_swept = newest_expired - self.buckets - 2
        return [str(number) for number in range(oldest_swept, newest_expired + 1)]

    def value(self) -> int:
        """Hits in the last ``window_s`` seconds (to one bucket). Round trips: 1."""
        return self.sum_buckets(self.redis.hgetall(self.key))

    def sum_buckets(self, fields: Mapping[Any, Any]) -> int:
        """Sum the buckets of a raw HGETALL reply that are inside the window now."""
        oldest = self.current_bucket() - self.buckets + 1
        total = 0
        for field, count in fields.items():
            try:
                if int(field) >= oldest:
                    total += int(count)
            except ValueError:
                continue
        return total

    def delete_key(self) -> None:
        """Delete the bucket hash. Round trips: 1."""
        self.redis.delete(self.key)
        self._last_bucket = None
