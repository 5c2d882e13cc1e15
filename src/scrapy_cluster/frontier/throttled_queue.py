"""``RedisThrottledQueue``: any Redis queue, popped no faster than a limit per window.

Wraps a queue from ``scrapy_cluster.queues`` (or anything with ``key``,
``push``, ``pop``, ``__len__`` and ``clear`` whose key is a Redis LIST or
ZSET). Every process popping the same queue shares one throttle. Semantics
match the frontier's: at most ``limit`` pops in any sliding window; moderated
queues space pops by window/limit; ``elastic`` lets a moderated queue that
fell behind catch up, but never beyond ``limit`` per window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier.model import Clock
from scrapy_cluster.frontier.scripts import lua_source


class ThrottleableQueue(Protocol):
    key: str

    def push(self, *args: Any) -> None: ...

    def pop(self) -> Any: ...

    def __len__(self) -> int: ...

    def clear(self) -> None: ...


@dataclass(frozen=True)
class QueueThrottle:
    """How fast a ``RedisThrottledQueue`` may be popped: at most ``limit`` pops in any
    sliding ``window_s``; ``moderate`` spaces them by window/limit; ``elastic`` lets a
    moderated queue that fell behind catch up (``elastic_buffer`` extra slots), never beyond
    ``limit`` per window."""

    window_s: float
    limit: int
    moderate: bool = False
    elastic: bool = False
    elastic_buffer: int = 0


class RedisThrottledQueue:
    """``pop`` is two round trips: take a slot (one script, only if the queue has items),
    then pop. If another process empties the queue in between, that slot is spent
    without an item: the limit can be under-used, never exceeded."""

    def __init__(self, redis_client: redis.Redis, queue: ThrottleableQueue,
                 throttle: QueueThrottle, *, window_key: str | None = None,
                 moderation_key: str | None = None, clock: Clock | None = None) -> None:
        self.redis = redis_client
        self.queue = queue
        self.window_ms = int(throttle.window_s * 1000)
        self.limit = int(throttle.limit)
        self.moderate, self.elastic = throttle.moderate, throttle.elastic
        self.elastic_buffer = int(throttle.elastic_buffer)
        self.window_key = window_key or keys.throttled_queue_window(queue.key)
        self.moderation_key = moderation_key or keys.throttled_queue_time(queue.key)
        self.clock = clock
        self._acquire = redis_client.register_script(lua_source("throttled_queue_acquire.lua"))
        self.last_wait_s: float | None = None

    def push(self, *args: Any) -> None:
        self.queue.push(*args)

    def pop(self) -> Any:
        """The next item if the throttle allows one now, else None.

        ``last_wait_s`` then says how long until the next slot (None: queue empty).
        """
        now = "" if self.clock is None else str(int(self.clock()))
        taken, wait_ms = self._acquire(
            keys=[self.queue.key, self.window_key, self.moderation_key],
            args=[now, self.limit, self.window_ms, int(self.moderate), int(self.elastic),
                  self.elastic_buffer])
        self.last_wait_s = None if int(wait_ms) < 0 else int(wait_ms) / 1000
        return self.queue.pop() if int(taken) else None

    def clear(self) -> None:
        """Remove the items and the throttle state."""
        self.queue.clear()
        self.redis.delete(self.window_key, self.moderation_key)

    def __len__(self) -> int:
        return len(self.queue)
