"""Telling a Redis outage from a bad request, and waiting it out with capped exponential backoff."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

import redis.exceptions
from redis.exceptions import NoScriptError

_OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
    NoScriptError,
)


def is_redis_outage(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) means Redis is unreachable.

    ``NoScriptError`` counts: after a Redis restart its script cache is empty, and
    retrying reloads the script.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, _OUTAGE_ERRORS):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class Backoff:
    """Capped exponential delays: ``initial_s``, ×``factor`` each failure, at most ``max_s``."""

    def __init__(self, *, initial_s: float = 0.1, max_s: float = 5.0, factor: float = 2.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self.sleep = sleep
        self.failures = 0

    def next_delay_s(self) -> float:
        """The delay before the next attempt (does not wait)."""
        return min(self.max_s, self.initial_s * self.factor ** self.failures)

    def wait(self) -> float:
        """Sleep for the next delay and lengthen the one after; returns the seconds slept."""
        delay_s = self.next_delay_s()
        self.failures += 1
        self.sleep(delay_s)
        return delay_s

    def reset(self) -> None:
        """Back to ``initial_s`` after a success."""
        self.failures = 0


class OutageLog:
    """One warning per outage, not one per attempt: the first failure in a row (of any of the
    actions sharing this log) is a WARNING, the repeats are DEBUG, and the first success after
    them is logged once at INFO."""

    def __init__(self, logger: logging.Logger, resource: str = "Redis") -> None:
        self.logger = logger
        self.resource = resource
        self.failures = 0

    def failed(self, action: str, exc: BaseException, **extra: Any) -> None:
        log = self.logger.warning if self.failures == 0 else self.logger.debug
        log("%s failed, %s unreachable? %s", action, self.resource, exc, extra=extra or None)
        self.failures += 1

    def succeeded(self) -> None:
        if self.failures:
            self.logger.info("%s reachable again after %d failed attempts", self.resource,
                             self.failures)
        self.failures = 0


class QuietFailures(logging.Filter):
    """Lets one connection-failure line through per ``quiet_s`` and drops the rest.

    For clients that log each reconnect attempt themselves (librdkafka: "Connect to ...
    failed", "brokers are down", every ~50 ms while a broker is away). One instance may be
    added to several loggers, so that a process logs one such line per outage, not one per
    attempt per client; the next line let through says how many were dropped. Other lines
    pass untouched.
    """

    FAILURE = re.compile(r"Connect to .* failed|Connection refused|brokers are down|"
                         r"_TRANSPORT|Disconnected|Failed to resolve", re.IGNORECASE)

    def __init__(self, quiet_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.quiet_s = quiet_s
        self.clock = clock
        self.dropped = 0
        self._last_s: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.FAILURE.search(record.getMessage()):
            return True
        now = self.clock()
        if self._last_s is not None and now - self._last_s < self.quiet_s:
            self.dropped += 1
            return False
        if self.dropped:
            record.msg = f"{record.getMessage()} ({self.dropped} similar lines dropped)"
            record.args = None
            self.dropped = 0
        self._last_s = now
        return True
