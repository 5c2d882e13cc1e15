"""A crawl that does nothing says why, end to end (issue 31, item 3): `scrapy-cluster up` with
its SSRF guard on, a crawl of a private address and crawls for a spider no crawler runs, fed
with `scrapy-cluster feed` and `POST /feed`; the progress line, the feed warnings and `info`
explain both."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.stats.reasons import NO_CRAWLER
from tests.support.services import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WAIT_S = 90.0


class Up:
    """`scrapy-cluster up --crawlers 1` in its own process group; its lines kept."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "scrapy_cluster", "up", "--crawlers", "1",
             "--progress-interval", "1"],
            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def progress(self) -> list[str]:
        return [line for line in list(self.lines) if "  progress  " in line]

    def stop(self) -> None:
        """SIGINT (a clean stop), then SIGKILL to the whole group if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)
        self.reader.join(5)
        if self.process.stdout is not None and not self.reader.is_alive():
            self.process.stdout.close()  # (never under a reader still blocked on it)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Up, dict[str, str]]]:
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("REDIS_URL", "BUS_BACKEND", "KAFKA_HOSTS", "SC_SETTINGS")}
    env = {**inherited, "SC_DATA_DIR": str(tmp_path / "data"), "FLASK_PORT": str(free_port()),
           "CRAWLER_ALLOW_PRIVATE_NETWORKS": "false", "CRAWL_COMPLETE_GRACE_S": "1",
           "PUBLIC_IP": "127.0.0.1", "PUBLIC_IP_URL": "", "LOG_LEVEL": "WARNING",
           "SC_LOG_LEVEL": "WARNING"}
    up = Up(tmp_path, env)
    try:
        yield up, env
    finally:
        up.stop()


def wait_for(check: Callable[[], Any], what: str, up: Up) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if up.process.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; up said:\n" + "\n".join(up.lines[-40:]))


def cluster_redis(tmp_path: Path, up: Up) -> redis.Redis:
    path = tmp_path / "data" / "cluster.json"
    wait_for(path.is_file, "cluster.json", up)
    return redis.Redis.from_url(json.loads(path.read_text())["settings"]["REDIS_URL"])


def feed(tmp_path: Path, env: dict[str, str], request: dict[str, Any]) -> str:
    """`scrapy-cluster feed` next to the running `up`; returns its stderr."""
    result = subprocess.run([sys.executable, "-m", "scrapy_cluster", "feed", json.dumps(request)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stderr


def post_feed(env: dict[str, str], request: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"http://127.0.0.1:{env['FLASK_PORT']}/feed", json=request, timeout=30)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def info(env: dict[str, str], crawlid: str, spiderid: str) -> dict[str, Any]:
    body = post_feed(env, {"action": "info", "appid": "why", "crawlid": crawlid,
                           "spiderid": spiderid, "uuid": f"info-{crawlid}-{time.monotonic()}"})
    assert "poll_id" not in (body["data"] or {}), body
    data: dict[str, Any] = body["data"]
    return data


def rest_answers(env: dict[str, str]) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{env['FLASK_PORT']}/", timeout=2).json()[
            "node_health"] == "GREEN"
    except (httpx.HTTPError, ValueError):
        return False


def test_a_private_address_and_an_unknown_spider_are_explained(
        tmp_path: Path, cluster: tuple[Up, dict[str, str]]) -> None:
    up, env = cluster
    client = cluster_redis(tmp_path, up)
    wait_for(lambda: client.zcard(keys.heartbeat_index("crawler")), "a crawler heartbeat", up)
    assert client.zrange(keys.heartbeat_index("crawler"), 0, -1) == [  # up's SC_NODE_ID
        f"{socket.gethostname()}:link:crawler-1".encode()]
    wait_for(lambda: rest_answers(env), "the Rest service", up)

    private = {"url": "http://127.0.0.2:9/", "appid": "why", "crawlid": "private"}
    assert "warning" not in feed(tmp_path, env, private)  # a live crawler runs `link`
    unknown = {"url": "http://example.invalid/", "appid": "why", "crawlid": "unknown",
               "spiderid": "nosuchspider"}
    warned = feed(tmp_path, env, unknown)
    assert f"warning: {NO_CRAWLER}: no live crawler runs spider 'nosuchspider'" in warned
    answer = post_feed(env, {**unknown, "crawlid": "unknown-2", "url": "http://b.invalid/"})
    assert answer["status"] == "SUCCESS"
    assert len(answer["warnings"]) == 1 and answer["warnings"][0].startswith(NO_CRAWLER)

    line = wait_for(lambda: next((line for line in reversed(up.progress())
                                  if "1 refused (ssrf 1)" in line
                                  and "no crawler for nosuchspider (2 queued)" in line), None),
                    "a progress line with both explanations", up)
    assert "0 pages" in line

    refused = wait_for(lambda: (answer := info(env, "private", "link"))["status"] != "running"
                       and answer, "the private crawl to end", up)
    assert (refused["status"], refused["funnel"]["filtered"], refused["reason"]) == (
        "complete", {"ssrf": 1}, "nothing fetched: 1 refused (ssrf 1)")
    waiting = info(env, "unknown", "nosuchspider")
    assert (waiting["status"], waiting["total_pending"], waiting["reason"]) == (
        "running", 1, NO_CRAWLER)
