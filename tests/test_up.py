"""`scrapy-cluster up`: a crashed crawler is restarted and nothing is lost; Ctrl-C stops every
child; the next `up` finishes the backlog; external Redis + Kafka work too. The terminal gets
one line per event, progress lines and the children's errors; each child's whole output is in
its log file (and on the terminal too with --verbose)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.addresses import UP
from tests.support.services import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PID_LINE = re.compile(
    r"^\d\d:\d\d:\d\d  started   (crawler-\d+|kafka-monitor|redis-monitor|rest) \(pid (\d+)\)$")
PROGRESS_LINE = re.compile(r"^\d\d:\d\d:\d\d  progress  ([\d,]+) pages \(([-\d.,]+)/s\)  "
                           r"backlog ([\d,]+)  errors ([\d,]+)  crawlers (\d+)/(\d+)"
                           r"(?:  .+)?$")  # then refused/filtered URLs, spiders with no crawler
SCRAPY_START = "[scrapy.utils.log] INFO: Scrapy"
INFO_LOGS = {"LOG_LEVEL": "INFO", "SC_LOG_LEVEL": "INFO"}
HOST_A, HOST_B = UP.hosts(31, 32)


_STARTED: list[UpProcess] = []


@pytest.fixture(autouse=True)
def stop_leftover_up() -> Iterator[None]:
    """A test that fails before stopping its `up` must not leave a cluster running: SIGTERM
    (`up` stops its children), then SIGKILL."""
    yield
    while _STARTED:
        up = _STARTED.pop()
        process = up.process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        up.close_output()


class UpProcess:
    """`scrapy-cluster up` in its own directory; its terminal output is kept line by line."""

    def __init__(self, workdir: Path, env: dict[str, str], crawlers: int = 2,
                 args: tuple[str, ...] = ()) -> None:
        self.workdir, self.lines = workdir, []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "scrapy_cluster", "up", "--crawlers", str(crawlers), *args],
            cwd=workdir, env=child_env(env), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        _STARTED.append(self)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def close_output(self) -> None:
        """Once `up` has ended: let the reader take the last lines, then close the pipe
        (never under a reader still blocked on it)."""
        self._reader.join(5)
        if not self._reader.is_alive() and self.process.stdout is not None:
            self.process.stdout.close()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def pids(self) -> dict[str, int]:
        """Latest pid of each child, from the supervisor's 'started' lines."""
        found: dict[str, int] = {}
        for line in list(self.lines):
            match = PID_LINE.search(line)
            if match:
                found[match.group(1)] = int(match.group(2))
        return found

    def wait_for(self, predicate: Any, timeout_s: float = 60.0,
                 context: Any = lambda: "") -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"condition not met {context()}; up output:\n"
                             + "\n".join(self.lines[-60:]))

    def interrupt(self, timeout_s: float = 20.0) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout_s)

    def log(self, name: str) -> str:
        """The component's log file, '' while it does not exist."""
        path = self.workdir / "data" / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def progress(self) -> list[tuple[int, int, str]]:
        """``(pages, backlog, "<crawlers running>/<configured>")`` of each progress line."""
        return [(int(m.group(1).replace(",", "")), int(m.group(3).replace(",", "")),
                 f"{m.group(5)}/{m.group(6)}")
                for m in map(PROGRESS_LINE.match, list(self.lines)) if m]


def child_env(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without cluster settings that would leak in, plus ``env``."""
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("REDIS_URL", "BUS_BACKEND", "KAFKA_HOSTS", "SC_SETTINGS")}
    return {**inherited, **env}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def site() -> Iterator[SiteServer]:
    config = SiteConfig(hosts=(HOST_A, HOST_B), pages_per_host=10, links_per_page=3,
                        page_delay_s=0.15)
    with SiteServer(config, free_port()) as server:
        yield server


def cluster_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"SC_DATA_DIR": str(tmp_path / "data"), "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true",
            "PUBLIC_IP": "127.0.0.1", "PUBLIC_IP_URL": "", "LEASE_TIMEOUT": "4",
            "QUEUE_HITS": "50", "QUEUE_WINDOW": "1", "LOG_LEVEL": "WARNING",
            "SC_LOG_LEVEL": "WARNING", "FLASK_PORT": str(free_port()), **extra}


def _health(port: str) -> str | None:
    """``node_health`` of the Rest service ``up`` runs, or None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
            return str(json.loads(response.read())["node_health"])
    except OSError:
        return None


def running_cluster_settings(tmp_path: Path) -> dict[str, str]:
    payload = json.loads((tmp_path / "data" / "cluster.json").read_text())
    return dict(payload["settings"])


def feed_crawl(tmp_path: Path, env: dict[str, str], seed: str, crawlid: str,
               maxdepth: int = 2) -> None:
    request = json.dumps({"url": seed, "appid": "uptest", "crawlid": crawlid,
                          "maxdepth": maxdepth})
    result = subprocess.run([sys.executable, "-m", "scrapy_cluster", "feed", request],
                            cwd=tmp_path, env=child_env(env), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


class Results:
    """Collects result URLs of one crawl from the crawled firehose in a background thread."""

    def __init__(self, overrides: dict[str, Any], crawlid: str, prefix: str = "demo") -> None:
        self.urls: list[str] = []
        self.last_error: Exception | None = None
        self._stop = threading.Event()
        settings = load_settings(environ={}, overrides=overrides)
        self._bus = create_bus(settings)
        self._consumer = self._bus.consumer([topics.crawled_firehose(prefix)],
                                            f"watch-{uuid.uuid4().hex[:8]}", from_beginning=True)
        self.crawlid = crawlid
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self._consumer.poll(max_messages=100, timeout_s=0.3)
            except Exception as exc:  # noqa: BLE001 - the cluster's Redis is restarting
                self.last_error = exc
                time.sleep(0.2)
                continue
            self.urls += [m.value["url"] for m in batch
                          if isinstance(m.value, dict) and m.value.get("crawlid") == self.crawlid]
            self._consumer.ack(batch)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()
        self._bus.close()


def test_up_restarts_a_killed_crawler_and_ctrl_c_stops_every_child(tmp_path: Path,
                                                                   site: SiteServer) -> None:
    env = cluster_env(tmp_path)
    up = UpProcess(tmp_path, env)
    up.wait_for(lambda: {"kafka-monitor", "redis-monitor", "rest", "crawler-1", "crawler-2"}
                <= set(up.pids()))
    dashboard = f"http://127.0.0.1:{env['FLASK_PORT']}/ui"
    up.wait_for(lambda: any(dashboard in line for line in up.lines))
    up.wait_for(lambda: _health(env["FLASK_PORT"]) == "GREEN")
    seed = site.site.url(HOST_A, "/p/0.html")
    expected = site.site.expected_urls(seed, 2)
    crawlid = uuid.uuid4().hex[:10]
    results = Results(dict(running_cluster_settings(tmp_path)), crawlid)
    try:
        feed_crawl(tmp_path, env, seed, crawlid)
        up.wait_for(lambda: len(results.urls) >= 2)
        victim = up.pids()["crawler-1"]
        os.kill(victim, signal.SIGKILL)
        up.wait_for(lambda: up.pids()["crawler-1"] != victim)
        up.wait_for(lambda: set(results.urls) >= expected, timeout_s=90)
        assert set(results.urls) == expected
        assert any(re.match(r"^\d\d:\d\d:\d\d  restart   crawler-1 exited with code -9; "
                            r"restarting in [\d.]+s \(restart #1\)$", line) for line in up.lines)
        children = list(up.pids().values())
        assert up.interrupt() == 0
        assert not [pid for pid in children if alive(pid)]
        assert not any("did not stop" in line for line in up.lines), "\n".join(up.lines)
        assert {"kafka-monitor", "redis-monitor", "rest", "crawler-1", "crawler-2"} <= {
            m.group(1) for m in map(re.compile(r"^\d\d:\d\d:\d\d  stopped   (\S+) ").match,
                                    up.lines) if m}
    finally:
        results.close()
        if up.process.poll() is None:
            up.process.kill()


def test_up_again_finishes_the_backlog_left_by_ctrl_c(tmp_path: Path, site: SiteServer) -> None:
    env = cluster_env(tmp_path, QUEUE_HITS="2", QUEUE_WINDOW="1")
    seed = site.site.url(HOST_A, "/p/0.html")
    expected = site.site.expected_urls(seed, 2)
    crawlid = uuid.uuid4().hex[:10]
    first = UpProcess(tmp_path, env, crawlers=1)
    first.wait_for(lambda: {"kafka-monitor", "crawler-1"} <= set(first.pids()))
    shared = running_cluster_settings(tmp_path)
    results = Results(dict(shared), crawlid)
    feed_crawl(tmp_path, env, seed, crawlid)
    first.wait_for(lambda: len(results.urls) >= 3)
    results.close()
    assert first.interrupt() == 0
    before = set(results.urls)
    assert before < expected, "the crawl finished before Ctrl-C; nothing left to resume"

    second = UpProcess(tmp_path, env, crawlers=1)
    second.wait_for(lambda: "crawler-1" in second.pids())
    assert running_cluster_settings(tmp_path)["REDIS_URL"] == shared["REDIS_URL"]
    resumed = Results(dict(shared), crawlid)
    try:
        second.wait_for(lambda: set(resumed.urls) >= expected, timeout_s=90)
        assert set(resumed.urls) == expected
    finally:
        resumed.close()
        second.interrupt()


def test_up_with_external_redis_and_kafka(tmp_path: Path, site: SiteServer, redis_url: str,
                                          kafka_bootstrap: str) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    env = cluster_env(tmp_path, REDIS_URL=redis_url, BUS_BACKEND="kafka",
                      KAFKA_HOSTS=kafka_bootstrap, KAFKA_TOPIC_PREFIX="uptest",
                      KAFKA_INCOMING_TOPIC="uptest.incoming")
    up = UpProcess(tmp_path, env, crawlers=1)
    up.wait_for(lambda: {"kafka-monitor", "crawler-1"} <= set(up.pids()))
    assert running_cluster_settings(tmp_path) == {"REDIS_URL": redis_url, "BUS_BACKEND": "kafka",
                                                  "KAFKA_HOSTS": kafka_bootstrap}
    seed = site.site.url(HOST_B, "/p/0.html")
    expected = site.site.expected_urls(seed, 1)
    crawlid = uuid.uuid4().hex[:10]
    overrides = {"REDIS_URL": redis_url, "BUS_BACKEND": "kafka", "KAFKA_HOSTS": kafka_bootstrap}
    results = Results(overrides, crawlid, prefix="uptest")
    try:
        feed_crawl(tmp_path, env, seed, crawlid, maxdepth=1)
        up.wait_for(lambda: set(results.urls) >= expected, timeout_s=90,
                    context=lambda: f"results {results.urls} ({results.last_error!r}), "
                                    f"expected {sorted(expected)}")
        assert set(results.urls) == expected
    finally:
        results.close()
        up.interrupt()


def test_up_writes_each_component_output_to_its_log_file_not_the_terminal(
        tmp_path: Path) -> None:
    env = cluster_env(tmp_path, **INFO_LOGS)
    up = UpProcess(tmp_path, env, crawlers=1)
    try:
        up.wait_for(lambda: SCRAPY_START in up.log("crawler-1"))
        up.wait_for(lambda: "Spider opened" in up.log("crawler-1"))
        up.wait_for(lambda: "Rest service listening" in up.log("rest"))
        up.wait_for(lambda: "Redis Monitor starting" in up.log("redis-monitor"))
        assert any(re.match(r"^  logs +\S*data/logs/ \(kafka-monitor.log, redis-monitor.log, "
                            r"rest.log, crawler-1.log\)$", line) for line in up.lines), up.lines
        pid = up.pids()["crawler-1"]
        assert f"up: started crawler-1 (pid {pid})" in up.log("crawler-1").splitlines()[0]
        terminal = "\n".join(up.lines)
        for child_output in (SCRAPY_START, "Overridden settings", "Spider opened",
                             "Rest service listening"):
            assert child_output not in terminal
    finally:
        assert up.interrupt() == 0
    assert "Spider closed" in up.log("crawler-1")
    assert "Spider closed" not in "\n".join(up.lines)


def test_up_echoes_a_child_error_line_to_the_terminal(tmp_path: Path) -> None:
    env = cluster_env(tmp_path)
    up = UpProcess(tmp_path, env, crawlers=1)
    try:
        up.wait_for(lambda: "redis-monitor" in up.pids())
        client = redis.Redis.from_url(running_cluster_settings(tmp_path)["REDIS_URL"])
        client.zadd("redis-monitor:timeouts", {"not-a-timeout-key": 1})
        client.close()
        echoed = re.compile(r"^\d\d:\d\d:\d\d  error     \[redis-monitor\] .*ERROR: "
                            r"malformed timeout key dropped")
        up.wait_for(lambda: any(echoed.match(line) for line in up.lines))
        assert "malformed timeout key dropped" in up.log("redis-monitor")
    finally:
        up.interrupt()


def test_up_verbose_shows_every_child_line_on_the_terminal_too(tmp_path: Path) -> None:
    env = cluster_env(tmp_path, **INFO_LOGS)
    up = UpProcess(tmp_path, env, crawlers=1, args=("--verbose",))
    try:
        up.wait_for(lambda: any(line.startswith("[crawler-1] ") and SCRAPY_START in line
                                for line in up.lines))
        up.wait_for(lambda: any(line.startswith("[rest] ") and "Rest service listening" in line
                                for line in up.lines))
        assert SCRAPY_START in up.log("crawler-1")
        assert "crawler-1" in up.pids()
    finally:
        up.interrupt()


@pytest.mark.parametrize("engine", ["scrapy", "fast"])
def test_up_progress_counts_the_pages_crawled(tmp_path: Path, site: SiteServer,
                                              engine: str) -> None:
    """Also ``up --engine fast``: its crawler is the asyncio engine (its log says so)."""
    env = {**cluster_env(tmp_path), **INFO_LOGS}
    up = UpProcess(tmp_path, env, crawlers=1,
                   args=("--progress-interval", "1", "--engine", engine))
    seed = site.site.url(HOST_B, "/p/0.html")
    expected = site.site.expected_urls(seed, 1)
    try:
        up.wait_for(lambda: _health(env["FLASK_PORT"]) == "GREEN")
        up.wait_for(lambda: bool(up.progress()))
        feed_crawl(tmp_path, env, seed, uuid.uuid4().hex[:10], maxdepth=1)
        up.wait_for(lambda: any(pages >= len(expected) and backlog == 0
                                for pages, backlog, _ in up.progress()), timeout_s=90,
                    context=lambda: f"expected {len(expected)} pages")
        assert {crawlers for _, _, crawlers in up.progress()} == {"1/1"}
        crawler_log = up.log("crawler-1")
        started = "fast engine started" if engine == "fast" else SCRAPY_START
        assert started in crawler_log
        assert ("fast engine started" in crawler_log) == (engine == "fast")
    finally:
        up.interrupt()
