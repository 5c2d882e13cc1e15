"""Simple Redis-backed queues: FIFO ``RedisQueue``, LIFO ``RedisStack``, ``RedisPriorityQueue``.

Items go through a pluggable ``Encoding`` (anything with ``dumps``/``loads``);
the default is JSON via orjson. Pickle is never used: a shared Redis must not
be able to make a consumer run code. Every method is one Redis round trip.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import orjson
import redis

from scrapy_cluster.errors import EncodingError

_ORDINAL_DIGITS = 16


class Encoding(Protocol):
    """Turns items into bytes and back."""

    def dumps(self, item: Any) -> bytes | str: ...

    def loads(self, data: bytes) -> Any: ...


class JsonEncoding:
    """JSON via orjson (str keys; bytes, sets and custom objects are rejected)."""

    def dumps(self, item: Any) -> bytes:
        return orjson.dumps(item)

    def loads(self, data: bytes) -> Any:
        return orjson.loads(data)


class _RedisContainer:
    """Shared encoding and error handling; ``key`` holds the data."""

    def __init__(self, redis_client: redis.Redis, key: str, *, encoding: Encoding | None = None) -> None:
        self.redis = redis_client
        self.key = key
        self.encoding: Encoding = encoding or JsonEncoding()

    def _encode(self, item: Any) -> bytes:
        try:
            data = self.encoding.dumps(item)
        except (TypeError, ValueError) as exc:
            raise EncodingError(f"cannot encode item for {self.key!r}: {exc}", raw=None) from exc
        return data.encode() if isinstance(data, str) else data

    def _decode(self, data: Any) -> Any:
        """Decode ``data``; on failure raise ``EncodingError`` carrying the raw bytes (nothing lost)."""
        if data is None:
            return None
        try:
            return self.encoding.loads(data)
        except (TypeError, ValueError) as exc:
            raise EncodingError(f"cannot decode item from {self.key!r}: {exc}", raw=data) from exc

    def clear(self) -> None:
        """Remove every item."""
        self.redis.delete(self.key)


class _RedisList(_RedisContainer):
    """Items are pushed on the left; subclasses choose the end they pop from."""

    _pop_left: bool

    def push(self, item: Any) -> None:
        """Add ``item``."""
        self.redis.lpush(self.key, self._encode(item))

    def pop(self, timeout_s: float = 0) -> Any:
        """Remove and return the next item, or None when empty.

        With ``timeout_s > 0`` wait up to that long for an item (BLPOP/BRPOP).
        """
        if timeout_s > 0:
            blocking = self.redis.blpop if self._pop_left else self.redis.brpop
            reply = blocking([self.key], timeout=timeout_s)
            return self._decode(reply[1]) if reply else None
        popper = self.redis.lpop if self._pop_left else self.redis.rpop
        return self._decode(popper(self.key))

    def peek(self) -> Any:
        """The next item without removing it, or None."""
        return self._decode(self.redis.lindex(self.key, 0 if self._pop_left else -1))

    def __len__(self) -> int:
        return int(self.redis.llen(self.key))


class RedisQueue(_RedisList):
    """First in, first out (a Redis LIST: LPUSH, RPOP)."""

    _pop_left = False


class RedisStack(_RedisList):
    """Last in, first out (a Redis LIST: LPUSH, LPOP)."""

    _pop_left = True


class RedisPriorityQueue(_RedisContainer):
    """Highest priority first, first-in-first-out among equal priorities (a Redis ZSET).

    Score is ``-priority`` (exact for integers up to 2**53). Each member is a
    16-hex-digit push ordinal (nanosecond clock, strictly increasing within a
    process) followed by the encoded item; Redis orders equal scores by member
    bytes, so equal priorities pop in push order (across processes: in clock
    order). Identical items pushed twice are kept twice.
    """

    def __init__(self, redis_client: redis.Redis, key: str, *, encoding: Encoding | None = None) -> None:
        super().__init__(redis_client, key, encoding=encoding)
        self._last_ordinal = 0

    def _next_ordinal(self) -> int:
        self._last_ordinal = max(time.time_ns(), self._last_ordinal + 1)
        return self._last_ordinal

    def push(self, item: Any, priority: int = 0) -> None:
        """Add ``item``; higher ``priority`` pops first."""
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority must be an int, got {priority!r}")
        member = f"{self._next_ordinal():0{_ORDINAL_DIGITS}x}".encode() + self._encode(item)
        self.redis.zadd(self.key, {member: -priority})

    def _item(self, member: Any) -> Any:
        return self._decode(member[_ORDINAL_DIGITS:])

    def pop(self, timeout_s: float = 0) -> Any:
        """Remove and return the highest-priority item, or None; waits up to ``timeout_s`` if > 0."""
        if timeout_s > 0:
            reply = self.redis.bzpopmin([self.key], timeout=timeout_s)
            return self._item(reply[1]) if reply else None
        popped = self.redis.zpopmin(self.key, 1)
        return self._item(popped[0][0]) if popped else None

    def peek(self) -> Any:
        """The next item without removing it, or None."""
        members = self.redis.zrange(self.key, 0, 0)
        return self._item(members[0]) if members else None

    def __len__(self) -> int:
        return int(self.redis.zcard(self.key))
