"""``MessageBus.group_lag`` (the Kafka Monitor lag of ``/metrics``), one contract on both
backends: the session's tansu broker (Kafka protocol) and its redis-server (Redis Streams)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from scrapy_cluster.bus import Consumer, Message, MessageBus, create_bus
from scrapy_cluster.settings import load_settings

BusBackend = tuple[str, dict[str, Any]]
PRODUCED = 7
ACKNOWLEDGED = 3
DEADLINE_S = 30.0


@pytest.fixture
def bus(bus_backend: BusBackend) -> Iterator[MessageBus]:
    message_bus = create_bus(load_settings(environ={}, overrides=bus_backend[1]))
    yield message_bus
    message_bus.close()


@pytest.fixture
def topic() -> str:
    return f"test.lag.{uuid.uuid4().hex[:12]}"


@pytest.fixture
def group() -> str:
    return f"lag-{uuid.uuid4().hex[:8]}"


def produce(bus: MessageBus, topic: str, count: int) -> None:
    """One flush per message: the test broker (tansu) reports a partition's high watermark as
    the last record *batch*'s base offset + 1, so only single-record batches give Kafka's
    true watermark there."""
    producer = bus.producer()
    for index in range(count):
        producer.produce(topic, {"n": index}, key=str(index))
        producer.flush()
    producer.close()


def receive(consumer: Consumer, count: int) -> list[Message]:
    """Poll until exactly ``count`` messages arrived (each poll asks for the rest only)."""
    received: list[Message] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(received) < count and time.monotonic() < deadline:
        received += consumer.poll(max_messages=count - len(received), timeout_s=0.5)
    assert len(received) == count
    return received


def redis_has_lag_field(bus_backend: BusBackend) -> bool:
    """Redis >= 7 reports a group's ``lag``; 6.2 (the embedded server) cannot always tell."""
    if bus_backend[0] != "redis":
        return True
    client = redis.Redis.from_url(bus_backend[1]["REDIS_URL"])
    try:
        return int(str(client.info("server")["redis_version"]).split(".")[0]) >= 7
    finally:
        client.close()


def test_group_lag_of_an_unknown_topic_is_none(bus: MessageBus, topic: str, group: str) -> None:
    assert bus.group_lag(topic, group) is None


def test_group_lag_before_the_group_read_anything_is_every_message(
        bus: MessageBus, topic: str, group: str) -> None:
    produce(bus, topic, PRODUCED)
    assert bus.group_lag(topic, group) == PRODUCED


def test_group_lag_counts_what_the_group_has_not_acknowledged(
        bus: MessageBus, bus_backend: BusBackend, topic: str, group: str) -> None:
    produce(bus, topic, PRODUCED)
    consumer = bus.consumer([topic], group, from_beginning=True)
    try:
        consumer.ack(receive(consumer, ACKNOWLEDGED))
        expected = PRODUCED - ACKNOWLEDGED if redis_has_lag_field(bus_backend) else None
        assert bus.group_lag(topic, group) == expected
    finally:
        consumer.close()


def test_messages_read_but_not_acknowledged_still_count(
        bus: MessageBus, bus_backend: BusBackend, topic: str, group: str) -> None:
    produce(bus, topic, PRODUCED)
    consumer = bus.consumer([topic], group, from_beginning=True)
    try:
        consumer.ack(receive(consumer, ACKNOWLEDGED))
        receive(consumer, 2)
        expected = PRODUCED - ACKNOWLEDGED if redis_has_lag_field(bus_backend) else None
        assert bus.group_lag(topic, group) == expected
    finally:
        consumer.close()


def test_group_lag_is_zero_once_everything_is_acknowledged(
        bus: MessageBus, topic: str, group: str) -> None:
    produce(bus, topic, PRODUCED)
    consumer = bus.consumer([topic], group, from_beginning=True)
    try:
        consumer.ack(receive(consumer, PRODUCED))
        assert bus.group_lag(topic, group) == 0
    finally:
        consumer.close()


def test_reading_the_lag_does_not_move_the_group(bus: MessageBus, topic: str, group: str) -> None:
    produce(bus, topic, PRODUCED)
    assert bus.group_lag(topic, group) == PRODUCED
    consumer = bus.consumer([topic], group, from_beginning=True)
    try:
        assert sorted(message.value["n"] for message in receive(consumer, PRODUCED)) == list(
            range(PRODUCED))
    finally:
        consumer.close()
