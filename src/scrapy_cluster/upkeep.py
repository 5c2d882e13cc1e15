"""Periodic chores of a long-running component: its heartbeat key and the STATS_DUMP log line."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from scrapy_cluster.outage import is_redis_outage
from scrapy_cluster.stats import WindowedStats

HEARTBEAT_INTERVAL_S = 5.0


def process_identity() -> tuple[str, str]:
    """``(machine, id)`` naming this process in ``stats:<component>:self:<machine>:<id>``."""
    return socket.gethostname(), f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Heartbeat:
    """Refreshes the heartbeat key every ``interval_s`` (not every loop), TTL HEARTBEAT_TIMEOUT."""

    def __init__(self, stats: WindowedStats, *, machine: str, process_id: str,
                 interval_s: float, clock: Callable[[], float]) -> None:
        self.stats = stats
        self.machine = machine
        self.process_id = process_id
        self.interval_s = interval_s
        self.clock = clock
        self._next_beat_s = float("-inf")

    def due(self) -> bool:
        return self.clock() >= self._next_beat_s

    def queue(self, pipe: Any) -> None:
        """Queue the refresh on ``pipe`` (0 round trips) and schedule the next one."""
        self.stats.heartbeat(self.machine, self.process_id, pipe=pipe)
        self._next_beat_s = self.clock() + self.interval_s

    def beat_if_due(self, logger: logging.Logger) -> None:
        """Refresh now when due (1 round trip); a Redis outage is logged, not raised."""
        if not self.due():
            return
        try:
            self.stats.heartbeat(self.machine, self.process_id)
            self._next_beat_s = self.clock() + self.interval_s
        except Exception as exc:
            if not is_redis_outage(exc):
                raise
            logger.warning("heartbeat skipped, Redis unreachable: %s", exc)


class StatsDump:
    """Logs the monitor's counters every ``interval_s`` seconds (0 disables)."""

    def __init__(self, stats: WindowedStats, names: Sequence[str], *, interval_s: float,
                 clock: Callable[[], float], logger: logging.Logger,
                 title: str = "Kafka Monitor") -> None:
        self.stats = stats
        self.title = title
        self.names = list(names)
        self.interval_s = interval_s
        self.clock = clock
        self.logger = logger
        self._next_dump_s = clock() + interval_s

    def dump_if_due(self) -> None:
        """One round trip when due; a Redis outage postpones the dump."""
        if self.interval_s <= 0 or self.clock() < self._next_dump_s:
            return
        self._next_dump_s = self.clock() + self.interval_s
        try:
            counts = self.stats.read_many(self.names)
        except Exception as exc:
            if not is_redis_outage(exc):
                raise
            self.logger.warning("stats dump skipped, Redis unreachable: %s", exc)
            return
        for name, windows in counts.items():
            self.logger.info("%s stats: %s %s", self.title, name, windows,
                             extra={"stat": name, "windows": windows})
