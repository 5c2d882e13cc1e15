"""One snapshot per refresh interval per process, whatever the number of viewers.

``SnapshotCache.get`` returns the current snapshot while it is younger than ``max_age_s``;
otherwise the first caller builds a new one in a worker thread and every caller arriving
meanwhile waits for that same build (an ``asyncio.Lock``), so N open dashboards cost one
build (four Redis round trips, see ``snapshot``) per interval. A failed build is remembered
for the interval too, so an outage is not hammered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from scrapy_cluster.rest.dashboard.model import Snapshot


class SnapshotCache:
    def __init__(self, build: Callable[[], Snapshot], *, max_age_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.build = build
        self.max_age_s = max_age_s
        self.clock = clock
        self.builds = 0
        self._lock = asyncio.Lock()
        self._snapshot: Snapshot | None = None
        self._error: Exception | None = None
        self._built_at_s = float("-inf")

    def fresh(self) -> bool:
        return self.clock() - self._built_at_s < self.max_age_s

    def stale_in_s(self) -> float:
        """Seconds until the cached snapshot is due for a rebuild (0 when it is already)."""
        return max(0.0, self._built_at_s + self.max_age_s - self.clock())

    async def get(self) -> Snapshot:
        """The current snapshot; raises the build's exception while a failure is current."""
        async with self._lock:
            if not self.fresh():
                try:
                    self._snapshot, self._error = await run_in_threadpool(self.build), None
                except Exception as exc:  # reported to every caller until the next try
                    self._error = exc
                self.builds += 1
                self._built_at_s = self.clock()
            if self._error is not None:
                raise self._error
            assert self._snapshot is not None
            return self._snapshot
