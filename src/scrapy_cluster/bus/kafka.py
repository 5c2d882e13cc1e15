"""The Kafka bus (confluent-kafka / librdkafka).

The producer is idempotent with ``acks=all`` and batches for
``KAFKA_PRODUCER_BATCH_LINGER_MS``; librdkafka delivers in the background and
retries while the broker is away. A delivery that finally fails (after
``KAFKA_PRODUCER_DELIVERY_TIMEOUT_MS``) is counted and reported by the next
``flush``, and the producer is then replaced by a new one: a broker that lost its
idempotent-producer state (an in-memory broker restarted, a producer id expired) refuses the
old producer id for ever, and only a new producer gets a new id (an error librdkafka calls
fatal is treated the same way at once). Topics are created on demand with ``KAFKA_TOPIC_PARTITIONS``
partitions (asynchronously for producers, before subscribing for consumers).
``KAFKA_CONFIG`` is merged into every client's configuration.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from scrapy_cluster.bus.base import encode_key, encode_value
from scrapy_cluster.bus.kafka_consumer import QUIET_FAILURES, KafkaConsumer, KafkaReader
from scrapy_cluster.bus.kafka_deliveries import KafkaDeliveries, send_with
from scrapy_cluster.errors import BusError, BusUnavailableError, MessageTooLargeError

logger = logging.getLogger(__name__)
librdkafka_logger = logging.getLogger("scrapy_cluster.bus.librdkafka")
librdkafka_logger.addFilter(QUIET_FAILURES)

_MESSAGE_OVERHEAD_BYTES = 64 * 1024  # room for the record batch headers around one value


class KafkaTopics:
    """Creates topics on demand (once each) through an AdminClient."""

    def __init__(self, admin: AdminClient, *, partitions: int, replication_factor: int,
                 timeout_s: float) -> None:
        self._admin = admin
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._timeout_s = timeout_s
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def ensure(self, topics: Sequence[str]) -> None:
        """Create the missing topics and wait for the broker; BusUnavailableError on failure."""
        for topic, future in self._create(topics).items():
            try:
                future.result(timeout=self._timeout_s)
            except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout
                self._forget(topic)
                raise BusUnavailableError(f"cannot create topic {topic!r}: {exc}") from exc

    def ensure_in_background(self, topic: str) -> None:
        """Ask for the topic without waiting; a failure is logged and retried on next use."""
        for name, future in self._create([topic]).items():
            future.add_done_callback(functools.partial(self._on_created, name))

    def list(self) -> list[str]:
        try:
            metadata = self._admin.list_topics(timeout=self._timeout_s)
        except confluent_kafka.KafkaException as exc:
            raise BusUnavailableError(f"Kafka unreachable: {exc}") from exc
        return sorted(name for name in metadata.topics if not name.startswith("__"))

    def _create(self, topics: Sequence[str]) -> dict[str, Future[None]]:
        with self._lock:
            missing = [topic for topic in topics if topic not in self._known]
            self._known.update(missing)
        if not missing:
            return {}
        new_topics = [NewTopic(topic, num_partitions=self._partitions,
                               replication_factor=self._replication_factor)
                      for topic in missing]
        futures = self._admin.create_topics(new_topics, request_timeout=self._timeout_s)
        return {topic: _ignore_existing(future) for topic, future in futures.items()}

    def _on_created(self, topic: str, future: Future[None]) -> None:
        if future.exception() is not None:
            logger.warning("could not create topic %r (retried on next use): %s",
                           topic, future.exception())
            self._forget(topic)

    def _forget(self, topic: str) -> None:
        with self._lock:
            self._known.discard(topic)


def _ignore_existing(future: Future[None]) -> Future[None]:
    """A future that succeeds when the topic was created or already existed."""
    result: Future[None] = Future()

    def done(source: Future[None]) -> None:
        exc = source.exception()
        code = exc.args[0].code() if exc is not None and exc.args and hasattr(
            exc.args[0], "code") else None
        if exc is None or code == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            result.set_result(None)
        else:
            result.set_exception(exc)

    future.add_done_callback(done)
    return result


class KafkaProducer:
    """Idempotent, batching producer. ``produce`` never blocks on the network."""

    def __init__(self, new_producer: Callable[[], confluent_kafka.Producer], topics: KafkaTopics,
                 *, max_message_bytes: int, hosts: str) -> None:
        self._new_producer = new_producer
        self._producer = new_producer()
        self.renewals = 0
        self._topics = topics
        self._max_message_bytes = max_message_bytes
        self._hosts = hosts
        self._failed = 0
        self._first_failure: str | None = None
        self._lock = threading.Lock()
        self._topics_used: set[str] = set()

    def produce(self, topic: str, value: Any, *, key: str | bytes | None = None) -> None:
        raw = encode_value(value, self._max_message_bytes)
        self._topics.ensure_in_background(topic)
        self._topics_used.add(topic)
        try:
            self._send(topic, raw, encode_key(key))
        except BufferError:
            self._producer.poll(1.0)  # serve delivery reports, freeing queue space
            try:
                self._send(topic, raw, encode_key(key))
            except BufferError as exc:
                raise BusUnavailableError(
                    f"producer queue full (broker {self._hosts} slow or down): {exc}") from exc
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            if error.code() == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE:
                raise MessageTooLargeError(str(exc)) from exc
            if error.fatal():
                self._renew(str(error))
            raise BusError(f"cannot produce to {topic!r}: {exc}") from exc
        self._producer.poll(0)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait for delivery; raises BusError for failed messages, BusUnavailableError for waiting
        ones. Waiting messages stay in this producer, which delivers them when the broker is
        back (or reports them failed after KAFKA_PRODUCER_DELIVERY_TIMEOUT_MS) for as long as
        it lives: the error does not say so, since a process that exits loses them."""
        for topic in self._topics_used:  # a creation that failed while the broker was away
            self._topics.ensure_in_background(topic)
        waiting = self._producer.flush(timeout_s)
        with self._lock:
            failed, first, self._failed, self._first_failure = (
                self._failed, self._first_failure, 0, None)
        if failed:
            if not waiting:  # nothing left in the old producer: a new one loses nothing
                self._renew(first or "delivery failed")
            raise BusError(f"{failed} messages failed delivery to Kafka ({first})")
        if waiting:
            raise BusUnavailableError(
                f"{waiting} messages not yet delivered to {self._hosts} after {timeout_s}s")

    def close(self) -> None:
        self.flush()

    def _renew(self, reason: str) -> None:
        """Replace the producer (a new producer id), purging what the old one still holds
        (reported failed to the caller of this ``flush``/``produce``)."""
        old, self._producer = self._producer, self._new_producer()
        self.renewals += 1
        logger.warning("Kafka producer replaced by a new one after: %s", reason)
        try:
            old.purge()
            old.flush(0)
        except Exception as exc:  # noqa: BLE001 - the old producer is discarded either way
            logger.debug("discarding the old producer: %s", exc)

    def _send(self, topic: str, raw: bytes, key: bytes | None) -> None:
        self._producer.produce(topic, value=raw, key=key, on_delivery=self._on_delivery)

    def _on_delivery(self, error: confluent_kafka.KafkaError | None,
                     message: confluent_kafka.Message) -> None:
        if error is None:
            return
        logger.error("message to %s not delivered: %s", message.topic(), error)
        with self._lock:
            self._failed += 1
            self._first_failure = self._first_failure or str(error)


class KafkaBus:
    """``MessageBus`` on Kafka."""

    def __init__(self, *, producer_config: dict[str, Any], consumer_config: dict[str, Any],
                 topics: KafkaTopics, max_message_bytes: int, timeout_s: float,
                 max_deliveries: int = 0) -> None:
        self._producer_config = producer_config
        self._max_deliveries = max_deliveries
        self._consumer_config = consumer_config
        self._topics = topics
        self._max_message_bytes = max_message_bytes
        self._timeout_s = timeout_s

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> KafkaBus:
        base = {"bootstrap.servers": settings["KAFKA_HOSTS"], "logger": librdkafka_logger}
        extra = dict(settings["KAFKA_CONFIG"] or {})  # the operator's word wins
        max_bytes = int(settings["BUS_MAX_MESSAGE_BYTES"])
        producer = {"enable.idempotence": True, "acks": "all",
                    "linger.ms": int(settings["KAFKA_PRODUCER_BATCH_LINGER_MS"]),
                    "socket.send.buffer.bytes": int(settings["KAFKA_PRODUCER_BUFFER_BYTES"]),
                    "message.max.bytes": max_bytes + _MESSAGE_OVERHEAD_BYTES,
                    "message.timeout.ms": int(settings["KAFKA_PRODUCER_DELIVERY_TIMEOUT_MS"]),
                    "allow.auto.create.topics": False}
        fetch_bytes = int(settings["KAFKA_CONSUMER_FETCH_MESSAGE_MAX_BYTES"])
        consumer = {"enable.auto.commit": False,
                    "session.timeout.ms": int(settings["KAFKA_CONSUMER_SESSION_TIMEOUT_MS"]),
                    "fetch.message.max.bytes": fetch_bytes,
                    "fetch.max.bytes": max(fetch_bytes, 50 * 1024 * 1024),
                    "receive.message.max.bytes": max(fetch_bytes, 50 * 1024 * 1024) + 1024 * 1024}
        timeout_s = float(settings["KAFKA_CONN_TIMEOUT"])
        topics = KafkaTopics(AdminClient({**base, **extra}),
                             partitions=int(settings["KAFKA_TOPIC_PARTITIONS"]),
                             replication_factor=int(settings["KAFKA_TOPIC_REPLICATION_FACTOR"]),
                             timeout_s=timeout_s)
        return cls(producer_config={**base, **producer, **extra},
                   consumer_config={**base, **consumer, **extra}, topics=topics,
                   max_message_bytes=max_bytes, timeout_s=timeout_s,
                   max_deliveries=int(settings["BUS_MAX_DELIVERIES"]))

    def producer(self) -> KafkaProducer:
        config = dict(self._producer_config)
        return KafkaProducer(lambda: confluent_kafka.Producer(dict(config)), self._topics,
                             max_message_bytes=self._max_message_bytes,
                             hosts=str(self._producer_config["bootstrap.servers"]))

    def consumer(self, topics: Sequence[str], group: str, *,
                 from_beginning: bool = False) -> KafkaConsumer:
        self._topics.ensure(topics)
        config = {**self._consumer_config, "group.id": group,
                  "auto.offset.reset": "earliest" if from_beginning else "latest"}
        if not self._max_deliveries:
            return KafkaConsumer(config, topics)
        return KafkaConsumer(config, topics, deliveries=lambda client: KafkaDeliveries(
            client, confluent_kafka.Consumer({**self._consumer_config,
                                              "group.id": f"{group}.deliveries"}),
            group=group, max_deliveries=self._max_deliveries,
            send_dead_letter=send_with(self._producer_config, self._topics.ensure,
                                       self._timeout_s),
            timeout_s=self._timeout_s))

    def reader(self, topics: Sequence[str], *, from_beginning: bool = False) -> KafkaReader:
        self._topics.ensure(topics)
        return KafkaReader(dict(self._consumer_config), topics, from_beginning=from_beginning,
                           timeout_s=self._timeout_s)

    def list_topics(self) -> list[str]:
        return self._topics.list()

    def group_lag(self, topic: str, group: str, *, timeout_s: float | None = None) -> int | None:
        """Per partition, the high watermark minus the group's committed offset (the low
        watermark where the group committed nothing), summed. None when the topic does not
        exist. Uses a short-lived consumer with ``group.id`` = ``group`` that never subscribes,
        so the group is neither joined nor rebalanced. Requests: metadata, one offset fetch,
        one watermark query per partition, each bounded by ``timeout_s`` (KAFKA_CONN_TIMEOUT)."""
        timeout = self._timeout_s if timeout_s is None else timeout_s
        # log_level 0: while the broker is away the caller gets BusUnavailableError, not a
        # librdkafka log line per reconnection attempt of every scrape.
        consumer = confluent_kafka.Consumer({**self._consumer_config, "group.id": group,
                                             "log_level": 0})
        try:
            return _group_lag(consumer, topic, timeout)
        except confluent_kafka.KafkaException as exc:
            raise BusUnavailableError(f"cannot read the lag of group {group!r}: {exc}") from exc
        finally:
            consumer.close()

    def close(self) -> None:
        """Clients are owned by the producers and consumers; nothing shared to release."""


def _group_lag(consumer: confluent_kafka.Consumer, topic: str, timeout_s: float) -> int | None:
    described = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if described is None or described.error is not None:
        return None
    partitions = [confluent_kafka.TopicPartition(topic, partition)
                  for partition in sorted(described.partitions)]
    lag = 0
    for committed in consumer.committed(partitions, timeout=timeout_s):
        if committed.error is not None:
            raise confluent_kafka.KafkaException(committed.error)
        low, high = consumer.get_watermark_offsets(committed, timeout=timeout_s, cached=False)
        lag += max(0, high - (committed.offset if committed.offset >= 0 else low))
    return lag
