"""Real crawler processes of either engine on one Redis and one bus, for the crawl contract
suite (``tests/contract/``).

``CrawlRig(workdir, redis_url, engine)`` starts ``scrapy-cluster crawler --spider link`` (the
Scrapy engine) or ``... --engine fast`` processes with one environment, feeds crawls straight
into the frontier and reads a crawl's items from ``<prefix>.crawled_firehose``. Scrapy-named
settings (``DOWNLOAD_MAXSIZE``, ``RETRY_TIMES``, ...) are not cluster settings, so the
environment cannot set them: they go into a settings file (``SC_SETTINGS``) that both engines
read. Every wait is bounded and fails with the tail of the crawlers' logs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.settings import load_settings

ENGINES = ("scrapy", "fast")
APPID = "contract"
SPIDER = "link"
START_TIMEOUT_S = 30.0
COLLECT_TIMEOUT_S = 40.0

BASE_ENV = {
    "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true",  # the site is on loopback addresses
    "QUEUE_WINDOW": "0",  # unthrottled unless a domain gets its own limit
    "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": "http://127.0.0.1:1/",
    "SC_LOG_LEVEL": "WARNING", "REDIS_STREAM_LINGER_MS": "5", "STATS_CYCLE": "1",
    "CRAWLER_ACK_FLUSH_MS": "50",
}


def engine_command(engine: str) -> list[str]:
    """The crawler command line of ``engine``: the Scrapy engine is the default one."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}")
    command = [sys.executable, "-m", "scrapy_cluster", "crawler", "--spider", SPIDER]
    return command + (["--engine", "fast"] if engine == "fast" else [])


class CrawlRig:
    """Crawler processes of one engine sharing ``redis_url`` and one bus."""

    def __init__(self, workdir: Path, redis_url: str, engine: str, *, prefix: str,
                 bus: Mapping[str, Any] | None = None,
                 scrapy_settings: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.workdir, self.engine, self.prefix = workdir, engine, prefix
        workdir.mkdir(parents=True, exist_ok=True)
        bus = dict(bus or {"BUS_BACKEND": "redis"})
        overrides = {"REDIS_URL": redis_url, "KAFKA_TOPIC_PREFIX": prefix, **bus}
        self.settings = load_settings("crawler", environ={}, overrides=overrides)
        self.client = redis.Redis.from_url(redis_url)
        self.frontier = Frontier.from_settings(self.settings, self.client)
        settings_file = workdir / f"contract_settings_{uuid.uuid4().hex[:8]}.py"
        settings_file.write_text("".join(f"{name} = {value!r}\n"
                                         for name, value in (scrapy_settings or {}).items()))
        self.env = {**{k: v for k, v in os.environ.items() if k != "CRAWLER_ENGINE"},
                    **{k: str(v) for k, v in overrides.items()}, **BASE_ENV,
                    "SC_SETTINGS": str(settings_file), **(env or {})}
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []

    # --- processes --------------------------------------------------------------------------
    def start(self, **env: str) -> subprocess.Popen[bytes]:
        """One more crawler; returns once it wrote its first heartbeat."""
        log_path = self.workdir / f"crawler-{self.engine}-{len(self.processes)}.log"
        before = set(self.client.scan_iter("stats:crawler:self:*"))
        with open(log_path, "ab") as log:
            process = subprocess.Popen(engine_command(self.engine), env={**self.env, **env},
                                       cwd=self.workdir, stdout=log, stderr=log,
                                       start_new_session=True)
        self.processes.append((process, log_path))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not set(self.client.scan_iter("stats:crawler:self:*")) - before:
            if process.poll() is not None:
                raise AssertionError(f"{self.engine} crawler exited with {process.returncode}"
                                     f"\n{self.logs()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.engine} crawler sent no heartbeat within "
                                     f"{START_TIMEOUT_S:g} s\n{self.logs()}")
            time.sleep(0.05)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL, as a crash would: no shutdown, no lease handed back."""
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def stop(self, process: subprocess.Popen[bytes]) -> int | None:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        return process.returncode

    def close(self) -> None:
        for process, _ in self.processes:
            self.stop(process)
        self.client.close()

    def logs(self, tail_chars: int = 3000) -> str:
        return "\n".join(f"--- {path.name} (pid {process.pid}, exit {process.poll()}):\n"
                         f"{path.read_text(errors='replace')[-tail_chars:]}"
                         for process, path in self.processes)

    # --- crawls -----------------------------------------------------------------------------
    def feed(self, urls: str | Iterable[str], **fields: Any) -> str:
        """One crawl of ``urls`` (the seeds, depth 0) with the crawl ``fields``; its crawlid."""
        crawlid = uuid.uuid4().hex
        seeds = [urls] if isinstance(urls, str) else list(urls)
        requests = [{"url": url, "appid": APPID, "crawlid": crawlid, "spiderid": SPIDER,
                     "priority": 5, **fields} for url in seeds]
        result = self.frontier.enqueue_many(requests, dedupe=True)
        assert result.queued == len(seeds), result
        return crawlid

    def drained(self, crawlid: str) -> bool:
        """Nothing of the crawl queued or leased: every page's links were queued and its
        items confirmed by the bus (a lease is acknowledged only then)."""
        info = self.frontier.crawl_info(SPIDER, APPID, crawlid)
        return info.total_pending == 0 and info.in_flight == 0

    def leases(self) -> int:
        return int(self.client.zcard(keys.frontier_leases()))

    def delivered_so_far(self, crawlid: str) -> list[dict[str, Any]]:
        """The items of ``crawlid`` on the crawled topic now (read from the beginning until
        one read finds nothing more), whether or not the crawl is over."""
        bus = create_bus(self.settings)
        consumer = bus.consumer([topics.crawled_firehose(self.prefix)],
                                group=f"contract-{uuid.uuid4().hex}", from_beginning=True)
        found: list[dict[str, Any]] = []
        try:
            for _ in range(1000):
                messages = consumer.poll(500, 0.3)
                if not messages:
                    return found
                found += [m.value for m in messages
                          if m.value and m.value.get("crawlid") == crawlid]
            raise AssertionError("the crawled topic never ran dry")
        finally:
            consumer.close()
            bus.close()

    def collect(self, crawlid: str, *, expected_urls: Iterable[str] = (),
                timeout_s: float = COLLECT_TIMEOUT_S) -> list[dict[str, Any]]:
        """Every item of ``crawlid`` on the crawled topic, read from the beginning, once the
        crawl is drained, ``expected_urls`` all came and one more read found nothing new."""
        expected = set(expected_urls)
        bus = create_bus(self.settings)
        consumer = bus.consumer([topics.crawled_firehose(self.prefix)],
                                group=f"contract-{uuid.uuid4().hex}", from_beginning=True)
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                complete = expected <= {item["url"] for item in found} and self.drained(crawlid)
                messages = consumer.poll(500, 0.2)
                found += [m.value for m in messages
                          if m.value and m.value.get("crawlid") == crawlid]
                if complete and not messages:
                    return found
                if time.monotonic() > deadline:
                    missing = expected - {item["url"] for item in found}
                    info = self.frontier.crawl_info(SPIDER, APPID, crawlid).as_dict()
                    raise AssertionError(
                        f"crawl {crawlid} not complete after {timeout_s:g} s: {len(found)} "
                        f"items, missing {sorted(missing)}, frontier {info}\n{self.logs()}")
        finally:
            consumer.close()
            bus.close()


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(0.02)
