"""What ``GET /`` reports: Redis and bus connectivity, checked again and again.

A thread checks both every REST_HEALTH_INTERVAL_S: Redis with a PING, the bus by listing its
topics (a metadata request to the Kafka broker; one SMEMBERS on the Redis Streams backend).
The index endpoint reads the last result, so it never blocks on a dead server and is never
older than one interval plus one check's timeout. The same thread refreshes the heartbeat
``stats:rest:self:<machine>:<id>`` (1 round trip every 5 s at most).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GREEN, YELLOW, RED = "GREEN", "YELLOW", "RED"


@dataclass(frozen=True)
class Health:
    redis_connected: bool = False
    kafka_connected: bool = False
    checked_at: float = 0.0

    @property
    def node_health(self) -> str:
        up = self.redis_connected + self.kafka_connected
        return GREEN if up == 2 else YELLOW if up == 1 else RED


def _check(probe: Callable[[], Any]) -> bool:
    try:
        probe()
    except Exception:  # any failure means "not connected"; the reason is logged on change
        return False
    return True


class HealthMonitor(threading.Thread):
    """Runs the checks and the heartbeat until ``stop``."""

    def __init__(self, *, redis_probe: Callable[[], Any], bus_probe: Callable[[], Any],
                 interval_s: float, logger: logging.Logger,
                 heartbeat: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(name="rest-health", daemon=True)
        self.redis_probe = redis_probe
        self.bus_probe = bus_probe
        self.interval_s = interval_s
        self.logger = logger
        self.heartbeat = heartbeat
        self.clock = clock
        self.health = Health()
        self._halt = threading.Event()

    def check_now(self) -> Health:
        """Check both (blocking, up to the clients' timeouts), log changes, keep the result."""
        redis_up, bus_up = _check(self.redis_probe), _check(self.bus_probe)
        previous = self.health
        self.health = Health(redis_up, bus_up, self.clock())
        if previous.checked_at and (previous.redis_connected, previous.kafka_connected) != (
                redis_up, bus_up):
            log = self.logger.info if self.health.node_health == GREEN else self.logger.warning
            log("Rest service health %s (redis_connected=%s, kafka_connected=%s)",
                self.health.node_health, redis_up, bus_up,
                extra={"node_health": self.health.node_health, "redis_connected": redis_up,
                       "kafka_connected": bus_up})
        return self.health

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        while not self._halt.is_set():
            health = self.check_now()
            if health.redis_connected and self.heartbeat is not None:
                try:
                    self.heartbeat()
                except Exception as exc:  # an outage between the check and the write
                    self.logger.debug("heartbeat skipped: %s", exc)
            self._halt.wait(self.interval_s)
