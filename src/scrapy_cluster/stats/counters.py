"""Step-window counters: a count per fixed window (9:00-10:00, 10:00-11:00, ...).

With ``roll=True`` every window has its own key, ``<key>:<UTC window start>``
(e.g. ``counter:2016-01-31_19:00:00``); windows start at
``start_time_s + k * window_s``. The ``keep_max`` windows before the current
one are kept and older ones are deleted: by one DEL when this process first
writes into a new window, and, as a backstop, by a TTL of ``keep_max + 1``
windows. With ``roll=False`` the counter uses ``key`` itself and never resets.

The windows are a ``StepWindows`` (window_s, roll, keep_max, start_time_s) passed after the key.

Kinds: ``Counter``/``TimeWindow`` (integer), ``UniqueCounter`` (exact distinct
items, a SET), ``HyperLogLogCounter`` (approximate distinct items, ~0.81%
error), ``BitmapCounter`` (distinct integer ids, a bitmap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.stats.windows import SECONDS_1_HOUR, Clock, system_clock


@dataclass(frozen=True)
class StepWindows:
    """How a step-window counter cuts time: windows of ``window_s`` starting at
    ``start_time_s + k * window_s``, a key per window when ``roll``, ``keep_max`` earlier
    windows kept (see the module docstring)."""

    window_s: int = SECONDS_1_HOUR
    roll: bool = True
    keep_max: int = 12
    start_time_s: int = 0


class StepCounter:
    """Shared window arithmetic and key life cycle of the step-window counters."""

    def __init__(self, redis_client: redis.Redis, key: str,
                 windows: StepWindows = StepWindows(), *, clock: Clock | None = None) -> None:
        window_s, keep_max = windows.window_s, windows.keep_max
        if window_s <= 0 or keep_max < 0:
            raise ValueError(f"need window_s > 0 and keep_max >= 0, got {window_s!r}, {keep_max!r}")
        self.redis = redis_client
        self.key = key
        self.window_s = int(window_s)
        self.roll = windows.roll
        self.keep_max = keep_max
        self.start_time_s = int(windows.start_time_s)
        self.clock = clock or system_clock
        self._last_window_start: int | None = None

    def window_start(self) -> int:
        """Epoch seconds at which the current window began."""
        elapsed = self.clock() - self.start_time_s
        return self.start_time_s + math.floor(elapsed / self.window_s) * self.window_s

    def get_key(self) -> str:
        """The key counted into now."""
        if not self.roll:
            return self.key
        return keys.stats_time_window(self.key, self.window_start())

    def delete_key(self) -> None:
        """Delete the current key. Round trips: 1."""
        self.redis.delete(self.get_key())

    def _write(self, write: Any, pipe: Any) -> None:
        """Queue ``write(pipe, key)`` plus roll housekeeping; execute unless ``pipe`` was given.

        Round trips: 0 with ``pipe``, else 1. When a new window starts, one DEL
        of the windows beyond ``keep_max`` and one EXPIRE ride along.
        """
        target = pipe if pipe is not None else self.redis.pipeline(transaction=False)
        key = self.get_key()
        write(target, key)
        if self.roll:
            self._queue_roll(target, key)
        if pipe is None:
            target.execute()

    def _queue_roll(self, pipe: Any, key: str) -> None:
        start = self.window_start()
        if start == self._last_window_start:
            return
        self._last_window_start = start
        kept_s = (self.keep_max + 1) * self.window_s
        pipe.expire(key, max(1, math.ceil(start + kept_s - self.clock())))
        newest_dropped = start - kept_s
        dropped = [
            keys.stats_time_window(self.key, newest_dropped - index * self.window_s)
            for index in range(self.keep_max + 1)
        ]
        pipe.delete(*dropped)


class Counter(StepCounter):
    """A distributed integer counter, optionally per window; ``value()`` starts at ``start_at``."""

    def __init__(self, redis_client: redis.Redis, key: str,
                 windows: StepWindows = StepWindows(), *, start_at: int = 0,
                 clock: Clock | None = None) -> None:
        super().__init__(redis_client, key, windows, clock=clock)
        self.start_at = start_at

    def increment(self, amount: int = 1, *, pipe: Any = None) -> None:
        """Add ``amount``. Round trips: 0 with ``pipe``, else 1."""
        self._write(lambda target, key: target.incrby(key, amount), pipe)

    def value(self) -> int:
        """``start_at`` plus the count of the current window. Round trips: 1."""
        raw = self.redis.get(self.get_key())
        return self.start_at + (int(raw) if raw is not None else 0)


class TimeWindow(Counter):
    """Hits in the current fixed window (e.g. this hour); rolls to a new key each window."""

    def __init__(self, redis_client: redis.Redis, key: str,
                 windows: StepWindows = StepWindows(), *, clock: Clock | None = None) -> None:
        super().__init__(redis_client, key, windows, start_at=0, clock=clock)


class UniqueCounter(StepCounter):
    """Exact count of distinct items in the current window (a Redis SET)."""

    def increment(self, item: str | bytes | int, *, pipe: Any = None) -> None:
        """Count ``item`` if not yet seen this window. Round trips: 0 with ``pipe``, else 1."""
        self._write(lambda target, key: target.sadd(key, item), pipe)

    def value(self) -> int:
        """Distinct items this window. Round trips: 1."""
        return int(self.redis.scard(self.get_key()))


class HyperLogLogCounter(StepCounter):
    """Approximate count of distinct items in the current window (HyperLogLog, ~12 KB max)."""

    def increment(self, item: str | bytes | int, *, pipe: Any = None) -> None:
        """Count ``item`` if not yet seen this window. Round trips: 0 with ``pipe``, else 1."""
        self._write(lambda target, key: target.pfadd(key, item), pipe)

    def value(self) -> int:
        """Estimated distinct items this window. Round trips: 1."""
        return int(self.redis.pfcount(self.get_key()))


class BitmapCounter(StepCounter):
    """Distinct non-negative integer ids seen in the current window (one bit per id)."""

    def increment(self, index: int, *, pipe: Any = None) -> None:
        """Set the bit of ``index``. Round trips: 0 with ``pipe``, else 1."""
        if index < 0:
            raise ValueError(f"bitmap index must be >= 0, got {index!r}")
        self._write(lambda target, key: target.setbit(key, index, 1), pipe)

    def value(self) -> int:
        """Number of ids set this window. Round trips: 1."""
        return int(self.redis.bitcount(self.get_key()))
