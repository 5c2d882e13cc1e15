"""``WindowedStats``: one component's named counters over every ``STATS_TIMES`` window.

Keys (seed shapes, built in ``keys.py``):

- ``<key_prefix>:<name>:<window_s>`` — a ``RollingTimeWindow`` bucket HASH
  (e.g. ``stats:kafka-monitor:total:3600``), TTL window + 2 buckets;
- ``<key_prefix>:<name>:lifetime`` — a STRING counter, no TTL;
- ``<key_prefix>:_names`` — SET of the names incremented, so readers can list
  them without scanning the keyspace;
- ``stats:<component>:self:<machine>:<id>`` — heartbeat STRING (epoch s), TTL
  ``HEARTBEAT_TIMEOUT``; removed with its index member and info by a clean stop;
- ``stats:<component>:info:<machine>:<id>`` — the node's description (JSON, see
  ``stats.node``), written with the heartbeat when the caller gives one, same TTL.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson
import redis

from scrapy_cluster import keys
from scrapy_cluster.stats.rolling import DEFAULT_BUCKETS, RollingTimeWindow
from scrapy_cluster.stats.windows import Clock, system_clock, window_seconds
from scrapy_cluster.text import as_text

LIFETIME = "lifetime"


class WindowedStats:
    """Counts named events for one component across several rolling windows plus lifetime.

    asyncio callers: build it with a ``redis.asyncio`` client and always pass
    ``pipe=`` (an asyncio pipeline they ``await pipe.execute()`` on); queuing
    commands on a pipeline is synchronous in both clients.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        *,
        key_prefix: str,
        windows_s: Sequence[int],
        buckets_per_window: int = DEFAULT_BUCKETS,
        heartbeat_ttl_s: float = 120,
        clock: Clock | None = None,
    ) -> None:
        if keys.stats_component(key_prefix) is None:
            raise ValueError(f"key_prefix must start with {keys.STATS + ':'!r}, got {key_prefix!r}")
        self.redis = redis_client
        self.key_prefix = key_prefix
        self.windows_s = sorted({int(window) for window in windows_s})
        self.buckets_per_window = buckets_per_window
        self.heartbeat_ttl_s = heartbeat_ttl_s
        self.clock = clock or system_clock
        self._windows: dict[str, list[RollingTimeWindow]] = {}

    @classmethod
    def from_settings(
        cls,
        settings: Mapping[str, Any],
        redis_client: redis.Redis,
        key_prefix: str,
        clock: Clock | None = None,
    ) -> WindowedStats:
        """Windows from ``STATS_TIMES`` (names or seconds), heartbeat TTL from ``HEARTBEAT_TIMEOUT``."""
        return cls(
            redis_client,
            key_prefix=key_prefix,
            windows_s=[window_seconds(window) for window in settings["STATS_TIMES"]],
            heartbeat_ttl_s=float(settings.get("HEARTBEAT_TIMEOUT", 120)),
            clock=clock,
        )

    def _rolling(self, name: str) -> list[RollingTimeWindow]:
        windows = self._windows.get(name)
        if windows is None:
            windows = [
                RollingTimeWindow(
                    self.redis,
                    keys.stats_name(self.key_prefix, name, window_s),
                    window_s=window_s,
                    bucket_s=window_s / self.buckets_per_window,
                    clock=self.clock,
                )
                for window_s in self.windows_s
            ]
            self._windows[name] = windows
        return windows

    def increment(self, name: str, *, pipe: Any = None, amount: int = 1) -> None:
        """Count ``amount`` events of ``name`` in every window and in lifetime.

        Round trips: 0 when ``pipe`` is given (the caller executes it with its
        own work), else 1. Commands: one HINCRBY per window and one INCRBY; when
        the smallest window enters a new bucket, also HDEL/EXPIRE housekeeping
        and an SADD to the names index.
        """
        target = pipe if pipe is not None else self.redis.pipeline(transaction=False)
        new_bucket = [window.queue_increment(target, amount) for window in self._rolling(name)]
        target.incrby(keys.stats_name(self.key_prefix, name, LIFETIME), amount)
        if not new_bucket or new_bucket[0]:
            target.sadd(keys.stats_names_index(self.key_prefix), name)
        if pipe is None:
            target.execute()

    def read(self, name: str) -> dict[str, int]:
        """``{"900": n, "3600": n, ..., "lifetime": n}`` for ``name``. Round trips: 1."""
        return self.read_many([name])[name]

    def read_many(self, names: Iterable[str]) -> dict[str, dict[str, int]]:
        """``read`` for several names at once. Round trips: 1."""
        names = list(names)
        pipe = self.redis.pipeline(transaction=False)
        self.queue_read(pipe, names)
        return self.parse_read(iter(pipe.execute()), names)

    def queue_read(self, pipe: Any, names: Sequence[str]) -> None:
        """Queue the reads of ``names`` on ``pipe`` (0 round trips); see ``parse_read``."""
        for name in names:
            for window in self._rolling(name):
                pipe.hgetall(window.get_key())
            pipe.get(keys.stats_name(self.key_prefix, name, LIFETIME))

    def parse_read(self, replies: Iterator[Any], names: Sequence[str]) -> dict[str, dict[str, int]]:
        """Consume the replies ``queue_read`` produced, in order."""
        result: dict[str, dict[str, int]] = {}
        for name in names:
            counts = {
                str(window.window_s): window.sum_buckets(next(replies))
                for window in self._rolling(name)
            }
            lifetime = next(replies)
            counts[LIFETIME] = int(lifetime) if lifetime is not None else 0
            result[name] = counts
        return result

    def names(self) -> list[str]:
        """Every name incremented under this prefix, sorted. Round trips: 1."""
        members = self.redis.smembers(keys.stats_names_index(self.key_prefix))
        return sorted(as_text(member) for member in members)

    def heartbeat(self, machine: str, *parts: str, ttl_s: float | None = None, pipe: Any = None,
                  info: Mapping[str, Any] | None = None) -> str:
        """Write ``stats:<component>:self:<machine>:<parts...>`` = now (epoch s) with a TTL.

        ``ttl_s`` defaults to ``HEARTBEAT_TIMEOUT``. The node is also scored in
        ``stats:<component>:self`` (``keys.heartbeat_index``) so readers list nodes
        without scanning. ``info`` (e.g. ``stats.node.NodeInfo().snapshot()``) is written as
        JSON to ``keys.node_info(component, member)`` with the same TTL. Returns the key.
        Round trips: 0 with ``pipe``, else 1 (info included).
        """
        component = self.component
        key = keys.heartbeat(component, machine, *parts)
        ttl = max(1, math.ceil(ttl_s if ttl_s is not None else self.heartbeat_ttl_s))
        member = keys.heartbeat_member(machine, *parts)
        now = self.clock()
        target = pipe if pipe is not None else self.redis.pipeline(transaction=False)
        target.set(key, now, ex=ttl)
        target.zadd(keys.heartbeat_index(component), {member: now})
        if info is not None:
            target.set(keys.node_info(component, member), orjson.dumps(dict(info)), ex=ttl)
        if pipe is None:
            target.execute()
        return key

    def remove_heartbeat(self, machine: str, *parts: str, pipe: Any = None) -> None:
        """Remove the node ``heartbeat`` wrote (its key, its index member and its info), so a
        cleanly stopped process stops counting as alive at once. Round trips: 0 with ``pipe``,
        else 1."""
        member = keys.heartbeat_member(machine, *parts)
        target = pipe if pipe is not None else self.redis.pipeline(transaction=False)
        target.delete(keys.heartbeat(self.component, machine, *parts),
                      keys.node_info(self.component, member))
        target.zrem(keys.heartbeat_index(self.component), member)
        if pipe is None:
            target.execute()

    @property
    def component(self) -> str:
        """The component of this prefix (``stats:<component>:...``), whose heartbeats it writes."""
        return keys.stats_component(self.key_prefix) or ""
