"""deploy/supervisor/scrapy-cluster.conf runs a working cluster under a real supervisord.

The shipped file is tested as shipped, except for ``SUBSTITUTIONS``: each replaces one exact
piece of text (the test fails if the file no longer contains it), to put paths in a temporary
directory, run this virtualenv's ``scrapy-cluster``, point the environment at the test Redis
and Kafka-protocol broker, and add what a crawl of the loopback test site needs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.addresses import DEPLOY_SUPERVISOR
from tests.support.bus_fixtures import KAFKA_TEST_SESSION_TIMEOUT_MS
from tests.support.services import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHIPPED = Path(__file__).resolve().parents[1] / "deploy" / "supervisor" / "scrapy-cluster.conf"
BIN = Path(sys.executable).parent
PROGRAMS = {"kafka-monitor", "redis-monitor", "crawler-00", "crawler-01", "rest"}
STATUS_LINE = re.compile(r"^scrapy-cluster:(\S+)\s+(\S+)(?:\s+pid (\d+))?")


class Deployment:
    """Paths and settings of one test deployment."""

    def __init__(self, root: Path, redis_url: str, bootstrap: str) -> None:
        self.root = root
        self.log_dir, self.run_dir, self.etc_dir = root / "log", root / "run", root / "etc"
        for directory in (self.log_dir, self.run_dir, self.etc_dir):
            directory.mkdir(parents=True)
        self.prefix = f"sup{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.redis_url, self.bootstrap = redis_url, bootstrap
        self.config = root / "supervisord.conf"

    def substitutions(self) -> list[tuple[str, str]]:
        test_env = {
            "FLASK_PORT": self.port, "REST_HOST": "127.0.0.1",
            "KAFKA_PRODUCER_TOPIC": f"{self.prefix}.incoming", "KAFKA_GROUP": self.prefix,
            "KAFKA_CONSUMER_SESSION_TIMEOUT_MS": KAFKA_TEST_SESSION_TIMEOUT_MS,
            "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "PUBLIC_IP": "127.0.0.1",
            "PUBLIC_IP_URL": "", "QUEUE_HITS": 50, "QUEUE_WINDOW": 1}
        extra = "".join(f',\n    {name}="{value}"' for name, value in test_env.items())
        return [
            ("/opt/scrapy-cluster/venv/bin/scrapy-cluster", str(BIN / "scrapy-cluster")),
            ("/var/log/scrapy-cluster", str(self.log_dir)),
            ("/run/scrapy-cluster", str(self.run_dir)),
            ("/etc/scrapy-cluster", str(self.etc_dir)),
            ("user=scrapy-cluster\n", ""),  # no dedicated account on the test machine
            ("numprocs=4", "numprocs=2"),
            ('REDIS_URL="redis://redis.internal:6379/0"', f'REDIS_URL="{self.redis_url}"'),
            ('KAFKA_HOSTS="kafka-1.internal:9092,kafka-2.internal:9092,kafka-3.internal:9092"',
             f'KAFKA_HOSTS="{self.bootstrap}"'),
            ('KAFKA_TOPIC_PREFIX="demo"', f'KAFKA_TOPIC_PREFIX="{self.prefix}"'),
            ('KAFKA_INCOMING_TOPIC="demo.incoming"',
             f'KAFKA_INCOMING_TOPIC="{self.prefix}.incoming"'),
            ('SC_LOG_LEVEL="INFO"', 'SC_LOG_LEVEL="INFO"' + extra),
        ]

    def write_config(self) -> None:
        text = SHIPPED.read_text()
        for old, new in self.substitutions():
            assert text.count(old) >= 1, f"the shipped config no longer contains {old!r}"
            text = text.replace(old, new)
        self.config.write_text(text)

    def bus_overrides(self) -> dict[str, Any]:
        return {"BUS_BACKEND": "kafka", "KAFKA_HOSTS": self.bootstrap,
                "KAFKA_CONSUMER_SESSION_TIMEOUT_MS": KAFKA_TEST_SESSION_TIMEOUT_MS}


def supervisorctl(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "supervisorctl"), "-c", str(deployment.config), *args],
                          capture_output=True, text=True, timeout=30)


def statuses(deployment: Deployment) -> dict[str, tuple[str, int | None]]:
    """``{program: (state, pid)}`` from ``supervisorctl status``."""
    found: dict[str, tuple[str, int | None]] = {}
    for line in supervisorctl(deployment, "status").stdout.splitlines():
        match = STATUS_LINE.match(line)
        if match:
            pid = match.group(3)
            found[match.group(1)] = (match.group(2), int(pid) if pid else None)
    return found


def wait_for(predicate: Callable[[], bool], timeout_s: float, context: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"condition not met within {timeout_s}s: {context()}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def logs_tail(deployment: Deployment) -> str:
    return "\n".join(f"--- {path.name}:\n{path.read_text(errors='replace')[-2000:]}"
                     for path in sorted(deployment.log_dir.glob("*.log")))


@pytest.fixture
def site() -> Iterator[SiteServer]:
    config = SiteConfig(hosts=DEPLOY_SUPERVISOR.hosts(41, 42), pages_per_host=8, links_per_page=3)
    with SiteServer(config, free_port()) as server:
        yield server


@pytest.fixture
def deployment(tmp_path: Path, redis_url: str, kafka_bootstrap: str,
               redis_client: redis.Redis) -> Iterator[Deployment]:
    """The shipped config, substituted, under a running ``supervisord -n``; stopped after."""
    deployment = Deployment(tmp_path, redis_url, kafka_bootstrap)
    deployment.write_config()
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "BUS_BACKEND", "KAFKA_HOSTS", "SC_SETTINGS")}
    with open(tmp_path / "supervisord.out", "wb") as out:
        process = subprocess.Popen([str(BIN / "supervisord"), "-n", "-c", str(deployment.config)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    deployment.process = process  # type: ignore[attr-defined]
    try:
        yield deployment
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(90)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def crawled_urls(deployment: Deployment, crawlid: str, expected: set[str],
                 timeout_s: float) -> set[str]:
    """URLs of ``crawlid`` read from the crawled firehose until ``expected`` are all there."""
    settings = load_settings(environ={}, overrides=deployment.bus_overrides())
    bus = create_bus(settings)
    consumer = bus.consumer([topics.crawled_firehose(deployment.prefix)],
                            f"watch-{uuid.uuid4().hex[:8]}", from_beginning=True)
    urls: set[str] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while not expected <= urls and time.monotonic() < deadline:
            batch = consumer.poll(max_messages=100, timeout_s=0.5)
            urls |= {m.value["url"] for m in batch
                     if isinstance(m.value, dict) and m.value.get("crawlid") == crawlid}
            consumer.ack(batch)
    finally:
        consumer.close()
        bus.close()
    return urls


def test_supervisord_runs_the_cluster_crawls_and_stops_every_child(
        deployment: Deployment, site: SiteServer) -> None:
    process: subprocess.Popen[bytes] = deployment.process  # type: ignore[attr-defined]

    def all_running() -> bool:
        found = statuses(deployment)
        return set(found) == PROGRAMS and all(state == "RUNNING" for state, _ in found.values())

    wait_for(all_running, 90, lambda: f"{statuses(deployment)}\n{logs_tail(deployment)}")
    pids = {name: pid for name, (_, pid) in statuses(deployment).items()}
    base = f"http://127.0.0.1:{deployment.port}"
    wait_for(lambda: _health(base) == "GREEN", 60, lambda: logs_tail(deployment))

    seed = site.site.url(DEPLOY_SUPERVISOR.host(41), "/p/0.html")
    expected = site.site.expected_urls(seed, 2)
    crawlid = uuid.uuid4().hex[:10]
    answer = httpx.post(base + "/feed", json={"url": seed, "appid": "suptest",
                                              "crawlid": crawlid, "maxdepth": 2}, timeout=30)
    assert answer.status_code == 200, answer.text
    urls = crawled_urls(deployment, crawlid, expected, timeout_s=120)
    assert urls == expected, logs_tail(deployment)

    process.send_signal(signal.SIGTERM)
    assert process.wait(120) == 0
    assert not [name for name, pid in pids.items() if pid is not None and alive(pid)]
    supervisord_log = (deployment.log_dir / "supervisord.log").read_text()
    assert len(re.findall(r"stopped: (\S+) \(exit status 0\)", supervisord_log)) == len(PROGRAMS), \
        supervisord_log
    assert "SIGKILL" not in supervisord_log


def _health(base: str) -> str | None:
    try:
        return str(httpx.get(base + "/", timeout=2).json()["node_health"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def test_program_logs_are_json_lines_naming_their_component(
        deployment: Deployment) -> None:
    def started() -> bool:
        found = statuses(deployment)
        return set(found) == PROGRAMS and all(state == "RUNNING" for state, _ in found.values())

    wait_for(started, 90, lambda: f"{statuses(deployment)}\n{logs_tail(deployment)}")
    for program, component in (("kafka-monitor", "kafka-monitor"),
                               ("redis-monitor", "redis-monitor"), ("rest", "rest")):
        path = deployment.log_dir / f"{program}.log"
        wait_for(lambda path=path: path.exists() and path.stat().st_size > 0, 30,
                 lambda: logs_tail(deployment))
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert records and {record["component"] for record in records} == {component}
