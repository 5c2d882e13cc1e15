"""Judge a throttle from the outside: a site's own request log (arrival times per host).

Used by the demo, the politeness tests and ``benchmarks/politeness.py``, so all three measure
the same way. All functions are pure; times are seconds on any one clock.

- ``max_in_window``: most requests in any half-open window of the throttle's length; a polite
  crawl never exceeds the limit.
- ``utilisation``: the mean share of the limit used by every window of the throttle's length
  inside ``[start, end)``. 1.0 is a domain crawled exactly at its limit.
- ``span_utilisation``: for crawls that end when their pages run out, the shortest time the
  limit allows for the requests seen, over the time they took.
- ``gaps``: time between consecutive requests (a moderated domain's should be window / hits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """``hits`` requests per ``window_s`` seconds."""

    hits: int
    window_s: float

    @property
    def per_s(self) -> float:
        return self.hits / self.window_s


def max_in_window(times_s: Sequence[float], window_s: float) -> int:
    """Most events in any half-open interval of ``window_s`` seconds."""
    ordered, best, start = sorted(times_s), 0, 0
    for end, moment in enumerate(ordered):
        while moment - ordered[start] >= window_s:
            start += 1
        best = max(best, end - start + 1)
    return best


def utilisation(times_s: Sequence[float], limit: Limit, start_s: float, end_s: float) -> float:
    """The mean of (requests in the window / hits) over every window of the throttle's length
    that fits in ``[start_s, end_s)``.

    Unlike a plain count over the interval this does not depend on where bursts fall against
    its ends: a domain that bursts ``hits`` requests once per window scores 1.0 wherever the
    interval starts.
    """
    positions_s = end_s - limit.window_s - start_s
    if positions_s <= 0:
        raise ValueError("the interval must be longer than one window")
    covered_s = 0.0
    for moment in times_s:
        # the window [t, t + window) holds ``moment`` for t in (moment - window, moment]
        covered_s += max(0.0, min(moment, end_s - limit.window_s)
                         - max(moment - limit.window_s, start_s))
    return covered_s / (positions_s * limit.hits)


def span_utilisation(times_s: Sequence[float], limit: Limit, *, moderated: bool) -> float | None:
    """The shortest time the limit allows for these requests over the time they took.

    For a crawl that ends when its pages run out. Moderated: n requests need (n - 1) * window
    / hits; bursts: (ceil(n / hits) - 1) windows. None when the limit allows them all at once.
    """
    ordered = sorted(times_s)
    if len(ordered) < 2:
        return None
    if moderated:
        shortest_s = (len(ordered) - 1) * limit.window_s / limit.hits
    else:
        shortest_s = (math.ceil(len(ordered) / limit.hits) - 1) * limit.window_s
    took_s = ordered[-1] - ordered[0]
    if shortest_s <= 0 or took_s <= 0:
        return None
    return shortest_s / took_s


def gaps(times_s: Sequence[float]) -> list[float]:
    """Seconds between consecutive events, in order."""
    ordered = sorted(times_s)
    return [later - earlier for earlier, later in zip(ordered, ordered[1:], strict=False)]


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in [0, 1]) of a non-empty sequence."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[rank]
