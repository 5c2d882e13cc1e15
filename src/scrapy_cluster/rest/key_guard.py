"""Slowing down API-key guessing, per client address (REST_AUTH_* settings).

An address (an IPv6 client's /64, since one host holds a whole /64) may send
``failures_allowed`` wrong keys; from then on each wrong key locks it out for 1 s, 2 s, 4 s, ...
up to ``lockout_max_s``, and every key it presents while locked out is refused with 429 and
``Retry-After`` without being checked (so the answer tells nothing about the key). A right key
forgets the address's failures; an address with no wrong key for ``window_s`` starts again from
0. Other addresses are never affected. The table of addresses is an LRU of at most
``max_addresses`` entries, so an attacker with many addresses costs bounded memory (and gets
its oldest addresses forgotten).

Wrong keys are logged as warnings, at most one per address per ``warn_every_s`` (with the
number not logged since) and at most ``max_warnings`` per ``warn_every_s`` in all.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

NEVER = -math.inf


@dataclass(frozen=True)
class GuardPolicy:
    failures_allowed: int = 10
    window_s: float = 60.0
    lockout_base_s: float = 1.0
    lockout_max_s: float = 30.0
    max_addresses: int = 10_000
    warn_every_s: float = 60.0
    max_warnings: int = 20

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> GuardPolicy:
        return cls(failures_allowed=int(settings["REST_AUTH_FAILURES_ALLOWED"]),
                   window_s=float(settings["REST_AUTH_FAILURE_WINDOW_S"]),
                   lockout_max_s=float(settings["REST_AUTH_LOCKOUT_MAX_S"]))

    def lockout_s(self, failures: int) -> float:
        """How long an address with ``failures`` wrong keys in a row waits (0: not at all)."""
        if failures < self.failures_allowed:
            return 0.0
        doublings = min(failures - self.failures_allowed, 32)
        return min(self.lockout_max_s, self.lockout_base_s * float(2 ** doublings))


@dataclass
class _Address:
    failures: int = 0
    last_failure_at: float = NEVER
    locked_until: float = NEVER
    last_warned_at: float = NEVER
    unlogged: int = 0


def address_key(host: str | None) -> str:
    """The unit an address is judged by: an IPv4 address, an IPv6 /64, or the host as given."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class KeyGuard:
    """Counts wrong keys per address and says how long an address must wait (module
    docstring). ``clock`` is in seconds."""

    def __init__(self, policy: GuardPolicy, *, clock: Callable[[], float],
                 logger: logging.Logger) -> None:
        self.policy = policy
        self.clock = clock
        self.logger = logger
        self._addresses: OrderedDict[str, _Address] = OrderedDict()
        self._warnings_started_at = NEVER
        self._warnings = 0
        self._unlogged_over_cap = 0

    @property
    def tracked_addresses(self) -> int:
        return len(self._addresses)

    def wait_s(self, host: str | None) -> float:
        """Seconds ``host`` is still locked out for (0 when it may present a key)."""
        record = self._addresses.get(address_key(host))
        if record is None:
            return 0.0
        return max(0.0, record.locked_until - self.clock())

    def failed(self, host: str | None) -> float:
        """Record a wrong key from ``host``; returns the lockout it now has (0: none)."""
        now, key = self.clock(), address_key(host)
        record = self._addresses.pop(key, None) or _Address()
        self._addresses[key] = record  # most recent last
        while len(self._addresses) > self.policy.max_addresses:
            self._addresses.popitem(last=False)
        if now - record.last_failure_at > self.policy.window_s:
            record.failures = 0
        record.failures += 1
        record.last_failure_at = now
        lockout_s = self.policy.lockout_s(record.failures)
        record.locked_until = now + lockout_s if lockout_s else NEVER
        self._warn(key, record, now, lockout_s)
        return lockout_s

    def succeeded(self, host: str | None) -> None:
        """A right key from ``host``: its failures are forgotten."""
        self._addresses.pop(address_key(host), None)

    def _warn(self, key: str, record: _Address, now: float, lockout_s: float) -> None:
        every_s = self.policy.warn_every_s
        if now - record.last_warned_at < every_s:
            record.unlogged += 1
            return
        if now - self._warnings_started_at >= every_s:
            self._warnings_started_at, self._warnings = now, 0
        if self._warnings >= self.policy.max_warnings:
            record.unlogged += 1
            self._unlogged_over_cap += 1
            return
        self._warnings += 1
        self.logger.warning(
            "wrong API key from %s: %d in a row, %d not logged since the last warning for this "
            "address, %d for other addresses over the warning cap; locked out for %.0f s",
            key, record.failures, record.unlogged, self._unlogged_over_cap, lockout_s,
            extra={"client": key, "failures": record.failures, "lockout_s": lockout_s})
        record.last_warned_at = now
        record.unlogged = 0
        self._unlogged_over_cap = 0
