"""Named time windows (the ``STATS_TIMES`` vocabulary) and the clock seam."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]
"""Returns the current time in epoch seconds; tests inject a fake one."""

SECONDS_1_MINUTE = 60
SECONDS_15_MINUTE = 15 * 60
SECONDS_30_MINUTE = 30 * 60
SECONDS_1_HOUR = 60 * 60
SECONDS_2_HOUR = 2 * SECONDS_1_HOUR
SECONDS_4_HOUR = 4 * SECONDS_1_HOUR
SECONDS_6_HOUR = 6 * SECONDS_1_HOUR
SECONDS_12_HOUR = 12 * SECONDS_1_HOUR
SECONDS_24_HOUR = 24 * SECONDS_1_HOUR
SECONDS_48_HOUR = 48 * SECONDS_1_HOUR
SECONDS_1_DAY = SECONDS_24_HOUR
SECONDS_2_DAY = 2 * SECONDS_1_DAY
SECONDS_3_DAY = 3 * SECONDS_1_DAY
SECONDS_7_DAY = 7 * SECONDS_1_DAY
SECONDS_1_WEEK = SECONDS_7_DAY
SECONDS_30_DAY = 30 * SECONDS_1_DAY

WINDOW_SECONDS: dict[str, int] = {
    name: value for name, value in globals().items() if name.startswith("SECONDS_")
}
"""Every named window, e.g. ``{"SECONDS_15_MINUTE": 900, ...}``."""


def window_seconds(window: str | int) -> int:
    """The length in seconds of a window given by name (``"SECONDS_1_HOUR"``) or number.

    Numeric strings (``"900"``) are accepted too. Raises ``ValueError`` naming
    the known windows when the name is unknown or the length is not positive.
    """
    if isinstance(window, str) and window in WINDOW_SECONDS:
        return WINDOW_SECONDS[window]
    try:
        seconds = int(window)
    except ValueError:
        known = ", ".join(WINDOW_SECONDS)
        raise ValueError(f"unknown stats window {window!r}; use a number of seconds or one of: {known}") from None
    if seconds <= 0:
        raise ValueError(f"stats window must be a positive number of seconds, got {window!r}")
    return seconds


def system_clock() -> float:
    """The default clock: ``time.time()``."""
    return time.time()
