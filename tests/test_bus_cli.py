"""``scrapy-cluster dump`` and ``list-topics`` on both backends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
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


NO_CLUSTER = ("Error: no running cluster found here (SC_DATA_DIR {}); start `scrapy-cluster up` "
              "or set REDIS_URL / BUS_BACKEND")
FEED_TIMEOUT_S = 5  # KAFKA_FEED_TIMEOUT of the Kafka Monitor, which `feed` runs as
REQUEST = '{"url": "https://example.com", "appid": "app", "crawlid": "c1"}'


def run_alone(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command in an empty directory, with no cluster setting in its environment."""
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("REDIS_URL", "BUS_BACKEND", "KAFKA_HOSTS", "SC_SETTINGS")}
    return subprocess.run([sys.executable, "-m", "scrapy_cluster", *args], cwd=tmp_path,
                          env={**inherited, "SC_DATA_DIR": str(tmp_path / "data"), **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [("feed", REQUEST), ("dump", "-t", "demo.crawled_firehose")],
                         ids=["feed", "dump"])
def test_without_a_running_cluster_the_command_says_so_and_exits_2(
        tmp_path: Path, args: tuple[str, ...]) -> None:
    started = time.monotonic()
    result = run_alone(tmp_path, *args)
    assert time.monotonic() - started < FEED_TIMEOUT_S
    assert result.returncode == 2
    assert result.stderr.splitlines() == [NO_CLUSTER.format(tmp_path / "data")]
    assert result.stdout == ""


@pytest.mark.parametrize("args", [("feed", REQUEST), ("dump", "-t", "demo.crawled_firehose"),
                                  ("settings",)], ids=["feed", "dump", "settings"])
@pytest.mark.parametrize("url", ["localhost:6390", "redis://127.0.0.1:notaport/0"])
def test_a_malformed_redis_url_is_one_line_without_traceback(
        tmp_path: Path, args: tuple[str, ...], url: str) -> None:
    result = run_alone(tmp_path, *args, REDIS_URL=url, BUS_BACKEND="redis")
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"Error: REDIS_URL '{url}' is not a")


@pytest.mark.integration
def test_feed_to_an_unreachable_bus_ends_within_the_feed_timeout_and_promises_nothing(
        tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_alone(tmp_path, "feed", REQUEST, BUS_BACKEND="redis",
                       REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    assert time.monotonic() - started < FEED_TIMEOUT_S + 3
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if line.startswith("not sent: ")]
    assert "did not confirm it within 5s" in line
    for promise in ("stay buffered", "delivered when", "later flush"):
        assert promise not in result.stderr
