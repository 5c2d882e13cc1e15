"""Cluster-wide domain pauses: no crawler dispatches a paused domain until its pause is over.

The pauses live in ``domain-config:paused`` (HASH domain -> epoch ms), which the pop script
reads: a paused domain keeps its queued requests and its ready entry is moved to the end of
the pause (or to FRONTIER_RECHECK_S, if sooner). A pause is only ever lengthened by
``pause`` (``lua/domain_pause.lua``); a halt is a pause until ``HALT_UNTIL_MS`` (2^50 ms,
about the year 37,648), which only ``resume`` ends. Written by the Redis Monitor's circuit
breaker and by crawlers that receive a ``Retry-After``.
"""

from __future__ import annotations

import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier.config import DomainToucher
from scrapy_cluster.frontier.model import Clock
from scrapy_cluster.frontier.scripts import lua_source

HALT_UNTIL_MS = 2**50
"""The until of a halted domain: never over by itself (exact in Lua's doubles, < 2^53)."""


class DomainPauses:
    """Pauses, halts and resumes domains for every crawler of the cluster.

    ``clock`` (ms) replaces Redis server time; inject it in tests only.
    """

    def __init__(self, redis_client: redis.Redis, *, clock: Clock | None = None) -> None:
        self.redis = redis_client
        self.clock = clock
        self._pause = redis_client.register_script(lua_source("domain_pause.lua"))

    def pause(self, domain: str, for_ms: int) -> int:
        """Pause ``domain`` for ``for_ms`` from now, unless already paused longer; returns the
        epoch ms the pause now ends (a halt: ``HALT_UNTIL_MS``). ONE round trip."""
        if for_ms <= 0:
            raise ValueError("for_ms must be positive")
        now = "" if self.clock is None else str(int(self.clock()))
        return int(self._pause(keys=[keys.domain_paused()],
                               args=[domain, int(for_ms), now, HALT_UNTIL_MS]))

    def halt(self, domain: str) -> int:
        """Pause ``domain`` until ``resume``. ONE round trip."""
        return self.pause(domain, HALT_UNTIL_MS)

    def resume(self, domain: str, toucher: DomainToucher) -> bool:
        """End the domain's pause or halt and wake the crawlers waiting for work (``toucher``:
        the ``Frontier``). True when it had a pause entry (one that was already over, not yet
        removed by a pop, counts too). Two round trips: HDEL, then the touch script."""
        removed = bool(self.redis.hdel(keys.domain_paused(), domain))
        toucher.touch_domain(domain)
        return removed

    def paused_until(self) -> dict[str, int]:
        """Every pause entry, domain -> until ms (some may be over already). ONE round trip."""
        raw = self.redis.hgetall(keys.domain_paused())
        return {domain.decode() if isinstance(domain, bytes) else domain: int(until)
                for domain, until in raw.items()}
