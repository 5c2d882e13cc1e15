"""The progress line ``scrapy-cluster up`` prints every UP_PROGRESS_INTERVAL_S seconds.

``18:02:16  progress  312 pages (41.2/s)  backlog 1,204  errors 3  crawlers 2/2``: the
cluster's totals from ``stats.progress.ProgressReader`` (four Redis round trips per line),
the page rate over the last ``rate_window_s`` (``up`` passes three stats flushes, 3 x
STATS_CYCLE, and at least two lines), and how many crawler processes run of those configured.
What explains a crawl that does nothing follows, each part only when there is something to
say (``stats.reasons``): the URLs crawlers refused and the URLs filtered, by reason, over the
cluster's lifetime, and the spiders with queued work that no live crawler runs:
``...  crawlers 1/1  2 refused (ssrf 2)  5 filtered (offsite 5)  no crawler for nosuchspider
(1 queued)``.

A line the same as the previous one is printed again only once ``repeat_after_s`` (60 s)
passed since it was, so an idle cluster prints one line a minute, never none. A Redis that
does not answer gives one ``progress unavailable`` line, then silence until it answers again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from scrapy_cluster.errors import ScrapyClusterError
from scrapy_cluster.stats.progress import ProgressRate, ProgressReading
from scrapy_cluster.stats.reasons import unserved_text

REPEAT_AFTER_S = 60.0
"""An unchanged progress line is printed again after this long."""


class ReadsProgress(Protocol):
    def read(self) -> ProgressReading: ...


class EventOutput(Protocol):
    def event(self, verb: str, text: str, *, component: str | None = None) -> None: ...


def progress_text(reading: ProgressReading, rate_per_s: float | None,
                  crawlers: tuple[int, int]) -> str:
    """``312 pages (41.2/s)  backlog 1,204  errors 3  crawlers 2/2`` (no rate: ``(-/s)``)."""
    rate = "-" if rate_per_s is None else f"{rate_per_s:,.1f}"
    parts = [f"{reading.pages:,} pages ({rate}/s)", f"backlog {reading.backlog:,}",
             f"errors {reading.errors:,}", f"crawlers {crawlers[0]}/{crawlers[1]}",
             reading.dropped.text(), unserved_text(reading.unserved)]
    return "  ".join(part for part in parts if part)


@dataclass(frozen=True)
class ProgressPolicy:
    """A line every ``interval_s`` (UP_PROGRESS_INTERVAL_S; 0: no progress line), the page
    rate over ``rate_window_s``, an unchanged line again after ``repeat_after_s``."""

    interval_s: float
    rate_window_s: float = 15.0
    repeat_after_s: float = REPEAT_AFTER_S

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ProgressPolicy:
        """The rate window spans three stats flushes (3 x STATS_CYCLE) and two lines."""
        interval_s = float(settings["UP_PROGRESS_INTERVAL_S"])
        return cls(interval_s=interval_s,
                   rate_window_s=max(3 * float(settings["STATS_CYCLE"]), 2 * interval_s))


class ProgressLoop:
    """A daemon thread printing a progress line every ``interval_s`` until ``stop()`` (an
    unchanged line at most every ``repeat_after_s``; ``clock`` is monotonic seconds)."""

    def __init__(self, reader: ReadsProgress, output: EventOutput, policy: ProgressPolicy, *,
                 crawlers: Callable[[], tuple[int, int]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reader = reader
        self.output = output
        self.interval_s = policy.interval_s
        self.crawlers = crawlers
        self.repeat_after_s = policy.repeat_after_s
        self.clock = clock
        self._printed_at_s = float("-inf")
        self._rate = ProgressRate(policy.rate_window_s)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="up-progress", daemon=True)
        self._failing = False
        self._last_text = ""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(self.interval_s + 5)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self.report_once()

    def report_once(self) -> None:
        try:
            reading = self.reader.read()
        except (redis.RedisError, ScrapyClusterError) as exc:
            if not self._failing:
                self.output.event("progress", f"unavailable: {exc}")
            self._failing = True
            return
        self._failing = False
        text = progress_text(reading, self._rate.add(reading), self.crawlers())
        now_s = self.clock()
        if text != self._last_text or now_s - self._printed_at_s >= self.repeat_after_s:
            self.output.event("progress", text)
            self._last_text, self._printed_at_s = text, now_s
