"""Kafka Monitor ingest rate: crawl requests consumed, validated and enqueued per second.

For each bus backend, N crawl requests (distinct URLs over 1,000 domains) are
put on a fresh topic first; then one process drains them twice, each time with
its own consumer group:

- ours: ``KafkaMonitor`` (fastjsonschema compiled once, one ``enqueue_many``
  plus one pipeline per batch of KAFKA_MONITOR_BATCH_SIZE);
- baseline, the original's way: per message, a ``jsonschema.Draft4Validator``
  built and run, the domain found with tldextract, then one Redis round trip
  (ZADD onto the domain queue). No dedupe and no stats: less work than ours.

The clock starts after the first batch arrives, so consumer-group joining is
not counted. Usage::

    .venv/bin/python benchmarks/kafka_monitor_ingest.py [--requests 100000] [--backend kafka]
        [--redis-url URL] [--kafka-hosts HOST:PORT]

Without --redis-url / --kafka-hosts, a throwaway redis-server and tansu broker
are started on free loopback ports.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import redis
import tldextract

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.kafka_broker import KafkaBroker  # noqa: E402
from tests.support.services import RedisServer  # noqa: E402

from scrapy_cluster import keys  # noqa: E402
from scrapy_cluster.api import SCHEMA_DIR  # noqa: E402
from scrapy_cluster.bus import create_bus  # noqa: E402
from scrapy_cluster.frontier import Frontier  # noqa: E402
from scrapy_cluster.kafka_monitor.loader import (  # noqa: E402
    build_plugins,
    build_validator,
    plugin_classes,
)
from scrapy_cluster.kafka_monitor.monitor import KafkaMonitor  # noqa: E402
from scrapy_cluster.settings import Settings, load_settings  # noqa: E402

LOGGER = logging.getLogger("bench-kafka-monitor")
LOGGER.setLevel(logging.WARNING)


@contextmanager
def services(redis_url: str | None, kafka_hosts: str | None) -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if redis_url is None:
            server = RedisServer(workdir / "redis")
            server.start()
            stack.callback(server.stop)
            redis_url = server.url
        if kafka_hosts is None:
            broker = KafkaBroker(workdir / "kafka")
            broker.start()
            stack.callback(broker.stop)
            kafka_hosts = broker.bootstrap
        yield redis_url, kafka_hosts


def fill_topic(settings: Settings, count: int) -> None:
    bus = create_bus(settings)
    producer = bus.producer()
    for index in range(count):
        producer.produce(settings["KAFKA_INCOMING_TOPIC"], {
            "url": f"http://site{index % 1000}.example.org/page/{index}",
            "appid": "benchapp", "crawlid": f"crawl{index % 10}", "priority": 1 + index % 100})
    producer.close()
    bus.close()


def timed_drain(poll_batch: Callable[[], int], count: int) -> float:
    """Requests/s after the first batch (group joining excluded)."""
    first = 0
    while first == 0:
        first = poll_batch()
    started, done = time.perf_counter(), first
    while done < count:
        done += poll_batch()
    return (count - first) / (time.perf_counter() - started)


def run_ours(settings: Settings, client: redis.Redis, count: int) -> float:
    bus = create_bus(settings)
    consumer = bus.consumer([settings["KAFKA_INCOMING_TOPIC"]], f"ours-{uuid.uuid4().hex}",
                            from_beginning=True)
    frontier = Frontier.from_settings(settings, client)
    plugins = build_plugins(plugin_classes(settings), settings, logger=LOGGER,
                            redis_client=client, frontier=frontier)
    monitor = KafkaMonitor.from_settings(
        settings, consumer=consumer, validator=build_validator([type(p) for p in plugins],
                                                                settings),
        plugins=plugins, redis_client=client, logger=LOGGER, machine="bench", process_id="1")
    try:
        return timed_drain(lambda: monitor.run_once().received, count)
    finally:
        consumer.close()
        bus.close()


def run_baseline(settings: Settings, client: redis.Redis, count: int) -> float:
    schemas = [orjson.loads((SCHEMA_DIR / f"{name}_schema.json").read_bytes())
               for name in ("scraper", "action", "stats", "zookeeper")]
    extract = tldextract.TLDExtract(suffix_list_urls=())  # offline: the bundled suffix list
    bus = create_bus(settings)
    consumer = bus.consumer([settings["KAFKA_INCOMING_TOPIC"]], f"base-{uuid.uuid4().hex}",
                            from_beginning=True)

    def handle(message: dict[str, Any]) -> None:
        for schema in schemas:
            try:
                jsonschema.Draft4Validator(schema).validate(message)
                break
            except jsonschema.ValidationError:
                continue
        message.setdefault("spiderid", "link")
        parts = extract(message["url"])
        domain = f"{parts.domain}.{parts.suffix}"
        client.zadd(keys.domain_queue("baseline-" + message["spiderid"], domain),
                    {orjson.dumps(message): -message.get("priority", 1)})

    def poll_batch() -> int:
        messages = consumer.poll(int(settings["KAFKA_MONITOR_BATCH_SIZE"]), 0.05)
        for message in messages:
            handle(message.value)
        consumer.ack(messages)
        return len(messages)

    try:
        return timed_drain(poll_batch, count)
    finally:
        consumer.close()
        bus.close()


def bench_backend(backend: str, redis_url: str, kafka_hosts: str, count: int) -> tuple[float, float]:
    settings = load_settings("kafka-monitor", environ={}, overrides={
        "BUS_BACKEND": backend, "REDIS_URL": redis_url, "KAFKA_HOSTS": kafka_hosts,
        "KAFKA_INCOMING_TOPIC": f"bench-{uuid.uuid4().hex[:8]}.incoming", "STATS_DUMP": 0,
        "REDIS_STREAM_MAXLEN": max(count * 2, 100_000)})
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    fill_topic(settings, count)
    ours = run_ours(settings, client, count)
    baseline = run_baseline(settings, client, count)
    client.close()
    return ours, baseline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--backend", choices=["kafka", "redis"], action="append")
    parser.add_argument("--redis-url")
    parser.add_argument("--kafka-hosts")
    args = parser.parse_args()
    with services(args.redis_url, args.kafka_hosts) as (redis_url, kafka_hosts):
        print(f"{args.requests:,} crawl requests per backend")
        print("| backend | ours (req/s) | baseline (req/s) | ratio |")
        print("| --- | --- | --- | --- |")
        for backend in args.backend or ["kafka", "redis"]:
            ours, baseline = bench_backend(backend, redis_url, kafka_hosts, args.requests)
            print(f"| {backend} | {ours:,.0f} | {baseline:,.0f} | {ours / baseline:.1f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
