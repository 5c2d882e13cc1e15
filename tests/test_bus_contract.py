"""The message-bus contract, run against both backends on real servers.

Every test taking ``bus_backend`` runs twice: on the session's tansu broker
(Kafka protocol) and on the session's redis-server (Redis Streams).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import Consumer, Message, MessageBus, create_bus, topics
from scrapy_cluster.bus.base import encode_value
from scrapy_cluster.bus.kafka_deliveries import pack, unpack
from scrapy_cluster.errors import BusUnavailableError, MessageTooLargeError, SettingsError
from scrapy_cluster.settings import Settings, load_settings
from tests.support.kafka_broker import KafkaBroker
from tests.support.services import RedisServer, ServiceUnavailable, free_port
from tests.support.starting import service_unavailable

BusBackend = tuple[str, dict[str, Any]]
DEADLINE_S = 30.0


def bus_settings(bus_backend: BusBackend, **extra: Any) -> Settings:
    return load_settings(environ={}, overrides={**bus_backend[1], **extra})


@pytest.fixture
def bus(bus_backend: BusBackend) -> Iterator[MessageBus]:
    message_bus = create_bus(bus_settings(bus_backend))
    yield message_bus
    message_bus.close()


@pytest.fixture
def topic() -> str:
    return f"test.{uuid.uuid4().hex[:12]}"


def produce_all(bus: MessageBus, topic: str, values: list[Any],
                key: Callable[[Any], str | None] = lambda value: None) -> None:
    producer = bus.producer()
    for value in values:
        producer.produce(topic, value, key=key(value))
    producer.close()


def drain(consumer: Consumer, count: int, *, ack: bool = True) -> list[Message]:
    """Poll until ``count`` messages arrived (or the deadline passed)."""
    received: list[Message] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(received) < count and time.monotonic() < deadline:
        batch = consumer.poll(max_messages=count - len(received), timeout_s=0.5)
        if ack:
            consumer.ack(batch)
        received += batch
    return received


def assert_nothing_more(consumer: Consumer) -> None:
    assert consumer.poll(timeout_s=1.0) == []


def wait_until_assigned(*consumers: Consumer) -> None:
    """Kafka only: poll until each group member owns partitions (Redis members need no wait)."""
    deadline = time.monotonic() + DEADLINE_S
    for consumer in consumers:
        assignment = getattr(consumer, "assignment", None)
        while assignment is not None and not assignment() and time.monotonic() < deadline:
            for member in consumers:
                assert member.poll(timeout_s=0.2) == []


# --- units (no server) -----------------------------------------------------------


def test_encode_value_refuses_a_value_over_the_limit() -> None:
    with pytest.raises(MessageTooLargeError, match="12 bytes exceeds BUS_MAX_MESSAGE_BYTES=11"):
        encode_value("x" * 10, max_bytes=11)


def test_topic_names_follow_the_api() -> None:
    settings = load_settings(environ={})
    assert topics.incoming(settings) == "demo.incoming"
    assert topics.crawled_firehose("demo") == "demo.crawled_firehose"
    assert topics.crawled_app("demo", "app1") == "demo.crawled_app1"
    assert topics.outbound_firehose("demo") == "demo.outbound_firehose"
    assert topics.outbound_app("demo", "app1") == "demo.outbound_app1"


def test_unknown_backend_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="BUS_BACKEND must be one of kafka, redis"):
        create_bus(load_settings(environ={}, overrides={"BUS_BACKEND": "carrier-pigeon"}))


# --- the contract, on both backends --------------------------------------------------


@pytest.mark.integration
def test_messages_with_one_key_keep_their_order(bus: MessageBus, topic: str) -> None:
    values = [{"key": f"k{i % 3}", "seq": i} for i in range(60)]
    produce_all(bus, topic, values, key=lambda value: value["key"])
    consumer = bus.consumer([topic], "order", from_beginning=True)
    received = [message.value for message in drain(consumer, 60)]
    consumer.close()
    for key in ("k0", "k1", "k2"):
        assert [v["seq"] for v in received if v["key"] == key] == [
            v["seq"] for v in values if v["key"] == key]


_DYING_CONSUMER = """
import json, sys, time
from scrapy_cluster.bus import create_bus
from scrapy_cluster.settings import load_settings
bus = create_bus(load_settings(environ={}, overrides=json.loads(sys.argv[1])))
consumer = bus.consumer([sys.argv[2]], sys.argv[3], from_beginning=True)
while not (messages := consumer.poll(timeout_s=0.5)):
    pass
print("received", len(messages), flush=True)
time.sleep(600)
"""


@pytest.mark.integration
def test_unacknowledged_messages_are_redelivered_after_their_consumer_dies(
        bus: MessageBus, bus_backend: BusBackend, topic: str) -> None:
    produce_all(bus, topic, [{"n": n} for n in range(5)])
    with subprocess.Popen([sys.executable, "-c", _DYING_CONSUMER, json.dumps(bus_backend[1]),
                           topic, "crash"], stdout=subprocess.PIPE, text=True) as dying:
        try:
            assert dying.stdout is not None
            assert dying.stdout.readline().startswith("received ")
        finally:
            os.kill(dying.pid, signal.SIGKILL)  # leaving the block closes its pipe and waits
    survivor = bus.consumer([topic], "crash", from_beginning=True)
    received = drain(survivor, 5)
    survivor.close()
    assert sorted(message.value["n"] for message in received) == [0, 1, 2, 3, 4]


@pytest.mark.integration
def test_acknowledged_messages_are_not_delivered_again_to_the_group(
        bus: MessageBus, topic: str) -> None:
    produce_all(bus, topic, [{"n": 1}, {"n": 2}])
    first = bus.consumer([topic], "acked", from_beginning=True)
    assert sorted(m.value["n"] for m in drain(first, 2)) == [1, 2]
    first.close()
    produce_all(bus, topic, [{"n": 3}])
    second = bus.consumer([topic], "acked", from_beginning=True)
    received = drain(second, 1)
    assert_nothing_more(second)
    second.close()
    assert [m.value for m in received] == [{"n": 3}]


@pytest.mark.integration
def test_two_consumers_of_one_group_share_messages_without_duplicates(
        bus: MessageBus, topic: str) -> None:
    first = bus.consumer([topic], "split", from_beginning=True)
    second = bus.consumer([topic], "split", from_beginning=True)
    wait_until_assigned(first, second)
    produce_all(bus, topic, [{"n": n} for n in range(60)], key=lambda value: f"k{value['n']}")
    seen: dict[str, list[int]] = {"first": [], "second": []}
    deadline = time.monotonic() + DEADLINE_S
    while len(seen["first"]) + len(seen["second"]) < 60 and time.monotonic() < deadline:
        for name, consumer in (("first", first), ("second", second)):
            batch = consumer.poll(max_messages=7, timeout_s=0.2)
            consumer.ack(batch)
            seen[name] += [message.value["n"] for message in batch]
    first.close()
    second.close()
    assert sorted(seen["first"] + seen["second"]) == list(range(60))
    assert seen["first"] and seen["second"]


@pytest.mark.integration
def test_consumer_from_the_end_sees_only_newer_messages(bus: MessageBus, topic: str) -> None:
    produce_all(bus, topic, [{"age": "old"}])
    consumer = bus.consumer([topic], "from-end", from_beginning=False)
    wait_until_assigned(consumer)
    assert consumer.poll(timeout_s=0.5) == []
    produce_all(bus, topic, [{"age": "new"}])
    received = drain(consumer, 1)
    assert_nothing_more(consumer)
    consumer.close()
    assert [m.value for m in received] == [{"age": "new"}]


@pytest.mark.integration
def test_consumer_from_the_beginning_sees_older_messages(bus: MessageBus, topic: str) -> None:
    produce_all(bus, topic, [{"age": "old"}])
    consumer = bus.consumer([topic], "from-start", from_beginning=True)
    received = drain(consumer, 1)
    consumer.close()
    assert [m.value for m in received] == [{"age": "old"}]


@pytest.mark.integration
def test_one_megabyte_message_round_trips(bus: MessageBus, topic: str) -> None:
    value = {"body": "é" * (512 * 1024)}  # two bytes each in UTF-8
    produce_all(bus, topic, [value])
    consumer = bus.consumer([topic], "big", from_beginning=True)
    received = drain(consumer, 1)
    consumer.close()
    assert len(received[0].raw) > 1024 * 1024
    assert received[0].value == value


@pytest.mark.integration
def test_oversized_message_is_refused_and_nothing_is_sent(
        bus: MessageBus, bus_backend: BusBackend, topic: str) -> None:
    limit = bus_settings(bus_backend)["BUS_MAX_MESSAGE_BYTES"]
    producer = bus.producer()
    with pytest.raises(MessageTooLargeError, match="exceeds BUS_MAX_MESSAGE_BYTES"):
        producer.produce(topic, "x" * limit)
    producer.produce(topic, {"after": True})
    producer.close()
    consumer = bus.consumer([topic], "oversized", from_beginning=True)
    received = drain(consumer, 1)
    assert_nothing_more(consumer)
    consumer.close()
    assert [m.value for m in received] == [{"after": True}]


@pytest.mark.integration
def test_list_topics_names_a_topic_once_produced_to(bus: MessageBus, topic: str) -> None:
    produce_all(bus, topic, [{"n": 1}])
    consumer = bus.consumer([topic], "listing", from_beginning=True)
    drain(consumer, 1)  # the topic surely exists once a message came back
    consumer.close()
    assert topic in bus.list_topics()


def inject_raw(bus_backend: BusBackend, topic: str, raw: bytes) -> None:
    """Write bytes that are not JSON, as a foreign producer might."""
    name, overrides = bus_backend
    if name == "kafka":
        producer = confluent_kafka.Producer({"bootstrap.servers": overrides["KAFKA_HOSTS"]})
        producer.produce(topic, raw)
        assert producer.flush(10) == 0
    else:
        redis.Redis.from_url(overrides["REDIS_URL"]).xadd(keys.bus_stream(topic), {"v": raw})


@pytest.mark.integration
def test_message_that_is_not_json_arrives_with_an_error_and_no_value(
        bus: MessageBus, bus_backend: BusBackend, topic: str) -> None:
    consumer = bus.consumer([topic], "garbage", from_beginning=True)
    inject_raw(bus_backend, topic, b"\xff not json")
    produce_all(bus, topic, [{"fine": True}])
    received = drain(consumer, 2)
    consumer.close()
    broken = [message for message in received if message.raw == b"\xff not json"]
    assert len(broken) == 1 and broken[0].value is None
    assert broken[0].error is not None and "not valid JSON" in broken[0].error
    assert [m.value for m in received if m is not broken[0]] == [{"fine": True}]


@pytest.mark.integration
def test_reader_sees_every_message_produced_after_it_was_created(
        bus: MessageBus, topic: str) -> None:
    produce_all(bus, topic, [{"age": "old"}])
    reader = bus.reader([topic])
    produce_all(bus, topic, [{"age": "new"}])
    received = drain(reader, 1)
    assert_nothing_more(reader)
    reader.close()
    assert [m.value for m in received] == [{"age": "new"}]


# --- outages: the backend is down, then back ---------------------------------------


class Outage:
    """A private server for one backend that the test stops and starts."""

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend = backend
        self.server: KafkaBroker | RedisServer = (
            KafkaBroker(workdir, port=free_port()) if backend == "kafka"
            else RedisServer(workdir, port=free_port()))

    @property
    def overrides(self) -> dict[str, Any]:
        if isinstance(self.server, KafkaBroker):
            return {"BUS_BACKEND": "kafka", "KAFKA_HOSTS": self.server.bootstrap,
                    "KAFKA_CONN_TIMEOUT": 2}
        return {"BUS_BACKEND": "redis", "REDIS_URL": self.server.url}


@pytest.fixture
def outage(bus_backend: BusBackend, tmp_path: Path) -> Iterator[Outage]:
    """The backend's server, not started yet."""
    try:
        server_outage = Outage(bus_backend[0], tmp_path / "outage")
    except ServiceUnavailable as exc:
        service_unavailable(exc)
    yield server_outage
    server_outage.server.stop()


@pytest.mark.integration
def test_flush_while_backend_is_down_raises_and_keeps_the_messages(
        outage: Outage, topic: str) -> None:
    bus = create_bus(load_settings(environ={}, overrides=outage.overrides))
    producer = bus.producer()
    for n in range(3):
        producer.produce(topic, {"n": n})
    with pytest.raises(BusUnavailableError, match="3 messages not"):
        producer.flush(timeout_s=1.0)
    outage.server.start()
    producer.flush(timeout_s=DEADLINE_S)
    consumer = bus.consumer([topic], "outage", from_beginning=True)
    received = drain(consumer, 3)
    consumer.close()
    producer.close()
    bus.close()
    assert sorted(m.value["n"] for m in received) == [0, 1, 2]


@pytest.mark.integration
def test_redis_consumer_raises_while_redis_is_down_and_reads_again_after_restart(
        private_redis: RedisServer, topic: str) -> None:
    bus = create_bus(load_settings(environ={}, overrides={
        "BUS_BACKEND": "redis", "REDIS_URL": private_redis.url}))
    consumer = bus.consumer([topic], "restart", from_beginning=True)
    private_redis.stop()
    with pytest.raises(BusUnavailableError, match="Redis unreachable"):
        consumer.poll(timeout_s=0.1)
    private_redis.start()  # empty again: the stream and the group are gone
    assert consumer.poll(timeout_s=0.1) == []  # recreates the group
    produce_all(bus, topic, [{"after": "restart"}])
    received = drain(consumer, 1)
    consumer.close()
    bus.close()
    assert [m.value for m in received] == [{"after": "restart"}]


def poll_until_unavailable(consumer: Consumer) -> BusUnavailableError | None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            consumer.poll(timeout_s=0.5)
        except BusUnavailableError as exc:
            return exc
    return None


@pytest.mark.integration
def test_poll_raises_bus_unavailable_once_the_backend_is_gone(outage: Outage, topic: str) -> None:
    outage.server.start()
    bus = create_bus(load_settings(environ={}, overrides=outage.overrides))
    consumer = bus.consumer([topic], "gone", from_beginning=True)
    outage.server.stop()
    error = poll_until_unavailable(consumer)
    consumer.close()
    bus.close()
    assert error is not None and "unreachable" in str(error)


# --- poison messages: dead-lettered after BUS_MAX_DELIVERIES deliveries ------------------

MAX_DELIVERIES = 3


def test_dead_letter_topic_is_the_topic_with_a_dead_letter_suffix() -> None:
    assert topics.dead_letter("demo.incoming") == "demo.incoming.dead_letter"


def test_kafka_delivery_record_round_trips_and_is_stale_once_the_group_moved_on() -> None:
    record = pack(committed=7_000_000_123, head_deliveries=4, last=7_000_000_623)
    assert unpack(7_000_000_123, record) == (4, 7_000_000_623)
    assert unpack(7_000_000_124, record) == (0, -1)
    assert unpack(7, -1001) == (0, -1)


def handle_until_poison(consumer: Consumer, handled: set[int], expected: set[int]) -> bool:
    """Poll like the Kafka Monitor (a batch is acknowledged once all of it was handled).
    True when a batch held the poison message: the "handler" dies, nothing is acknowledged.
    False once ``expected`` were handled and this consumer dead-lettered the poison message."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        batch = consumer.poll(timeout_s=0.5)
        if any(message.value.get("poison") for message in batch):
            return True
        handled.update(message.value["n"] for message in batch)
        consumer.ack(batch)
        if handled >= expected and consumer.dead_lettered and not batch:
            return False
    raise AssertionError(f"neither the poison message nor all of {sorted(expected)} came")


@pytest.mark.integration
def test_poison_message_is_dead_lettered_after_max_deliveries_and_its_batch_mates_are_handled(
        bus_backend: BusBackend, topic: str) -> None:
    bus = create_bus(bus_settings(bus_backend, BUS_MAX_DELIVERIES=MAX_DELIVERIES))
    values = [{"n": 0}, {"n": 1}, {"n": 2, "poison": True}, {"n": 3}, {"n": 4}]
    produce_all(bus, topic, values, key=lambda value: "one-partition")
    handled: set[int] = set()
    poison_deliveries = 0
    dead_lettered = 0
    while True:  # each round is one consumer process's life
        consumer = bus.consumer([topic], "poison", from_beginning=True)
        died = handle_until_poison(consumer, handled, {0, 1, 3, 4})
        dead_lettered += consumer.dead_lettered
        consumer.close()
        if not died:
            break
        poison_deliveries += 1
        assert poison_deliveries <= MAX_DELIVERIES
    reader = bus.reader([topics.dead_letter(topic)], from_beginning=True)
    dead = drain(reader, 1)
    assert_nothing_more(reader)
    reader.close()
    bus.close()
    assert poison_deliveries == MAX_DELIVERIES
    assert handled == {0, 1, 3, 4}
    assert dead_lettered == 1
    assert [message.value for message in dead] == [values[2]]
    assert dead[0].key == b"one-partition"
    headers = dict(dead[0].headers)
    assert headers["origin_topic"] == topic and headers["group"] == "poison"
    assert headers["deliveries"] == str(MAX_DELIVERIES)


@pytest.mark.integration
def test_messages_are_handed_out_with_their_delivery_count(
        bus_backend: BusBackend, topic: str) -> None:
    bus = create_bus(bus_settings(bus_backend, BUS_MAX_DELIVERIES=MAX_DELIVERIES))
    produce_all(bus, topic, [{"n": 1}])
    first = bus.consumer([topic], "counted", from_beginning=True)
    assert [m.deliveries for m in drain(first, 1, ack=False)] == [1]
    first.close()
    second = bus.consumer([topic], "counted", from_beginning=True)
    assert [m.deliveries for m in drain(second, 1)] == [2]
    second.close()
    bus.close()


# --- the Redis Streams producer's sender (units: a client that records, no server) -----------


class RecordingPipeline(redis.client.Pipeline):
    """A real redis-py pipeline that keeps what it would send instead of sending it."""

    def __init__(self, client: RecordingClient) -> None:
        super().__init__(client.real.connection_pool, client.real.response_callbacks,
                         transaction=False, shard_hint=None)
        self.recorder = client

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        return self.recorder.executed(list(self.command_stack))


class RecordingClient:
    """Hands out ``RecordingPipeline``s; ``execute`` records the staged commands and the thread
    that sent them, waits for ``gate`` and raises ``failure`` when set."""

    def __init__(self) -> None:
        self.real = redis.Redis(host="127.0.0.1", port=1)  # never connects
        self.sent: list[tuple[str, list[tuple[Any, ...]]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.failure: Exception | None = None

    def pipeline(self, transaction: bool = True) -> RecordingPipeline:
        return RecordingPipeline(self)

    def executed(self, stack: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        self.gate.wait(DEADLINE_S)
        if self.failure is not None:
            raise self.failure
        self.sent.append((threading.current_thread().name, [args for args, _ in stack]))
        return [b"0-1"] * len(stack)

    def xadds(self) -> list[tuple[Any, ...]]:
        return [args for _, batch in self.sent for args in batch if args[0] == "XADD"]


def streams_producer(client: RecordingClient, **policy: Any) -> Any:
    from scrapy_cluster.bus.redis_streams import RedisStreamsProducer
    from scrapy_cluster.bus.redis_streams_policy import StreamsPolicy

    values = {"max_message_bytes": 1 << 20, "maxlen": 1000, "claim_idle_ms": 60_000,
              "batch_size": 3, "linger_ms": 10_000, "max_buffered": 100, "max_deliveries": 5,
              **policy}
    return RedisStreamsProducer(client, StreamsPolicy(**values))


def wait_for_sent(client: RecordingClient, count: int, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while len(client.xadds()) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_redis_producer_stages_exactly_the_xadds_of_redis_py() -> None:
    client = RecordingClient()
    producer = streams_producer(client, batch_size=100)
    messages = [("t.a", {"n": 1, "s": "\u00e9"}, "k1"), ("t.b", [1, 2], None),
                ("t.a", "x", b"\xffk"), ("t.a", {"n": 1}, "")]
    for topic, value, key in messages:
        producer.produce(topic, value, key=key)
    producer.flush(timeout_s=1.0)
    expected = client.real.pipeline(transaction=False)
    for topic, value, key in messages:
        fields = {"v": encode_value(value, 1 << 20)}
        if key is not None:
            fields["k"] = key.encode() if isinstance(key, str) else key
        expected.xadd(keys.bus_stream(topic), fields,  # type: ignore[arg-type]
                      maxlen=1000, approximate=True)
    staged = client.xadds()
    assert staged == [args for args, _ in expected.command_stack]
    connection = client.real.connection_pool.make_connection()
    assert connection.pack_commands(staged) == \
        connection.pack_commands([args for args, _ in expected.command_stack])
    assert client.sent[0][1][-1][:2] == ("SADD", keys.bus_topics())
    producer.close()


def test_redis_producer_never_sends_on_the_producing_thread() -> None:
    client = RecordingClient()
    producer = streams_producer(client, batch_size=3, linger_ms=10_000)
    for n in range(7):
        producer.produce("t", {"n": n})
    # a full batch cuts the linger short: sent long before REDIS_STREAM_LINGER_MS
    wait_for_sent(client, 6, within_s=5.0)
    assert len(client.xadds()) >= 6
    producer.close()
    assert [args[-1] for args in client.xadds()] == [encode_value({"n": n}, 100) for n in range(7)]
    assert threading.current_thread().name not in [thread for thread, _ in client.sent[:2]]


def test_redis_producer_buffers_while_a_send_waits_for_redis() -> None:
    client = RecordingClient()
    client.gate.clear()  # Redis answers nothing for now
    producer = streams_producer(client, batch_size=2, linger_ms=0)
    producer.produce("t", {"n": 0})
    producer.produce("t", {"n": 1})
    time.sleep(0.2)  # the sender is waiting for Redis with the first batch
    started = time.monotonic()
    for n in range(2, 6):
        producer.produce("t", {"n": n})
    assert time.monotonic() - started < 1.0
    client.gate.set()
    producer.close()
    assert [orjson_value(args[-1]) for args in client.xadds()] == [{"n": n} for n in range(6)]


def test_redis_producer_keeps_messages_while_redis_is_down_then_sends_them_in_order() -> None:
    client = RecordingClient()
    client.failure = redis.ConnectionError("down")
    producer = streams_producer(client, batch_size=2, linger_ms=0, max_buffered=5)
    for n in range(5):
        producer.produce("t", {"n": n})
    with pytest.raises(BusUnavailableError, match="5 messages not delivered"):
        producer.flush(timeout_s=0.3)
    with pytest.raises(BusUnavailableError, match="REDIS_STREAM_MAX_BUFFERED"):
        producer.produce("t", {"n": 5})
    client.failure = None
    producer.flush(timeout_s=5.0)
    assert producer.buffered == 0
    producer.close()
    assert [orjson_value(args[-1]) for args in client.xadds()] == [{"n": n} for n in range(5)]


def orjson_value(raw: bytes) -> Any:
    return json.loads(raw)
