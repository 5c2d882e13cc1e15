"""Reading Redis Streams: a consumer-group member and a group-less reader (``dump``).

Round trips: ``poll`` is one XREADGROUP (blocking at most ``timeout_s``, capped
at ``MAX_BLOCK_MS``), plus one pipelined XAUTOCLAIM for all topics at most
every ``claim_idle_ms / 2``; ``ack`` is one pipelined XACK per call.

Poison messages (``max_deliveries`` > 0): XAUTOCLAIM takes one entry per topic
at a time, handed out alone, so a consumer that dies on it is not blamed on a
batch; one pipelined XPENDING reads the claimed entries' delivery counts. An
entry claimed for delivery ``max_deliveries + 1`` is not handed out: one
MULTI/EXEC round trip XADDs it to ``keys.bus_stream(topics.dead_letter(topic))``
and XACKs it. After a claim that found something the next poll claims again.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import dead_letter
from scrapy_cluster.bus.base import Message, decode_value
from scrapy_cluster.bus.redis_streams_policy import StreamsPolicy
from scrapy_cluster.bus.topics import dead_letter as dead_letter_topic
from scrapy_cluster.errors import BusUnavailableError
from scrapy_cluster.text import as_text

logger = logging.getLogger(__name__)

MAX_BLOCK_MS = 5000  # stays below the client's socket timeout
_REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)


def _entry_to_message(topic: str, entry_id: bytes, fields: dict[bytes, bytes],
                      deliveries: int | None = None) -> Message:
    headers = tuple((as_text(name), as_text(value))
                    for name, value in fields.items() if name not in (b"v", b"k"))
    raw = fields.get(b"v")
    if raw is None:
        return Message(topic=topic, value=None, raw=b"", key=fields.get(b"k"),
                       error="stream entry has no 'v' field", entry_id=entry_id.decode(),
                       deliveries=deliveries, headers=headers)
    value, error = decode_value(raw)
    return Message(topic=topic, value=value, raw=raw, key=fields.get(b"k"), error=error,
                   entry_id=entry_id.decode(), deliveries=deliveries, headers=headers)


def _block_ms(timeout_s: float) -> int | None:
    block = min(int(timeout_s * 1000), MAX_BLOCK_MS)
    return block if block > 0 else None  # None: do not block (BLOCK 0 would wait forever)


class RedisStreamsConsumer:
    """A member of a consumer group over one stream per topic.

    Entries another member read but never acknowledged are claimed
    (XAUTOCLAIM) once idle for ``policy.claim_idle_ms``: a dead consumer's messages
    are redelivered. If Redis lost the group (restart without persistence),
    the group is created again from the start of the stream. An entry claimed
    for the ``policy.max_deliveries + 1``-th time goes to its dead-letter stream
    (0: never; see the module docstring), trimmed to about ``policy.maxlen`` entries.
    The member's name is ``<host>-<pid>-<8 random hex digits>``, unique per consumer.
    """

    def __init__(self, client: redis.Redis, topics: Sequence[str], group: str, *,
                 from_beginning: bool, policy: StreamsPolicy,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._max_deliveries = policy.max_deliveries
        self._dead_letter_maxlen = policy.maxlen
        self._dead_lettered = 0
        self._topics = {keys.bus_stream(topic): topic for topic in topics}
        self._group = group
        self._name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._claim_idle_ms = policy.claim_idle_ms
        self._claim_interval_s = max(policy.claim_idle_ms / 2000, 0.05)
        self._clock = clock
        self._next_claim_at = clock()
        self._claim_cursor = dict.fromkeys(self._topics, "0-0")
        self._create_groups("0" if from_beginning else "$")

    def poll(self, max_messages: int = 100, timeout_s: float = 1.0) -> list[Message]:
        try:
            claimed = self._claim_if_due(max_messages)
            if claimed:
                return claimed
            response: Any = self._client.xreadgroup(
                self._group, self._name, dict.fromkeys(self._topics, ">"),
                count=max_messages, block=_block_ms(timeout_s))
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            logger.warning("consumer group %r vanished (Redis restarted?); recreating it",
                           self._group)
            self._create_groups("0")
            return []
        except _REDIS_DOWN as exc:
            raise BusUnavailableError(f"Redis unreachable: {exc}") from exc
        return [_entry_to_message(self._topics[stream.decode()], entry_id, fields, deliveries=1)
                for stream, entries in response or [] for entry_id, fields in entries]

    @property
    def dead_lettered(self) -> int:
        return self._dead_lettered

    def ack(self, messages: Sequence[Message]) -> None:
        """XACK the messages, all streams in one pipelined round trip."""
        by_stream: dict[str, list[str]] = {}
        for message in messages:
            if message.entry_id is not None:
                by_stream.setdefault(keys.bus_stream(message.topic), []).append(message.entry_id)
        if not by_stream:
            return
        pipe = self._client.pipeline(transaction=False)
        for stream, entry_ids in by_stream.items():
            pipe.xack(stream, self._group, *entry_ids)
        try:
            pipe.execute()
        except _REDIS_DOWN as exc:
            raise BusUnavailableError(f"Redis unreachable, acknowledgement lost "
                                      f"(messages will be redelivered): {exc}") from exc

    def close(self) -> None:
        """Leave the group; a member with pending entries stays so others can claim them."""
        try:
            for stream in self._topics:
                pending = self._client.xpending_range(stream, self._group, min="-", max="+",
                                                      count=1, consumername=self._name)
                if not pending:
                    self._client.xgroup_delconsumer(stream, self._group, self._name)
        except (redis.ResponseError, *_REDIS_DOWN) as exc:
            logger.info("could not remove consumer %s from its group: %s", self._name, exc)

    def _create_groups(self, start_id: str) -> None:
        """XGROUP CREATE ... MKSTREAM for every topic, one round trip; existing groups stay."""
        pipe = self._client.pipeline(transaction=False)
        for stream in self._topics:
            pipe.xgroup_create(stream, self._group, id=start_id, mkstream=True)
        pipe.sadd(keys.bus_topics(), *self._topics.values())
        try:
            results = pipe.execute(raise_on_error=False)
        except _REDIS_DOWN as exc:
            raise BusUnavailableError(f"Redis unreachable: {exc}") from exc
        for result in results:
            if isinstance(result, Exception) and "BUSYGROUP" not in str(result):
                raise result

    def _claim_if_due(self, max_messages: int) -> list[Message]:
        now = self._clock()
        if now < self._next_claim_at:
            return []
        self._next_claim_at = now + self._claim_interval_s
        count = 1 if self._max_deliveries else max_messages
        pipe = self._client.pipeline(transaction=False)
        for stream, cursor in self._claim_cursor.items():
            pipe.xautoclaim(stream, self._group, self._name, min_idle_time=self._claim_idle_ms,
                            start_id=cursor, count=count)
        claimed: list[tuple[str, bytes, dict[bytes, bytes]]] = []
        results: list[Any] = pipe.execute()
        for stream, result in zip(self._claim_cursor, results, strict=True):
            next_cursor, entries = result[0], result[1]
            self._claim_cursor[stream] = next_cursor.decode()
            claimed += [(stream, entry_id, fields) for entry_id, fields in entries
                        if fields is not None]
        if not claimed:
            return []
        self._next_claim_at = now  # more may be pending: claim again on the next poll
        messages = self._without_poison(claimed)
        if messages:
            logger.info("claimed %d messages left pending by another consumer", len(messages))
        return messages

    def _without_poison(self, claimed: list[tuple[str, bytes, dict[bytes, bytes]]]
                        ) -> list[Message]:
        """The claimed entries with their delivery counts (one pipelined XPENDING), the
        entries delivered too often moved to their dead-letter streams."""
        pipe = self._client.pipeline(transaction=False)
        for stream, entry_id, _ in claimed:
            pipe.xpending_range(stream, self._group, min=entry_id, max=entry_id, count=1)
        pending: list[Any] = pipe.execute()
        messages: list[Message] = []
        for (stream, entry_id, fields), info in zip(claimed, pending, strict=True):
            deliveries = int(info[0]["times_delivered"]) if info else None
            message = _entry_to_message(self._topics[stream], entry_id, fields, deliveries)
            if self._max_deliveries and deliveries is not None and (
                    deliveries > self._max_deliveries):
                self._dead_letter(message, fields, deliveries - 1)
            else:
                messages.append(message)
        return messages

    def _dead_letter(self, message: Message, fields: dict[bytes, bytes], deliveries: int) -> None:
        """XADD to the dead-letter stream and XACK: one MULTI/EXEC round trip."""
        dead_topic = dead_letter_topic(message.topic)
        entry = {name: value for name, value in fields.items() if name in (b"v", b"k")}
        entry.update({name.encode(): value.encode() for name, value in dead_letter.headers(
            message, group=self._group, deliveries=deliveries).items()})
        pipe = self._client.pipeline(transaction=True)
        pipe.xadd(keys.bus_stream(dead_topic), entry,  # type: ignore[arg-type]
                  maxlen=self._dead_letter_maxlen, approximate=True)
        pipe.sadd(keys.bus_topics(), dead_topic)
        pipe.xack(keys.bus_stream(message.topic), self._group, message.entry_id or "")
        pipe.execute()
        self._dead_lettered += 1
        dead_letter.log_dead_lettered(message, group=self._group, deliveries=deliveries,
                                      dead_topic=dead_topic, total=self._dead_lettered)


class RedisStreamsReader:
    """Reads streams outside any group (XREAD), from positions fixed at construction."""

    def __init__(self, client: redis.Redis, topics: Sequence[str], *, from_beginning: bool) -> None:
        self._client = client
        self._topics = {keys.bus_stream(topic): topic for topic in topics}
        self._positions = self._start_positions(from_beginning)

    def poll(self, max_messages: int = 100, timeout_s: float = 1.0) -> list[Message]:
        """One XREAD round trip."""
        try:
            response: Any = self._client.xread(
                self._positions, count=max_messages, block=_block_ms(timeout_s))  # type: ignore[arg-type]
        except _REDIS_DOWN as exc:
            raise BusUnavailableError(f"Redis unreachable: {exc}") from exc
        messages: list[Message] = []
        for stream, entries in response or []:
            for entry_id, fields in entries:
                self._positions[stream.decode()] = entry_id.decode()
                messages.append(_entry_to_message(self._topics[stream.decode()], entry_id, fields))
        return messages

    def ack(self, messages: Sequence[Message]) -> None:
        """Nothing to acknowledge outside a group."""

    def close(self) -> None:
        """Nothing to release (the client belongs to the bus)."""

    @property
    def dead_lettered(self) -> int:
        return 0

    def _start_positions(self, from_beginning: bool) -> dict[str, str]:
        if from_beginning:
            return dict.fromkeys(self._topics, "0-0")
        pipe = self._client.pipeline(transaction=False)
        for stream in self._topics:
            pipe.xrevrange(stream, count=1)
        try:
            last_entries: Iterable[Any] = pipe.execute()
        except _REDIS_DOWN as exc:
            raise BusUnavailableError(f"Redis unreachable: {exc}") from exc
        return {stream: (entries[0][0].decode() if entries else "0-0")
                for stream, entries in zip(self._topics, last_entries, strict=True)}
