"""``scrapy-cluster dump`` and ``list-topics`` on both backends."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from scrapy_cluster.bus import create_bus
from scrapy_cluster.cli import main
from scrapy_cluster.settings import load_settings
from tests.support.services import free_port

BusBackend = tuple[str, dict[str, Any]]


def global_flags(bus_backend: BusBackend) -> list[str]:
    name, overrides = bus_backend
    if name == "kafka":
        return ["--bus", "kafka", "--kafka-hosts", overrides["KAFKA_HOSTS"]]
    return ["--bus", "redis", "--redis-url", overrides["REDIS_URL"]]


def produce(bus_backend: BusBackend, topic: str, values: list[Any]) -> None:
    bus = create_bus(load_settings(environ={}, overrides=bus_backend[1]))
    producer = bus.producer()
    for value in values:
        producer.produce(topic, value)
    producer.close()
    bus.close()


@pytest.fixture
def topic() -> str:
    return f"dump.{uuid.uuid4().hex[:12]}"


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.integration
def test_dump_from_beginning_prints_older_messages(bus_backend: BusBackend, topic: str) -> None:
    produce(bus_backend, topic, [{"n": 1}])
    result = run_cli(*global_flags(bus_backend), "dump", "-t", topic, "--from-beginning",
                     "--max", "1", "--timeout", "30")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ['{"n":1}']


@pytest.mark.integration
def test_dump_pretty_prints_json(bus_backend: BusBackend, topic: str) -> None:
    produce(bus_backend, topic, [{"n": 1, "url": "http://example.com"}])
    result = run_cli(*global_flags(bus_backend), "dump", "-t", topic, "-p", "--from-beginning",
                     "--max", "1", "--timeout", "30")
    assert result.stdout == '{\n  "n": 1,\n  "url": "http://example.com"\n}\n'


@pytest.mark.integration
def test_dump_stops_after_the_idle_timeout_when_nothing_arrives(
        bus_backend: BusBackend, topic: str) -> None:
    result = run_cli(*global_flags(bus_backend), "dump", "-t", topic, "--timeout", "0.5")
    assert result.exit_code == 0
    assert result.stdout == ""


@pytest.mark.integration
def test_dump_shows_messages_produced_after_it_started(bus_backend: BusBackend, topic: str) -> None:
    produce(bus_backend, topic, [{"age": "old"}])
    dump = subprocess.Popen(
        [sys.executable, "-m", "scrapy_cluster", *global_flags(bus_backend), "dump", "-t", topic,
         "--max", "1", "--timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert dump.stderr is not None
        while not (line := dump.stderr.readline()).startswith("dumping "):
            assert line, "dump exited before it started reading"
        produce(bus_backend, topic, [{"age": "new"}])
        stdout, _ = dump.communicate(timeout=60)
    finally:
        dump.kill()
    assert dump.returncode == 0
    assert stdout.splitlines() == ['{"age":"new"}']


@pytest.mark.integration
def test_list_topics_lists_a_topic_that_has_messages(bus_backend: BusBackend, topic: str) -> None:
    produce(bus_backend, topic, [{"n": 1}])
    result = run_cli(*global_flags(bus_backend), "list-topics")
    assert result.exit_code == 0
    assert topic in result.stdout.splitlines()


@pytest.mark.integration
def test_dump_against_unreachable_redis_fails_with_a_clear_error(topic: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = run_cli("--bus", "redis", "--redis-url", url, "dump", "-t", topic, "--timeout", "1")
    assert result.exit_code == 1
    assert "Error: Redis unreachable" in result.stderr


def test_undecodable_message_is_printed_as_its_raw_text() -> None:
    from scrapy_cluster.bus import Message
    from scrapy_cluster.cli.bus_cmd import format_message

    message = Message(topic="t", value=None, raw=b"not json", error="message is not valid JSON")
    assert format_message(message, pretty=True) == "not json"
