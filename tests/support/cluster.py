"""The crawler end-to-end harness: a private redis-server, a generated site and crawler processes.

``running_cluster`` starts the redis-server and the site; ``Cluster.start_crawler`` starts
``scrapy-cluster crawler`` processes on them (Redis Streams bus) and ``Cluster.crawl`` feeds one
crawl and collects its items from the firehose. Used by every test that crawls through real
crawler processes.

``FastCluster`` does the same on a Redis, a bus (either backend) and a site the test gives,
with crawlers of either engine (``start("fast")`` or ``start("scrapy")``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.services import RedisServer, free_port
from tests.support.starting import started

BUS_LIMIT_BYTES = 1_000_000
COLLECT_TIMEOUT_S = 40.0
QUIET_S = 1.0
FAST_CLUSTER_PREFIX = "fastengine"
# Deep enough to reach every page: with several workers a page may first be reached by a longer
# path than breadth first would take, so partial depths are only exact at depth <= 2.
WHOLE_GRAPH_DEPTH = 30


class Cluster:
    """A redis-server, a site and crawler processes started with one environment."""

    def __init__(self, workdir: Path, redis_server: RedisServer, site: SiteServer) -> None:
        self.workdir, self.redis_server, self.site = workdir, redis_server, site
        self.client = redis.Redis.from_url(redis_server.url)
        self.env = {**os.environ, "REDIS_URL": redis_server.url, "BUS_BACKEND": "redis",
                    "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "QUEUE_WINDOW": "0",
                    "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": "http://127.0.0.1:1/",
                    "BUS_MAX_MESSAGE_BYTES": str(BUS_LIMIT_BYTES), "SC_LOG_LEVEL": "WARNING",
                    "REDIS_STREAM_LINGER_MS": "5", "RETRY_TIMES": "2", "DOWNLOAD_TIMEOUT": "10"}
        self.settings = load_settings("crawler", environ={}, overrides={
            "REDIS_URL": redis_server.url, "BUS_BACKEND": "redis"})
        self.frontier = Frontier.from_settings(self.settings, self.client)
        self.processes: list[subprocess.Popen[bytes]] = []

    def start_crawler(self, spider: str, **env: str) -> subprocess.Popen[bytes]:
        with open(self.workdir / f"crawler-{spider}-{len(self.processes)}.log", "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "scrapy_cluster", "crawler", "--spider", spider],
                env={**self.env, **env}, cwd=self.workdir, stdout=log, stderr=log,
                start_new_session=True)
        self.processes.append(process)
        self.wait_for_heartbeat(spider.rsplit(":", 1)[-1], process)
        return process

    def wait_for_heartbeat(self, spider_hint: str, process: subprocess.Popen[bytes]) -> None:
        before = set(self.client.scan_iter("stats:crawler:self:*"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"crawler exited with {process.returncode}")
            if set(self.client.scan_iter("stats:crawler:self:*")) - before:
                return
            time.sleep(0.1)
        raise AssertionError("crawler sent no heartbeat within 30 s")

    def stop(self, process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
        if process.poll() is None:
            os.killpg(process.pid, sig)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)

    def crawl(self, url: str, *, spiderid: str = "link", expected: int, **fields: Any) -> list[dict]:
        """Feed one crawl and return its items once ``expected`` arrived and the bus went quiet."""
        crawlid = uuid.uuid4().hex
        bus = create_bus(self.settings)
        consumer = bus.consumer([topics.crawled_firehose("demo")], group=crawlid,
                                from_beginning=False)
        consumer.poll(1, 0.2)
        request = {"url": url, "appid": "test", "crawlid": crawlid, "spiderid": spiderid,
                   "priority": 5, **fields}
        assert self.frontier.enqueue_many([request], dedupe=True).queued == 1
        found: list[dict] = []
        deadline, quiet_until = time.monotonic() + COLLECT_TIMEOUT_S, None
        while time.monotonic() < deadline:
            batch = [m.value for m in consumer.poll(200, 0.2)
                     if m.value and m.value.get("crawlid") == crawlid]
            found += batch
            if len(found) >= expected and quiet_until is None:
                quiet_until = time.monotonic() + QUIET_S
            if quiet_until is not None and time.monotonic() >= quiet_until:
                break
        consumer.close()
        bus.close()
        return found


@contextmanager
def running_cluster(tmp: Path, site_config: SiteConfig) -> Iterator[Cluster]:
    """A redis-server and the site for ``Cluster``; stops its crawlers, site and server."""
    server = started(RedisServer(tmp / "redis"))
    site = SiteServer(site_config, free_port()).start()
    cluster = Cluster(tmp, server, site)
    try:
        yield cluster
    finally:
        for process in cluster.processes:
            cluster.stop(process)
        site.stop()
        server.stop()


class FastCluster:
    """Crawler processes sharing one Redis and one bus, crawling ``site``."""

    def __init__(self, workdir: Path, redis_url: str, bus: dict[str, Any],
                 site: SiteServer) -> None:
        self.workdir, self.site = workdir, site
        self.client = redis.Redis.from_url(redis_url)
        overrides = {"REDIS_URL": redis_url, "KAFKA_TOPIC_PREFIX": FAST_CLUSTER_PREFIX, **bus}
        self.settings = load_settings("crawler", environ={}, overrides=overrides)
        self.frontier = Frontier.from_settings(self.settings, self.client)
        self.env = {**os.environ, **{k: str(v) for k, v in overrides.items()},
                    "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "QUEUE_WINDOW": "0",
                    "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": "http://127.0.0.1:1/",
                    "SC_LOG_LEVEL": "WARNING", "REDIS_STREAM_LINGER_MS": "5",
                    "RETRY_TIMES": "2", "DOWNLOAD_TIMEOUT": "10", "STATS_CYCLE": "1"}
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, engine: str = "fast", *, spider: str = "link",
              **env: str) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"crawler-{engine}-{len(self.processes)}.log", "ab")  # noqa: SIM115
        before = set(self.client.scan_iter("stats:crawler:self:*"))
        process = subprocess.Popen(
            [sys.executable, "-m", "scrapy_cluster", "crawler", "--engine", engine,
             "--spider", spider], env={**self.env, **env}, cwd=self.workdir, stdout=log,
            stderr=log, start_new_session=True)
        log.close()  # the child keeps its own copy
        self.processes.append(process)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"crawler exited with {process.returncode}")
            if set(self.client.scan_iter("stats:crawler:self:*")) - before:
                return process
            time.sleep(0.1)
        raise AssertionError("crawler sent no heartbeat within 30 s")

    def stop(self, process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
        if process.poll() is None:
            os.killpg(process.pid, sig)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        return process.returncode

    def feed(self, url: str, **fields: Any) -> str:
        crawlid = uuid.uuid4().hex
        request = {"url": url, "appid": "test", "crawlid": crawlid, "spiderid": "link",
                   "priority": 5, **fields}
        assert self.frontier.enqueue_many([request], dedupe=True).queued == 1
        return crawlid

    def collect(self, crawlid: str, expected: set[str], *, quiet_s: float = QUIET_S,
                count: int = 0) -> list[dict]:
        """Items of ``crawlid`` until every expected URL (and at least ``count`` items) came
        and the bus went quiet."""
        bus = create_bus(self.settings)
        consumer = bus.consumer([topics.crawled_firehose(FAST_CLUSTER_PREFIX)], group=crawlid,
                                from_beginning=True)
        found: list[dict] = []
        deadline, quiet_until = time.monotonic() + COLLECT_TIMEOUT_S, None
        try:
            while time.monotonic() < deadline:
                messages = consumer.poll(200, 0.2)
                found += [m.value for m in messages
                          if m.value and m.value.get("crawlid") == crawlid]
                if quiet_until is None and len(found) >= count \
                        and expected <= {item["url"] for item in found}:
                    quiet_until = time.monotonic() + quiet_s
                if quiet_until is not None and time.monotonic() >= quiet_until:
                    break
        finally:
            consumer.close()
            bus.close()
        return found

    def crawl(self, url: str, expected: set[str], **fields: Any) -> tuple[str, list[dict]]:
        crawlid = self.feed(url, **fields)
        return crawlid, self.collect(crawlid, expected)

    def settled(self, crawlid: str, timeout_s: float = 10.0, *,
                spider: str = "link") -> dict[str, Any]:
        """The crawl's info once nothing is leased any more (acks follow the bus flush)."""
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.frontier.crawl_info(spider, "test", crawlid).as_dict()
            leases = self.client.zcard(keys.frontier_leases())
            if (info["in_flight"] == 0 and leases == 0) or time.monotonic() > deadline:
                return {**info, "leases": leases}
            time.sleep(0.1)

    def close(self) -> None:
        for process in self.processes:
            self.stop(process)
        self.client.close()
