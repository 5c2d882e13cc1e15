"""Redis-backed statistics: rolling windows in bounded memory and step-window counters.

Every ``increment`` accepts ``pipe=`` (a redis pipeline the caller executes with
its own writes: zero extra round trips); without it, one round trip.
See ``docs/utilities.md``.
"""

from __future__ import annotations

from scrapy_cluster.stats.counters import (
    BitmapCounter,
    Counter,
    HyperLogLogCounter,
    StepCounter,
    StepWindows,
    TimeWindow,
    UniqueCounter,
)
from scrapy_cluster.stats.rolling import RollingTimeWindow
from scrapy_cluster.stats.windowed import WindowedStats
from scrapy_cluster.stats.windows import (
    SECONDS_1_DAY,
    SECONDS_1_HOUR,
    SECONDS_1_MINUTE,
    SECONDS_1_WEEK,
    SECONDS_2_DAY,
    SECONDS_2_HOUR,
    SECONDS_3_DAY,
    SECONDS_4_HOUR,
    SECONDS_6_HOUR,
    SECONDS_7_DAY,
    SECONDS_12_HOUR,
    SECONDS_15_MINUTE,
    SECONDS_24_HOUR,
    SECONDS_30_DAY,
    SECONDS_30_MINUTE,
    SECONDS_48_HOUR,
    WINDOW_SECONDS,
    Clock,
    window_seconds,
)

__all__ = [
    "BitmapCounter",
    "Clock",
    "Counter",
    "HyperLogLogCounter",
    "RollingTimeWindow",
    "StepCounter",
    "StepWindows",
    "TimeWindow",
    "UniqueCounter",
    "WindowedStats",
    "WINDOW_SECONDS",
    "window_seconds",
    "SECONDS_1_MINUTE",
    "SECONDS_15_MINUTE",
    "SECONDS_30_MINUTE",
    "SECONDS_1_HOUR",
    "SECONDS_2_HOUR",
    "SECONDS_4_HOUR",
    "SECONDS_6_HOUR",
    "SECONDS_12_HOUR",
    "SECONDS_24_HOUR",
    "SECONDS_48_HOUR",
    "SECONDS_1_DAY",
    "SECONDS_2_DAY",
    "SECONDS_3_DAY",
    "SECONDS_7_DAY",
    "SECONDS_1_WEEK",
    "SECONDS_30_DAY",
]
