"""The Redis Streams bus: one stream per topic, consumer groups, XACK, XAUTOCLAIM.

For deployments with one Redis and no Kafka (and the embedded ``up`` mode).
Each topic is the stream ``keys.bus_stream(topic)``; its entries have the
fields ``v`` (the JSON value) and, when given, ``k`` (the key). Streams are
trimmed to about ``REDIS_STREAM_MAXLEN`` entries on every XADD. The set
``keys.bus_topics()`` lists the topics, so ``list_topics`` never scans keys.

The producer buffers messages and sends them with pipelined XADDs from a
background thread (after ``REDIS_STREAM_LINGER_MS``, or at once when
``REDIS_STREAM_BATCH_SIZE`` are waiting): one round trip per batch, none on
the thread that calls ``produce`` (the crawler's event loop must never wait for
Redis). While Redis is unreachable the messages stay buffered (up to
``REDIS_STREAM_MAX_BUFFERED``) and ``flush`` raises ``BusUnavailableError``;
a later flush, or the background thread, delivers them once Redis is back.
A batch interrupted by a dropped connection may be sent twice (at-least-once).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.bus.base import encode_key, encode_value
from scrapy_cluster.bus.redis_streams_consumer import RedisStreamsConsumer, RedisStreamsReader
from scrapy_cluster.bus.redis_streams_policy import StreamsPolicy
from scrapy_cluster.errors import BusUnavailableError
from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.text import as_text

logger = logging.getLogger(__name__)

REDIS_DOWN_ERRORS = (redis.ConnectionError, redis.TimeoutError)
_RETRY_PAUSE_S = 0.1


class RedisStreamsProducer:
    """Buffered, batched XADD producer; safe to share between threads."""

    def __init__(self, client: redis.Redis, policy: StreamsPolicy) -> None:
        self._client = client
        self._max_message_bytes = policy.max_message_bytes
        self._maxlen = str(policy.maxlen)  # as redis-py's ``xadd`` sends it
        self._batch_size = policy.batch_size
        self._linger_s = policy.linger_ms / 1000
        self._max_buffered = policy.max_buffered
        self._buffer: deque[tuple[str, bytes, bytes | None]] = deque()
        self._lock = threading.Lock()  # guards the buffer; never held during a round trip
        self._sending = threading.Lock()  # one sender at a time keeps the order
        self._streams: dict[str, str] = {}
        self._wake = threading.Event()  # messages wait: send them after the linger
        self._hurry = threading.Event()  # a full batch waits: send it now
        self._stop = threading.Event()
        self._down_since: float | None = None
        self._thread: threading.Thread | None = None

    def produce(self, topic: str, value: Any, *, key: str | bytes | None = None) -> None:
        """Buffer one message for the background sender: no round trip on this thread. Only
        the first message into an empty buffer wakes the sender (it sends until the buffer is
        empty), and every ``batch_size``-th one cuts its linger short."""
        raw = encode_value(value, self._max_message_bytes)
        with self._lock:
            waiting = len(self._buffer)
            if waiting >= self._max_buffered:
                raise BusUnavailableError(
                    f"{waiting} messages already wait for Redis "
                    f"(REDIS_STREAM_MAX_BUFFERED); message to {topic!r} refused")
            self._buffer.append((topic, raw, encode_key(key)))
        if self._thread is None:
            self._start_thread()
        if not waiting:
            self._wake.set()
        elif (waiting + 1) % self._batch_size == 0 and self._down_since is None:
            self._hurry.set()

    def flush(self, timeout_s: float = 10.0) -> None:
        """Send everything buffered, retrying until ``timeout_s``; raises if Redis stays down."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                while self._send_batch():
                    pass
                return
            except BusUnavailableError as exc:
                if time.monotonic() >= deadline:
                    raise BusUnavailableError(
                        f"{self.buffered} messages not delivered after {timeout_s}s: {exc}"
                    ) from exc
                self._stop.wait(_RETRY_PAUSE_S)

    def close(self) -> None:
        """Flush (raising if undelivered), then stop the background thread."""
        try:
            self.flush()
        finally:
            self._stop.set()
            self._wake.set()
            self._hurry.set()
            if self._thread is not None:
                self._thread.join(timeout=5)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def _send_batch(self) -> int:
        """XADD up to ``batch_size`` buffered messages in one round trip; returns how many.
        The buffer is locked only to copy the batch and to drop it once sent, so ``produce``
        never waits for Redis; the batch stays first in the buffer meanwhile (only senders
        take from it, one at a time)."""
        with self._sending:
            with self._lock:
                batch = list(itertools.islice(self._buffer, self._batch_size))
            if not batch:
                return 0
            pipe = self._client.pipeline(transaction=False)
            stage = pipe.pipeline_execute_command  # what ``xadd`` stages, without its checks
            streams, maxlen = self._streams, self._maxlen
            for topic, raw, key in batch:
                stream = streams.get(topic) or streams.setdefault(topic, keys.bus_stream(topic))
                if key is None:
                    stage("XADD", stream, b"MAXLEN", b"~", maxlen, "*", "v", raw)
                else:
                    stage("XADD", stream, b"MAXLEN", b"~", maxlen, "*", "v", raw, "k", key)
            pipe.sadd(keys.bus_topics(), *{topic for topic, _, _ in batch})
            try:
                pipe.execute()
            except REDIS_DOWN_ERRORS as exc:
                self._note_down(exc)
                raise BusUnavailableError(f"Redis unreachable: {exc}") from exc
            with self._lock:
                for _ in batch:
                    self._buffer.popleft()
        if self._down_since is not None:
            logger.info("Redis reachable again; buffered messages are being sent")
            self._down_since = None
        return len(batch)

    def _note_down(self, exc: Exception) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning("Redis unreachable, keeping %d messages buffered: %s",
                           len(self._buffer), exc)

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="redis-streams-producer",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            self._hurry.wait(self._linger_s)
            self._hurry.clear()
            if self._stop.is_set():
                return
            try:
                while self._send_batch():
                    pass
            except BusUnavailableError:
                self._stop.wait(1.0)  # back off, then try again
                self._wake.set()


class RedisStreamsBus:
    """``MessageBus`` on Redis Streams. Owns ``client`` only when built by ``from_settings``."""

    def __init__(self, client: redis.Redis, policy: StreamsPolicy, *, owns_client: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._policy = policy
        self._owns_client = owns_client
        self._clock = clock

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], client: redis.Redis | None = None,
                      clock: Callable[[], float] = time.monotonic) -> RedisStreamsBus:
        owns = client is None
        if client is None:
            client = RedisConfig.from_settings(settings).sync_client()
        return cls(client, StreamsPolicy.from_settings(settings), owns_client=owns, clock=clock)

    def producer(self) -> RedisStreamsProducer:
        return RedisStreamsProducer(self._client, self._policy)

    def consumer(self, topics: Sequence[str], group: str, *,
                 from_beginning: bool = False) -> RedisStreamsConsumer:
        return RedisStreamsConsumer(self._client, topics, group, from_beginning=from_beginning,
                                    policy=self._policy, clock=self._clock)

    def reader(self, topics: Sequence[str], *, from_beginning: bool = False) -> RedisStreamsReader:
        return RedisStreamsReader(self._client, topics, from_beginning=from_beginning)

    def list_topics(self) -> list[str]:
        """One round trip (SMEMBERS of the topic registry)."""
        try:
            names = self._client.smembers(keys.bus_topics())
        except REDIS_DOWN_ERRORS as exc:
            raise BusUnavailableError(f"Redis unreachable: {exc}") from exc
        return sorted(name.decode() for name in names)  # type: ignore[union-attr]

    def group_lag(self, topic: str, group: str, *, timeout_s: float | None = None) -> int | None:
        """Entries of the topic's stream the group has not acknowledged: not yet delivered
        (XINFO GROUPS ``lag``, Redis >= 7) plus delivered but pending. Without ``lag`` (Redis
        6.2, or entries deleted from the middle of the stream) the count is known only when
        the group read nothing yet (the stream's length) or everything (0); otherwise None.
        A group that does not exist yet counts the whole stream; a stream that does not exist
        is None. One round trip (pipelined XINFO GROUPS and XINFO STREAM); ``timeout_s`` is
        unused (the client's socket timeout applies)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.xinfo_groups(keys.bus_stream(topic))
        pipe.xinfo_stream(keys.bus_stream(topic))
        try:
            groups, stream = pipe.execute(raise_on_error=False)
        except REDIS_DOWN_ERRORS as exc:
            raise BusUnavailableError(f"Redis unreachable: {exc}") from exc
        if isinstance(groups, Exception) or isinstance(stream, Exception):
            return None  # no such stream
        for info in groups:
            if as_text(info["name"]) == group:
                undelivered = _undelivered(info, stream)
                return None if undelivered is None else undelivered + int(info["pending"])
        return int(stream["length"])  # no such group yet: it would read every retained entry

    def close(self) -> None:
        if self._owns_client:
            self._client.close()


def _undelivered(group: Mapping[str, Any], stream: Mapping[str, Any]) -> int | None:
    """Entries not yet delivered to the group, from its XINFO GROUPS entry and XINFO STREAM."""
    if group.get("lag") is not None:
        return int(group["lag"])
    delivered = as_text(group["last-delivered-id"])
    if delivered == as_text(stream["last-generated-id"]):
        return 0
    if delivered == "0-0":
        return int(stream["length"])
    return None
