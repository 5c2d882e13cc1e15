"""Delivery counts and dead-lettering for a Kafka consumer group.

Kafka keeps no delivery count, and a consumer's memory dies with it, so the count
lives on the broker. Per partition the record says: "the message at the group's
committed offset C was handed out N times, and C+1 .. E once, none acknowledged".
It is written (one synchronous commit) before ``poll`` hands a batch out, and
read (two offset fetches) when the partition is assigned. A message at C whose
record says N >= 1 was handed out by a consumer that died before acknowledging:
it is handed out alone (so a crash is blamed on it, not on its batch), and when N
reached ``max_deliveries`` it goes to ``topics.dead_letter(topic)`` instead
(produced, flushed, then the group commits past it).

Where: Kafka's commit metadata would be the natural place, but brokers need not
keep it (tansu, the test broker, drops it). The record is therefore the committed
offset of a shadow group ``<group>.deliveries`` on the same partition, packed as
``(C mod 2^32) << 24 | N << 16 | (E - C)``; a record whose C does not match the
group's committed offset is stale (the group moved on) and means "nothing pending".
The shadow group never joins, so it has no members and shows in group listings
with meaningless lag. N is capped at 255 and E - C at 65535: beyond that, messages
are handed out in batches again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka

from scrapy_cluster.bus import dead_letter
from scrapy_cluster.bus.base import Message
from scrapy_cluster.bus.topics import dead_letter as dead_letter_topic

logger = logging.getLogger(__name__)

_CHECK_MASK = (1 << 32) - 1
_MAX_COUNT = 255
_MAX_SPAN = 65535
Partition = tuple[str, int]


def pack(committed: int, head_deliveries: int, last: int) -> int:
    """The shadow group's offset for the record (C, N, E)."""
    span = min(max(last - committed, 0), _MAX_SPAN)
    return ((committed & _CHECK_MASK) << 24) | (min(head_deliveries, _MAX_COUNT) << 16) | span


def unpack(committed: int, value: int) -> tuple[int, int]:
    """``(N, E)`` of a shadow offset, or ``(0, -1)`` when absent or stale for ``committed``."""
    if value < 0 or (value >> 24) != (committed & _CHECK_MASK):
        return 0, -1
    head_deliveries = (value >> 16) & _MAX_COUNT
    return (head_deliveries, committed + (value & _MAX_SPAN)) if head_deliveries else (0, -1)


@dataclass
class PartitionDeliveries:
    """What this consumer knows of one assigned partition."""

    committed: int  # the group's position: the next message to acknowledge
    head_deliveries: int = 0  # times the message at ``committed`` was handed out
    redelivered_through: int = -1  # committed .. this were handed out by an earlier owner
    handed_through: int = -1  # the highest offset this consumer handed out
    dead: set[int] = field(default_factory=set)  # dead-lettered, not yet committed past

    def prior_deliveries(self, offset: int) -> int:
        """How many times the message at ``offset`` was handed out before (0: never)."""
        if offset < self.committed or offset > self.redelivered_through:
            return 0
        return self.head_deliveries if offset == self.committed else 1

    def handed_out(self, offsets: Sequence[int], deliveries: int) -> None:
        if self.committed in offsets:
            self.head_deliveries = deliveries
        self.handed_through = max(self.handed_through, *offsets)

    def advance(self, position: int) -> None:
        """The group acknowledged everything before ``position``; skip dead-lettered offsets."""
        position = max(position, self.committed)
        while position in self.dead:
            self.dead.discard(position)
            position += 1
        if position != self.committed:
            self.committed = position
            in_flight = position <= max(self.redelivered_through, self.handed_through)
            self.head_deliveries = 1 if in_flight else 0

    @property
    def record(self) -> int | None:
        """The shadow offset to commit, or None when nothing is pending (stale is fine)."""
        if not self.head_deliveries:
            return None
        return pack(self.committed, self.head_deliveries,
                    max(self.redelivered_through, self.handed_through))


class KafkaDeliveries:
    """Counts deliveries of one group member's partitions; moves poison messages aside.

    Round trips: two offset fetches per newly assigned partition set; one commit of
    the shadow group per ``select`` that hands messages out; per dead-lettered
    message one produce + flush and one commit.
    """

    def __init__(self, consumer: confluent_kafka.Consumer, shadow: confluent_kafka.Consumer, *,
                 group: str, max_deliveries: int, send_dead_letter: Callable[..., None],
                 timeout_s: float) -> None:
        self._consumer = consumer
        self._shadow = shadow
        self._group = group
        self._max_deliveries = max_deliveries
        self._send_dead_letter = send_dead_letter
        self._timeout_s = timeout_s
        self._partitions: dict[Partition, PartitionDeliveries] = {}
        self.dead_lettered = 0

    def close(self) -> None:
        self._shadow.close()

    def forget(self, partitions: Sequence[confluent_kafka.TopicPartition]) -> None:
        """Partitions assigned, revoked or lost: read their records again before use."""
        for part in partitions:
            self._partitions.pop((part.topic, part.partition), None)

    def select(self, messages: list[Message]) -> list[Message]:
        """The messages to hand out now; the rest are fetched again by later polls."""
        self._load(messages)
        chosen: list[Message] = []
        for index, message in enumerate(messages):
            where = (message.topic, message.partition or 0)
            prior = self._partitions[where].prior_deliveries(message.offset or 0)
            if not prior:
                chosen.append(_counted(message, 1))
                continue
            if prior >= self._max_deliveries:
                if self._dead_letter(message, prior):
                    continue
                self._rewind(messages[index:])
                break
            if chosen:  # hand the redelivered message out alone, on a later poll
                self._rewind(messages[index:])
            else:
                chosen = [_counted(message, prior + 1)]
                self._rewind(messages[index + 1:])
            break
        self._record(chosen)
        return chosen

    def after_ack(self, positions: dict[Partition, int]) -> list[confluent_kafka.TopicPartition]:
        """Move the known partitions to the acknowledged ``positions`` (updated in place to
        skip dead-lettered offsets); returns the shadow records to commit with them."""
        records = []
        for where, position in positions.items():
            state = self._partitions.get(where)
            if state is None:
                continue
            state.advance(position)
            positions[where] = state.committed
            if state.record is not None:
                records.append(confluent_kafka.TopicPartition(*where, state.record))
        return records

    def commit_records(self, records: list[confluent_kafka.TopicPartition]) -> None:
        if not records:
            return
        try:
            self._shadow.commit(offsets=records, asynchronous=False)
        except confluent_kafka.KafkaException as exc:
            logger.warning("delivery counts not recorded (a crash now goes uncounted): %s", exc)

    def _load(self, messages: Sequence[Message]) -> None:
        """Read the committed offsets and shadow records of partitions seen for the first time."""
        first_offsets: dict[Partition, int] = {}
        for message in messages:
            where = (message.topic, message.partition or 0)
            if where not in self._partitions:
                first_offsets.setdefault(where, message.offset or 0)
        if not first_offsets:
            return
        parts = [confluent_kafka.TopicPartition(*where) for where in first_offsets]
        committed = self._consumer.committed(parts, timeout=self._timeout_s)
        shadow = self._shadow.committed(parts, timeout=self._timeout_s)
        for main, record in zip(committed, shadow, strict=True):
            where = (main.topic, main.partition)
            position = main.offset if main.offset >= 0 else first_offsets[where]
            head_deliveries, last = unpack(position, record.offset)
            self._partitions[where] = PartitionDeliveries(
                position, head_deliveries=head_deliveries, redelivered_through=last)

    def _record(self, chosen: Sequence[Message]) -> None:
        """Write the delivery record of every partition handed out (one commit)."""
        by_partition: dict[Partition, list[Message]] = {}
        for message in chosen:
            by_partition.setdefault((message.topic, message.partition or 0), []).append(message)
        records = []
        for where, handed in by_partition.items():
            state = self._partitions[where]
            state.handed_out([m.offset or 0 for m in handed], max(m.deliveries or 1 for m in handed))
            if state.record is not None:
                records.append(confluent_kafka.TopicPartition(*where, state.record))
        self.commit_records(records)

    def _rewind(self, messages: Sequence[Message]) -> None:
        """Fetch these messages again on a later poll (seek each partition back)."""
        lowest: dict[Partition, int] = {}
        for message in messages:
            where = (message.topic, message.partition or 0)
            lowest[where] = min(lowest.get(where, message.offset or 0), message.offset or 0)
        for (topic, partition), offset in lowest.items():
            self._consumer.seek(confluent_kafka.TopicPartition(topic, partition, offset))

    def _dead_letter(self, message: Message, deliveries: int) -> bool:
        """Produce to the dead-letter topic, then commit past the message; False on failure."""
        dead_topic = dead_letter_topic(message.topic)
        fields = dead_letter.headers(message, group=self._group, deliveries=deliveries)
        try:
            self._send_dead_letter(dead_topic, message, fields)
        except Exception as exc:  # noqa: BLE001 - any failure: keep the message, retry later
            logger.error("could not move message %s:%s of %s to %s (retried on next poll): %s",
                         message.partition, message.offset, message.topic, dead_topic, exc)
            return False
        where = (message.topic, message.partition or 0)
        state = self._partitions[where]
        state.dead.add(message.offset or 0)
        before = state.committed
        state.advance(state.committed)
        if state.committed != before:
            self._commit_position(where, state)
        self.dead_lettered += 1
        dead_letter.log_dead_lettered(message, group=self._group, deliveries=deliveries,
                                      dead_topic=dead_topic, total=self.dead_lettered)
        return True

    def _commit_position(self, where: Partition, state: PartitionDeliveries) -> None:
        try:
            self._consumer.commit(offsets=[confluent_kafka.TopicPartition(*where, state.committed)],
                                  asynchronous=False)
        except confluent_kafka.KafkaException as exc:
            logger.warning("commit past a dead-lettered message failed (it may be "
                           "dead-lettered again): %s", exc)
            return
        if state.record is not None:
            self.commit_records([confluent_kafka.TopicPartition(*where, state.record)])


def _counted(message: Message, deliveries: int) -> Message:
    return Message(topic=message.topic, value=message.value, raw=message.raw, key=message.key,
                   error=message.error, partition=message.partition, offset=message.offset,
                   deliveries=deliveries, headers=message.headers)


def send_with(producer_config: dict[str, Any], ensure_topic: Callable[[Sequence[str]], None],
              timeout_s: float) -> Callable[[str, Message, dict[str, str]], None]:
    """A dead-letter sender: creates the topic, produces the original bytes, waits for delivery.
    Its producer is created on first use (most consumers never dead-letter anything)."""
    producers: list[confluent_kafka.Producer] = []

    def send(dead_topic: str, message: Message, fields: dict[str, str]) -> None:
        ensure_topic([dead_topic])
        if not producers:
            producers.append(confluent_kafka.Producer(dict(producer_config)))
        producer = producers[0]
        failures: list[Any] = []
        producer.produce(dead_topic, value=message.raw, key=message.key,
                         headers=[(name, value.encode()) for name, value in fields.items()],
                         on_delivery=lambda error, _: failures.append(error) if error else None)
        if producer.flush(timeout_s) or failures:
            raise confluent_kafka.KafkaException(failures[0] if failures else "not delivered")
    return send
