"""The commands end to end: ``feed`` through the CLI, ``kafka-monitor run`` as real processes.

Two monitors in one group share 10,000 requests, each handled once; a monitor
killed with SIGKILL mid-batch loses nothing once a new one takes over.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.cli import main
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.settings import load_settings
from tests.support.processes import stop_processes

pytestmark = pytest.mark.integration
CRAWL = {"url": "http://www.dmoz.org/", "appid": "testapp", "crawlid": "abc123"}


@pytest.fixture
def env(bus_backend: tuple[str, dict[str, Any]], redis_client: redis.Redis, redis_url: str,
        tmp_path: Path) -> dict[str, str]:
    """Settings as environment variables: a fresh topic and group on the backend under test."""
    name = uuid.uuid4().hex[:8]
    values = {**bus_backend[1], "REDIS_URL": redis_url, "KAFKA_INCOMING_TOPIC": f"km-{name}.in",
              "KAFKA_GROUP": f"km-{name}", "STATS_DUMP": 0, "LOG_LEVEL": "WARNING",
              "SC_DATA_DIR": str(tmp_path / "no-cluster"), "KAFKA_FEED_TIMEOUT": 10}
    return {key: str(value) for key, value in values.items()}


def cli(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env=env)


def lifetime(client: redis.Redis, name: str) -> int:
    return int(client.get(f"stats:kafka-monitor:{name}:lifetime") or 0)


def pending(env: dict[str, str], client: redis.Redis, crawlid: str = "abc123") -> int:
    frontier = Frontier.from_settings(load_settings("kafka-monitor", environ=env), client)
    return frontier.crawl_info("link", "testapp", crawlid).total_pending


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Monitors:
    """``kafka-monitor run`` subprocesses, always stopped at the end of the test."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = {**os.environ, **env}
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"monitor-{len(self.processes)}.log", "wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "scrapy_cluster", "kafka-monitor",
                                        "run"], env=self.env, stdout=log, stderr=log)
        self.processes.append(process)
        return process

    def stop_all(self) -> list[int | None]:
        return stop_processes(self.processes)


@pytest.fixture
def monitors(env: dict[str, str], tmp_path: Path) -> Iterator[Monitors]:
    running = Monitors(env, tmp_path)
    yield running
    running.stop_all()


def produce_crawls(env: dict[str, str], count: int) -> None:
    settings = load_settings("kafka-monitor", environ=env)
    bus = create_bus(settings)
    producer = bus.producer()
    for index in range(count):
        producer.produce(settings["KAFKA_INCOMING_TOPIC"],
                         {**CRAWL, "url": f"http://site{index}.example.org/"})
    producer.close()
    bus.close()


# --- feed ---------------------------------------------------------------------------------

def test_fed_crawl_reaches_the_frontier(env: dict[str, str], monitors: Monitors,
                                        redis_client: redis.Redis) -> None:
    result = cli(env, "feed", orjson.dumps(CRAWL).decode())
    # no crawler runs in this test: the crawl is queued all the same, with a warning
    assert (result.exit_code, result.output) == (
        0, f"sent to {env['KAFKA_INCOMING_TOPIC']} (ScraperHandler)\n"
           "warning: no crawler for this spider: no live crawler runs spider 'link'; the crawl "
           "is queued and waits until one starts (scrapy-cluster crawler --spider link)\n")
    monitors.start()
    wait_for(lambda: pending(env, redis_client) == 1, 60, "the crawl on the frontier")


@pytest.mark.parametrize(("request_body", "key"), [
    ({"action": "info", "appid": "testapp", "crawlid": "ABC123", "uuid": "u1",
      "spiderid": "link"}, "info:link:testapp:ABC123:u1"),
    ({"appid": "testapp", "uuid": "s1", "stats": "crawler"}, "statsrequest:crawler:testapp:s1"),
    ({"uuid": "z1", "appid": "madisonTest", "action": "domain-update", "domain": "dmoz.org",
      "hits": 60, "window": 60, "scale": 0.9}, "zk:domain-update:dmoz.org:madisonTest:z1"),
], ids=["info", "stats", "domain-update"])
def test_fed_job_is_visible_in_the_redis_monitor_index(
        env: dict[str, str], monitors: Monitors, redis_client: redis.Redis,
        request_body: dict[str, Any], key: str) -> None:
    assert cli(env, "kafka-monitor", "feed", orjson.dumps(request_body).decode()).exit_code == 0
    monitors.start()
    wait_for(lambda: redis_client.xlen(keys.redis_monitor_jobs()) == 1, 60, "the job")
    [(_, fields)] = redis_client.xrange(keys.redis_monitor_jobs())
    assert fields[b"key"].decode() == key
    assert orjson.loads(redis_client.get(key))["uuid"] == request_body["uuid"]


def test_feed_refuses_an_invalid_request_with_exit_2(env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["feed", '{"url": "http://x.org/"}'],
                                                env=env)
    assert result.exit_code == 2
    assert result.stderr == ("invalid request: ScraperHandler: request must contain "
                             "['appid', 'crawlid'] properties\n")


def test_feed_file_reports_a_summary(env: dict[str, str], tmp_path: Path) -> None:
    lines = [orjson.dumps(CRAWL), b"{broken", b"",
             orjson.dumps({**CRAWL, "url": "http://other.org/"})]
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = CliRunner().invoke(main, ["feed", "--file", str(path)], env=env)
    assert result.exit_code == 2
    assert result.stdout == "sent 2, failed 0, invalid 1\n"
    assert "line 2: not valid JSON" in result.stderr


# --- several processes --------------------------------------------------------------------

@pytest.mark.slow
def test_two_monitors_handle_ten_thousand_requests_exactly_once(
        env: dict[str, str], monitors: Monitors, redis_client: redis.Redis) -> None:
    monitors.start()
    monitors.start()
    produce_crawls(env, 10_000)
    wait_for(lambda: lifetime(redis_client, "total") >= 10_000, 60, "10,000 requests handled")
    assert monitors.stop_all() == [0, 0]
    assert lifetime(redis_client, "total") == 10_000
    assert lifetime(redis_client, "ScraperHandler") == 10_000
    assert pending(env, redis_client) == 10_000


@pytest.mark.slow
@pytest.mark.reliability  # a kill story (up to 90 s on Kafka): make test-reliability
def test_monitor_killed_mid_batch_loses_nothing(env: dict[str, str], monitors: Monitors,
                                               redis_client: redis.Redis) -> None:
    env_small = {**env, "KAFKA_MONITOR_BATCH_SIZE": "50"}
    monitors.env.update(env_small)
    first = monitors.start()
    produce_crawls(env, 3_000)
    wait_for(lambda: lifetime(redis_client, "total") > 0, 60, "the first batches")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert lifetime(redis_client, "total") < 3_000, "the monitor finished before it was killed"
    monitors.start()
    wait_for(lambda: pending(env, redis_client) == 3_000, 90, "every request on the frontier")
