"""Reading Kafka: a consumer-group member with explicit commits, and a group-less reader.

Offsets are committed only by ``ack`` (``enable.auto.commit`` is off), so a
message is acknowledged only after its handler succeeded; acknowledging a
message also acknowledges the earlier messages of its partition (Kafka keeps
one position per partition). With ``max_deliveries`` > 0 the group member also
counts deliveries and dead-letters poison messages (``kafka_deliveries``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import confluent_kafka

from scrapy_cluster.bus.base import Message, decode_value
from scrapy_cluster.bus.kafka_deliveries import KafkaDeliveries
from scrapy_cluster.errors import BusError, BusUnavailableError
from scrapy_cluster.outage import QuietFailures
from scrapy_cluster.text import as_text

logger = logging.getLogger(__name__)
QUIET_FAILURES = QuietFailures()
"""Shared by this logger and librdkafka's (``kafka.py``): one connection-failure line per
outage per process, not one per reconnect attempt per client."""
logger.addFilter(QUIET_FAILURES)

_IGNORED = {confluent_kafka.KafkaError._PARTITION_EOF}
# commit failures caused by a rebalance: the partition's new owner redelivers (at-least-once)
_REBALANCE_COMMIT_ERRORS = {
    confluent_kafka.KafkaError.ILLEGAL_GENERATION,
    confluent_kafka.KafkaError.UNKNOWN_MEMBER_ID,
    confluent_kafka.KafkaError.REBALANCE_IN_PROGRESS,
    confluent_kafka.KafkaError._ASSIGNMENT_LOST,
}


def _to_message(record: confluent_kafka.Message) -> Message:
    raw = record.value() or b""
    value, error = decode_value(raw)
    pairs: list[tuple[str, str | bytes | None]] = record.headers() or []  # type: ignore[assignment]
    headers = tuple((name, as_text(data or "")) for name, data in pairs)
    return Message(topic=record.topic() or "", value=value, raw=raw, key=record.key(), error=error,
                   partition=record.partition(), offset=record.offset(), headers=headers)


class _KafkaReading:
    """Polling shared by the group consumer and the reader."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._brokers_down: str | None = None
        self._consumer = confluent_kafka.Consumer({**config, "error_cb": self._on_error})

    def poll(self, max_messages: int = 100, timeout_s: float = 1.0) -> list[Message]:
        """Wait up to ``timeout_s`` for one record, then take what is already fetched."""
        first = self._consumer.poll(timeout_s)
        records = [] if first is None else [first]
        if first is not None and max_messages > 1:
            records += self._consumer.consume(num_messages=max_messages - 1, timeout=0)
        if not records and self._brokers_down:
            reason, self._brokers_down = self._brokers_down, None
            raise BusUnavailableError(f"Kafka unreachable: {reason}")
        messages = []
        for record in records:
            error = record.error()
            if error is None:
                messages.append(_to_message(record))
            elif error.code() not in _IGNORED:
                logger.warning("consumer error on %s: %s", record.topic(), error)
        return messages

    def close(self) -> None:
        self._consumer.close()

    def _on_error(self, error: confluent_kafka.KafkaError) -> None:
        if error.code() == confluent_kafka.KafkaError._ALL_BROKERS_DOWN:
            self._brokers_down = str(error)
        logger.warning("Kafka client error: %s", error)


class KafkaConsumer(_KafkaReading):
    """A member of a consumer group; the group splits the topics' partitions.

    ``deliveries`` (given when ``BUS_MAX_DELIVERIES`` > 0) builds the delivery counter
    from this member's client; see ``kafka_deliveries`` for the round trips it adds.
    """

    def __init__(self, config: dict[str, Any], topics: Sequence[str], *,
                 deliveries: Callable[[confluent_kafka.Consumer], KafkaDeliveries] | None = None
                 ) -> None:
        super().__init__(config)
        self._deliveries = None if deliveries is None else deliveries(self._consumer)
        if self._deliveries is None:
            self._consumer.subscribe(list(topics))
        else:
            forget = self._deliveries.forget
            self._consumer.subscribe(
                list(topics), on_assign=lambda _, parts: forget(parts),
                on_revoke=lambda _, parts: forget(parts), on_lost=lambda _, parts: forget(parts))

    def poll(self, max_messages: int = 100, timeout_s: float = 1.0) -> list[Message]:
        messages = super().poll(max_messages, timeout_s)
        if self._deliveries is None or not messages:
            return messages
        try:
            return self._deliveries.select(messages)
        except confluent_kafka.KafkaException as exc:
            raise BusUnavailableError(f"cannot read delivery counts: {exc}") from exc

    @property
    def dead_lettered(self) -> int:
        return 0 if self._deliveries is None else self._deliveries.dead_lettered

    def close(self) -> None:
        super().close()
        if self._deliveries is not None:
            self._deliveries.close()

    def ack(self, messages: Sequence[Message]) -> None:
        """Commit the offsets after ``messages``: one synchronous commit round trip (two
        while a redelivered message is handed out alone: its delivery record too)."""
        positions: dict[tuple[str, int], int] = {}
        for message in messages:
            if message.partition is None or message.offset is None:
                continue
            where = (message.topic, message.partition)
            positions[where] = max(positions.get(where, -1), message.offset + 1)
        if not positions:
            return
        records = [] if self._deliveries is None else self._deliveries.after_ack(positions)
        offsets = [confluent_kafka.TopicPartition(topic, partition, offset)
                   for (topic, partition), offset in positions.items()]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except confluent_kafka.KafkaException as exc:
            if exc.args[0].code() in _REBALANCE_COMMIT_ERRORS:
                logger.warning("commit skipped during a rebalance (messages will be "
                               "redelivered to the partitions' new owner): %s", exc)
                return
            raise BusError(f"cannot commit offsets: {exc}") from exc
        if self._deliveries is not None:
            self._deliveries.commit_records(records)

    def assignment(self) -> list[tuple[str, int]]:
        """The (topic, partition) pairs this member currently owns."""
        return [(part.topic, part.partition) for part in self._consumer.assignment()]


class KafkaReader(_KafkaReading):
    """Reads all partitions outside any group, from offsets fixed at construction."""

    def __init__(self, config: dict[str, Any], topics: Sequence[str], *,
                 from_beginning: bool, timeout_s: float) -> None:
        super().__init__({**config, "group.id": f"scrapy-cluster-reader-{uuid.uuid4().hex}"})
        self._timeout_s = timeout_s
        self._consumer.assign(self._start_offsets(topics, from_beginning))

    def ack(self, messages: Sequence[Message]) -> None:
        """Nothing to acknowledge outside a group."""

    @property
    def dead_lettered(self) -> int:
        return 0

    def _start_offsets(self, topics: Sequence[str],
                       from_beginning: bool) -> list[confluent_kafka.TopicPartition]:
        """Every partition at its first offset, or at its current end (one request each)."""
        try:
            metadata = self._consumer.list_topics(timeout=self._timeout_s)
            partitions = [confluent_kafka.TopicPartition(topic, number)
                          for topic in topics for number in metadata.topics[topic].partitions]
            for part in partitions:
                low, high = self._consumer.get_watermark_offsets(part, timeout=self._timeout_s)
                part.offset = low if from_beginning else high
        except (confluent_kafka.KafkaException, KeyError) as exc:
            raise BusUnavailableError(f"cannot read topic positions: {exc!r}") from exc
        return partitions
