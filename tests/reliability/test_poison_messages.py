"""Poison messages: a message that kills its consumer process every time, on both backends.

A worker process reads the topic like the Kafka Monitor (a batch is acknowledged once all
of it was handled) and dies (``os._exit``) when a batch holds the poison message; the test
restarts it. After ``BUS_MAX_DELIVERIES`` deaths the bus moves the message to
``<topic>.dead_letter`` and the next worker handles everything else.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.settings import load_settings

BusBackend = tuple[str, dict[str, Any]]
MAX_DELIVERIES = 3
VALID = set(range(20))
POISON_AFTER = 7  # produced between valid messages 7 and 8
DEADLINE_S = 60.0

_WORKER = """
import json, os, sys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.settings import load_settings
overrides, topic, log_path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
consumer = create_bus(load_settings(environ={}, overrides=overrides)).consumer(
    [topic], "poison-workers", from_beginning=True)
dead_lettered = 0
while True:
    batch = consumer.poll(max_messages=5, timeout_s=0.5)
    with open(log_path, "a") as log:
        if any(message.value.get("poison") for message in batch):
            log.write("poison\\n")
            log.flush()
            os._exit(3)
        log.writelines(f"handled {message.value['n']}\\n" for message in batch)
        if consumer.dead_lettered != dead_lettered:
            dead_lettered = consumer.dead_lettered
            log.write(f"dead_lettered {dead_lettered}\\n")
    consumer.ack(batch)
"""


def read_log(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def finished(lines: list[str]) -> bool:
    handled = {int(line.split()[1]) for line in lines if line.startswith("handled ")}
    return handled >= VALID and "dead_lettered 1" in lines


def run_worker(bus_backend: BusBackend, topic: str, log_path: Path) -> int | None:
    """One worker life: its exit code when it died, None when it finished the work."""
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, json.dumps(bus_backend[1]),
                               topic, str(log_path)])
    try:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                return worker.returncode
            if finished(read_log(log_path)):
                return None
            time.sleep(0.2)
        raise AssertionError(f"worker neither died nor finished: {read_log(log_path)}")
    finally:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(timeout=30)


def dump_flags(bus_backend: BusBackend) -> list[str]:
    name, overrides = bus_backend
    if name == "kafka":
        return ["--bus", "kafka", "--kafka-hosts", overrides["KAFKA_HOSTS"]]
    return ["--bus", "redis", "--redis-url", overrides["REDIS_URL"]]


@pytest.fixture
def poisoned_topic(bus_backend: BusBackend) -> str:
    topic = f"poison.{uuid.uuid4().hex[:12]}"
    bus = create_bus(load_settings(environ={}, overrides=bus_backend[1]))
    producer = bus.producer()
    for n in sorted(VALID):
        producer.produce(topic, {"n": n}, key="one-partition")
        if n == POISON_AFTER:
            producer.produce(topic, {"n": -1, "poison": True}, key="one-partition")
    producer.close()
    bus.close()
    return topic


@pytest.fixture
def poison_backend(bus_backend: BusBackend) -> BusBackend:
    return bus_backend[0], {**bus_backend[1], "BUS_MAX_DELIVERIES": MAX_DELIVERIES}


@pytest.mark.integration
def test_poison_message_kills_exactly_max_deliveries_workers_then_is_dead_lettered(
        poison_backend: BusBackend, poisoned_topic: str, tmp_path: Path) -> None:
    log_path = tmp_path / "worker.log"
    exit_codes = []
    for _ in range(MAX_DELIVERIES + 1):
        exit_codes.append(run_worker(poison_backend, poisoned_topic, log_path))
        if exit_codes[-1] is None:
            break
    lines = read_log(log_path)
    handled = {int(line.split()[1]) for line in lines if line.startswith("handled ")}
    assert exit_codes == [3] * MAX_DELIVERIES + [None]
    assert lines.count("poison") == MAX_DELIVERIES
    assert handled == VALID
    assert "dead_lettered 1" in lines


@pytest.mark.integration
def test_dump_shows_the_dead_lettered_message(
        poison_backend: BusBackend, poisoned_topic: str, tmp_path: Path) -> None:
    for _ in range(MAX_DELIVERIES + 1):
        if run_worker(poison_backend, poisoned_topic, tmp_path / "worker.log") is None:
            break
    dump = subprocess.run(
        [sys.executable, "-m", "scrapy_cluster", *dump_flags(poison_backend), "dump",
         "-t", topics.dead_letter(poisoned_topic), "--from-beginning", "--max", "1",
         "--timeout", "30"], capture_output=True, text=True, timeout=120, check=False)
    assert dump.returncode == 0, dump.stderr
    assert [json.loads(line) for line in dump.stdout.splitlines()] == [
        {"n": -1, "poison": True}]
