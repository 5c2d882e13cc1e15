"""Message-bus throughput: produce, then consume, N messages of about 1 KB on each backend.

Run:
    .venv/bin/python benchmarks/bus_throughput.py [--messages 100000] [--backend kafka|redis]
        [--redis-url URL] [--kafka-hosts HOST:PORT]

Without --redis-url / --kafka-hosts, a throwaway redis-server and tansu broker
(from the test support code) are started on free loopback ports.

produce: from the first ``produce`` call until ``flush`` returned (every
message acknowledged by the broker / written by Redis). consume: a consumer
group reading from the beginning and acknowledging every batch, timed from the
first message received (so a Kafka group join is not counted) to the last.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.kafka_broker import KafkaBroker  # noqa: E402
from tests.support.services import RedisServer  # noqa: E402

from scrapy_cluster.bus import MessageBus, create_bus  # noqa: E402
from scrapy_cluster.settings import load_settings  # noqa: E402

BODY = "x" * 1000  # with the JSON envelope: 1,024 bytes per message


@contextmanager
def backend_overrides(backend: str, url: str | None, workdir: Path) -> Iterator[dict[str, Any]]:
    """Settings for ``backend``, starting a throwaway server when no address is given."""
    if backend == "redis":
        server: RedisServer | KafkaBroker | None = None if url else RedisServer(workdir / "redis")
        if server is not None:
            server.start()
        yield {"BUS_BACKEND": "redis", "REDIS_URL": url or server.url}  # type: ignore[union-attr]
    else:
        server = None if url else KafkaBroker(workdir / "kafka")
        if server is not None:
            server.start()
        yield {"BUS_BACKEND": "kafka", "KAFKA_HOSTS": url or server.bootstrap}  # type: ignore[union-attr]
    if server is not None:
        server.stop()


def produce(bus: MessageBus, topic: str, count: int) -> float:
    """Seconds to produce and flush ``count`` messages."""
    producer = bus.producer()
    producer.produce(topic, {"seq": -1, "body": ""})  # topic creation is not measured
    producer.flush()
    started_s = time.perf_counter()
    for seq in range(count):
        producer.produce(topic, {"seq": seq, "body": BODY})
    producer.flush(timeout_s=300)
    elapsed_s = time.perf_counter() - started_s
    producer.close()
    return elapsed_s


def consume(bus: MessageBus, topic: str, count: int) -> float:
    """Seconds from the first to the last of ``count + 1`` messages (acknowledging each batch)."""
    consumer = bus.consumer([topic], f"bench-{uuid.uuid4().hex[:8]}", from_beginning=True)
    received, started_s = 0, 0.0
    while received < count + 1:
        batch = consumer.poll(max_messages=1000, timeout_s=5.0)
        if batch and not received:
            started_s = time.perf_counter()
        consumer.ack(batch)
        received += len(batch)
    elapsed_s = time.perf_counter() - started_s
    consumer.close()
    return elapsed_s


def run(backend: str, url: str | None, count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        overrides = stack.enter_context(backend_overrides(backend, url, Path(tmp)))
        bus = create_bus(load_settings(environ={}, overrides=overrides))
        topic = f"bench.{uuid.uuid4().hex[:8]}"
        produce_s = produce(bus, topic, count)
        consume_s = consume(bus, topic, count)
        bus.close()
    print(f"{backend:6} produce {count / produce_s:>9,.0f} msg/s ({produce_s:.2f} s)   "
          f"consume {count / consume_s:>9,.0f} msg/s ({consume_s:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--backend", choices=["kafka", "redis"], action="append")
    parser.add_argument("--redis-url")
    parser.add_argument("--kafka-hosts")
    args = parser.parse_args()
    for backend in args.backend or ["kafka", "redis"]:
        run(backend, args.kafka_hosts if backend == "kafka" else args.redis_url, args.messages)


if __name__ == "__main__":
    main()
