"""Periodic chores of a long-running component: its heartbeat key and the STATS_DUMP log line."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scrapy_cluster.outage import is_redis_outage
from scrapy_cluster.stats import WindowedStats

HEARTBEAT_INTERVAL_S = 5.0


def process_identity() -> tuple[str, str]:
    """``(machine, id)`` unique to this process run: ``<pid>-<8 random hex>``."""
    return socket.gethostname(), f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def node_id(settings: Mapping[str, Any]) -> str | None:
    """SC_NODE_ID when set (a supervisor's stable name for the process, e.g. ``crawler-1``),
    else None (the process picks a unique id)."""
    return str(settings.get("SC_NODE_ID") or "").strip() or None


def node_identity(settings: Mapping[str, Any]) -> tuple[str, str]:
    """``(machine, id)`` naming this process in ``stats:<component>:self:<machine>:<id>``:
    SC_NODE_ID when set, so restarts of one supervised process are one node; else unique."""
    machine, unique = process_identity()
    return machine, node_id(settings) or unique


class Heartbeat:
    """Refreshes the heartbeat key every ``interval_s`` (not every loop), TTL HEARTBEAT_TIMEOUT.

    ``info`` (optional, e.g. ``stats.node.NodeInfo()``) describes the node; its result is
    written to ``stats:<component>:info:<member>`` with each refresh, in the same round trip.
    """

    def __init__(self, stats: WindowedStats, *, machine: str, process_id: str,
                 interval_s: float, clock: Callable[[], float],
                 info: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.stats = stats
        self.machine = machine
        self.process_id = process_id
        self.interval_s = interval_s
        self.clock = clock
        self.info = info
        self._next_beat_s = float("-inf")
        self._failing = False

    def _info(self) -> Mapping[str, Any] | None:
        return self.info() if self.info is not None else None

    def due(self) -> bool:
        return self.clock() >= self._next_beat_s

    def queue(self, pipe: Any) -> None:
        """Queue the refresh on ``pipe`` (0 round trips) and schedule the next one."""
        self.stats.heartbeat(self.machine, self.process_id, pipe=pipe, info=self._info())
        self._next_beat_s = self.clock() + self.interval_s

    def remove(self, logger: logging.Logger) -> None:
        """Remove this node's heartbeat (a clean stop; 1 round trip); ``beat_if_due`` writes
        none after it. An unreachable Redis is logged, not raised: the heartbeat then expires
        after HEARTBEAT_TIMEOUT."""
        self._next_beat_s = float("inf")
        try:
            self.stats.remove_heartbeat(self.machine, self.process_id)
        except Exception as exc:
            if not is_redis_outage(exc):
                raise
            logger.warning("heartbeat not removed, Redis unreachable (it expires by itself): "
                           "%s", exc)

    def beat_if_due(self, logger: logging.Logger) -> None:
        """Refresh now when due (1 round trip). A Redis outage is not raised: the next try is
        one interval later, and only its first failure is a warning (the rest DEBUG)."""
        if not self.due():
            return
        self._next_beat_s = self.clock() + self.interval_s
        try:
            self.stats.heartbeat(self.machine, self.process_id, info=self._info())
        except Exception as exc:
            if not is_redis_outage(exc):
                raise
            log = logger.debug if self._failing else logger.warning
            log("heartbeat skipped, Redis unreachable: %s", exc)
            self._failing = True
            return
        if self._failing:
            logger.info("heartbeat written again, Redis is back")
        self._failing = False


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
