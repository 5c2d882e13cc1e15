"""The message-bus interface every backend implements, and the message it carries.

Contract shared by the Kafka and Redis Streams backends (one test suite runs
against both):

- ``Producer.produce`` encodes the value as JSON (orjson) and buffers it; a
  value whose encoding is larger than ``BUS_MAX_MESSAGE_BYTES`` is refused
  with ``MessageTooLargeError`` and nothing is buffered. Delivery happens in
  the background (batched); ``flush`` waits for it and raises when anything
  is still undelivered, so no message is ever lost silently.
- ``Consumer.poll`` returns messages of the subscribed topics; messages with
  the same key keep their order. ``ack`` tells the bus the messages were
  handled: unacknowledged messages are delivered again to another consumer of
  the group once their consumer is gone (at-least-once).
- ``poll`` raises ``BusUnavailableError`` while the backend cannot be reached
  at all; the consumer stays usable, callers log, back off and poll again.
- Poison messages: a message handed out ``BUS_MAX_DELIVERIES`` times without
  being acknowledged is not handed out again: it goes to the topic
  ``topics.dead_letter(topic)`` (value and key unchanged, headers ``origin_topic``,
  ``group``, ``deliveries`` and ``error`` when known), is acknowledged, counted in
  ``Consumer.dead_lettered`` and logged once. A message delivered again after its
  consumer died is handed out alone, so that a crash is not blamed on its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from scrapy_cluster.errors import MessageTooLargeError


@dataclass(frozen=True)
class Message:
    """One message read from the bus.

    ``value`` is the decoded JSON, or ``None`` with ``error`` set when the raw
    bytes are not JSON. ``partition``/``offset`` (Kafka) or ``entry_id``
    (Redis Streams) locate the message for ``ack``. ``deliveries`` counts how many
    times the group was handed this message, this time included (None when the
    consumer does not count: readers, or ``BUS_MAX_DELIVERIES`` = 0 on Kafka).
    ``headers`` are the message's headers (Kafka) or extra entry fields (Redis
    Streams), e.g. those of a dead-lettered message.
    """

    topic: str
    value: Any
    raw: bytes
    key: bytes | None = None
    error: str | None = None
    partition: int | None = None
    offset: int | None = None
    entry_id: str | None = None
    deliveries: int | None = None
    headers: tuple[tuple[str, str], ...] = ()


class Producer(Protocol):
    def produce(self, topic: str, value: Any, *, key: str | bytes | None = None) -> None:
        """Buffer one message; raises MessageTooLargeError or BusUnavailableError."""

    def flush(self, timeout_s: float = 10.0) -> None:
        """Deliver everything buffered; raises BusError if anything is undelivered."""

    def close(self) -> None:
        """Flush, then release the connection."""


class Consumer(Protocol):
    def poll(self, max_messages: int = 100, timeout_s: float = 1.0) -> list[Message]:
        """Up to ``max_messages`` messages, waiting at most ``timeout_s`` for the first."""

    def ack(self, messages: Sequence[Message]) -> None:
        """Mark messages handled (call only after handling succeeded)."""

    def close(self) -> None:
        """Leave the group; unacknowledged messages go to other consumers."""

    @property
    def dead_lettered(self) -> int:
        """Messages this consumer moved to a dead-letter topic (always 0 for readers)."""


class MessageBus(Protocol):
    def producer(self) -> Producer:
        """A new producer."""

    def consumer(self, topics: Sequence[str], group: str, *,
                 from_beginning: bool = False) -> Consumer:
        """A member of consumer group ``group`` reading ``topics``.

        ``from_beginning`` only matters when the group has no position yet on a
        topic: True starts at the oldest retained message, False at the end
        (only messages produced from now on).
        """

    def reader(self, topics: Sequence[str], *, from_beginning: bool = False) -> Consumer:
        """A consumer outside any group (``dump``): sees every message, ``ack`` does nothing.

        Its starting position is fixed when this returns, so a message
        produced afterwards is always seen.
        """

    def list_topics(self) -> list[str]:
        """Names of the bus's topics, sorted."""

    def group_lag(self, topic: str, group: str, *, timeout_s: float | None = None) -> int | None:
        """Messages of ``topic`` that consumer group ``group`` has not acknowledged yet
        (for ``/metrics``). A group with no position on a partition counts every retained
        message there. None when the bus cannot tell (topic or group unknown, or the
        backend keeps no count). Reads only: never joins the group, never moves its
        position. Raises ``BusUnavailableError`` when the backend is unreachable.
        """

    def close(self) -> None:
        """Release shared connections."""


def encode_value(value: Any, max_bytes: int) -> bytes:
    """JSON-encode ``value``; refuse it when the encoding exceeds ``max_bytes``. An
    ``orjson.Fragment`` (a value its producer encoded already, e.g. a result item measured
    with ``items.fit_encoded``) comes out byte for byte as it went in."""
    try:
        raw = orjson.dumps(value)
    except TypeError as exc:
        raise TypeError(f"message value is not JSON-serialisable: {exc}") from exc
    if len(raw) > max_bytes:
        raise MessageTooLargeError(
            f"message of {len(raw)} bytes exceeds BUS_MAX_MESSAGE_BYTES={max_bytes}; not sent")
    return raw


def encode_key(key: str | bytes | None) -> bytes | None:
    return key.encode() if isinstance(key, str) else key


def decode_value(raw: bytes) -> tuple[Any, str | None]:
    """``(value, None)`` for JSON, ``(None, reason)`` for anything else."""
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        return None, f"message is not valid JSON: {exc}"
