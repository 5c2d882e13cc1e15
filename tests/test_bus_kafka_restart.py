"""The Kafka bus across broker restarts, on a private tansu broker.

- A broker that keeps its data (tansu on S3, ``KafkaBroker(persist=True)``): messages,
  committed group offsets and the idempotent producer's id survive the restart; the same
  producer and a consumer of the same group carry on with nothing lost or read twice.
- A broker that forgets everything (tansu in memory): the producers' ids are unknown to it
  afterwards and it refuses them for ever. The bus producer replaces itself after a failed
  delivery, so a later flush succeeds.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapy_cluster.bus import create_bus
from scrapy_cluster.errors import BusError
from scrapy_cluster.settings import load_settings
from tests.support.bus_fixtures import KAFKA_TEST_SESSION_TIMEOUT_MS
from tests.support.kafka_broker import KafkaBroker
from tests.support.starting import external_or_started

pytestmark = [pytest.mark.integration, pytest.mark.reliability]  # a restart story: make test-reliability

DELIVERY_TIMEOUT_MS = 3000


def started(tmp_path: Path, *, persist: bool) -> Iterator[KafkaBroker]:
    for broker in external_or_started(None, lambda: KafkaBroker(tmp_path, persist=persist)):
        assert isinstance(broker, KafkaBroker)
        yield broker


@pytest.fixture
def persistent_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    yield from started(tmp_path, persist=True)


@pytest.fixture
def memory_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    yield from started(tmp_path, persist=False)


def bus_on(broker: KafkaBroker) -> Any:
    return create_bus(load_settings("kafka-monitor", environ={}, overrides={
        "BUS_BACKEND": "kafka", "KAFKA_HOSTS": broker.bootstrap,
        "KAFKA_CONSUMER_SESSION_TIMEOUT_MS": KAFKA_TEST_SESSION_TIMEOUT_MS,
        "KAFKA_PRODUCER_DELIVERY_TIMEOUT_MS": DELIVERY_TIMEOUT_MS}))


def read(consumer: Any, count: int, timeout_s: float = 30.0) -> list[int]:
    """Poll until ``count`` values arrived (then ack them) or the time is up."""
    values: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        messages = consumer.poll(count - len(values), 0.5)
        values += [message.value["n"] for message in messages]
        consumer.ack(messages)
    return values


def test_a_persistent_broker_restart_keeps_messages_offsets_and_the_producer(
        persistent_broker: KafkaBroker) -> None:
    topic, group = f"restart-{uuid.uuid4().hex[:8]}", "restart-group"
    bus = bus_on(persistent_broker)
    producer = bus.producer()
    for n in range(10):
        producer.produce(topic, {"n": n}, key="one-partition")
    producer.flush()
    consumer = bus.consumer([topic], group, from_beginning=True)
    first = read(consumer, 10)
    consumer.close()
    assert first == list(range(10))

    persistent_broker.restart()

    for n in range(10, 15):
        producer.produce(topic, {"n": n}, key="one-partition")
    producer.flush(20)  # the same producer (same id) is accepted: no error, no renewal
    assert producer.renewals == 0
    consumer = bus.consumer([topic], group, from_beginning=True)
    after = read(consumer, 5)
    assert read(consumer, 1, timeout_s=3) == []
    consumer.close()
    assert after == list(range(10, 15)), "the group's committed offset was not kept"
    reader = bus.reader([topic], from_beginning=True)
    everything = read(reader, 15)
    reader.close()
    bus.close()
    assert everything == list(range(15)), "messages from before the restart were lost"


def test_a_producer_the_broker_forgot_replaces_itself_and_delivers_again(
        memory_broker: KafkaBroker) -> None:
    topic = f"forgot-{uuid.uuid4().hex[:8]}"
    bus = bus_on(memory_broker)
    producer = bus.producer()
    producer.produce(topic, {"n": 0})
    producer.flush()

    memory_broker.restart()  # topics, offsets and producer ids are gone
    other = bus_on(memory_broker)
    other.reader([topic]).close()  # creates the topic again (this bus's producer knew it)
    other.close()

    errors: list[str] = []
    delivered_n = None
    for n in range(1, 6):  # bounded: each failed attempt takes DELIVERY_TIMEOUT_MS
        producer.produce(topic, {"n": n})
        try:
            producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 5)
        except BusError as exc:
            errors.append(str(exc))
            continue
        delivered_n = n
        break
    assert delivered_n is not None, f"never delivered after the restart: {errors}"
    assert producer.renewals >= 1
    assert len(errors) <= 1, errors
    reader = bus.reader([topic], from_beginning=True)
    values = read(reader, 1)
    reader.close()
    bus.close()
    assert values == [delivered_n]
