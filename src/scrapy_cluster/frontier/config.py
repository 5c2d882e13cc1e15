"""The cluster's domain configuration as the frontier reads it: throttle overrides and blacklist.

Stored in Redis (``domain-config:throttle`` HASH domain -> JSON, and
``domain-config:blacklist`` SET) because the pop script reads both in the same
round trip. A later source of truth (ZooKeeper, live updates) writes through
``DomainConfig.replace_all``; every write makes the domain due again in every
ready set, so the change applies on the next pop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import FrontierError
from scrapy_cluster.text import as_text


class DomainToucher(Protocol):
    def touch_domain(self, domain: str) -> int: ...


@dataclass(frozen=True)
class DomainThrottle:
    """``hits`` per ``window_s``, scaled: limit = floor(hits * clamp(scale, 0, 1)); 0 pauses.

    ``moderated``: space this domain's requests evenly (True) or allow bursts within the
    sliding window (False); None follows QUEUE_MODERATED.
    """

    window_s: float
    hits: int
    scale: float = 1.0
    moderated: bool | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.hits, int) and self.hits >= 0):
            raise FrontierError(f"hits must be a non-negative integer, got {self.hits!r}")
        if not (math.isfinite(self.window_s) and self.window_s >= 0):
            raise FrontierError(f"window must be a non-negative number, got {self.window_s!r}")
        if not math.isfinite(self.scale):
            raise FrontierError(f"scale must be a finite number, got {self.scale!r}")
        if self.moderated is not None and not isinstance(self.moderated, bool):
            raise FrontierError(f"moderated must be true, false or absent, got {self.moderated!r}")

    @property
    def limit(self) -> int:
        return math.floor(self.hits * min(1.0, max(0.0, self.scale)))

    def to_json(self) -> bytes:
        moderated = {} if self.moderated is None else {"moderated": self.moderated}
        return orjson.dumps({"window": self.window_s, "hits": self.hits, "scale": self.scale,
                             **moderated})

    @classmethod
    def from_json(cls, raw: bytes | str) -> DomainThrottle:
        data: dict[str, Any] = orjson.loads(raw)
        return cls(window_s=float(data["window"]), hits=int(data["hits"]),
                   scale=float(data.get("scale", 1.0)), moderated=data.get("moderated"))


class DomainConfig:
    """Reads and writes the domain configuration; each write is two round trips
    (the write, then one script that re-dues the domain)."""

    def __init__(self, redis_client: redis.Redis, toucher: DomainToucher) -> None:
        self.redis = redis_client
        self.toucher = toucher

    def set_throttle(self, domain: str, throttle: DomainThrottle) -> None:
        self.redis.hset(keys.domain_throttle_config(), domain, throttle.to_json())
        self.toucher.touch_domain(domain)

    def remove_throttle(self, domain: str) -> None:
        self.redis.hdel(keys.domain_throttle_config(), domain)
        self.toucher.touch_domain(domain)

    def throttles(self) -> dict[str, DomainThrottle]:
        raw = self.redis.hgetall(keys.domain_throttle_config())
        return {as_text(domain): DomainThrottle.from_json(value) for domain, value in raw.items()}

    def add_blacklist(self, domain: str) -> None:
        self.redis.sadd(keys.domain_blacklist(), domain)
        self.toucher.touch_domain(domain)

    def remove_blacklist(self, domain: str) -> None:
        self.redis.srem(keys.domain_blacklist(), domain)
        self.toucher.touch_domain(domain)

    def blacklist(self) -> set[str]:
        return {as_text(domain) for domain in self.redis.smembers(keys.domain_blacklist())}

    def replace_all(self, throttles: Mapping[str, DomainThrottle], blacklist: set[str]) -> None:
        """Make Redis hold exactly this configuration (for an outside source of truth)."""
        with self.redis.pipeline(transaction=True) as pipe:
            old_throttles, old_blacklist = self.current_raw(self.redis)
            changed = self.queue_replace(pipe, throttles, blacklist, old_throttles,
                                         old_blacklist)
            pipe.execute()
        self.touch(changed)

    @staticmethod
    def current_raw(client: Any) -> tuple[dict[str, bytes], set[str]]:
        """The stored throttle JSON by domain and the blacklist (two reads on ``client``)."""
        raw = client.hgetall(keys.domain_throttle_config())
        blacklist = {as_text(name) for name in client.smembers(keys.domain_blacklist())}
        return {as_text(domain): value for domain, value in raw.items()}, blacklist

    @staticmethod
    def queue_replace(pipe: Any, throttles: Mapping[str, DomainThrottle], blacklist: set[str],
                      old_throttles: Mapping[str, bytes], old_blacklist: set[str]) -> set[str]:
        """Queue on ``pipe`` the writes that make Redis hold exactly this configuration, and
        return the domains whose throttle or blacklisting changed.

        A robots.txt Crawl-delay entry (``crawl_delay`` in its JSON) of a domain the new
        configuration does not name is kept: the crawler wrote it, not the operator.
        """
        kept = {domain: value for domain, value in old_throttles.items()
                if domain not in throttles and b'"crawl_delay"' in value}
        mapping = {**kept, **{domain: value.to_json() for domain, value in throttles.items()}}
        pipe.delete(keys.domain_throttle_config(), keys.domain_blacklist())
        if mapping:
            pipe.hset(keys.domain_throttle_config(), mapping=mapping)
        if blacklist:
            pipe.sadd(keys.domain_blacklist(), *sorted(blacklist))
        changed = {domain for domain in set(old_throttles) | set(mapping)
                   if old_throttles.get(domain) != mapping.get(domain)}
        return changed | (old_blacklist ^ set(blacklist))

    def touch(self, domains: set[str]) -> None:
        """Make each domain due again in every ready set (one script call per domain)."""
        for domain in sorted(domains):
            self.toucher.touch_domain(domain)
