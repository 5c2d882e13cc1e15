"""The harness of the re-crawl tests (``tests/test_recrawl_nginx.py``): a ``RevisitSite`` on
nginx, a private redis-server, the Kafka Monitor and the Redis Monitor in threads, crawler
processes of either engine (``FastCluster``), and a ``Watch`` over the crawled and outbound
topics that stamps each message with the wall-clock time it was read (the clock nginx logs
with), so a topic message and an access-log record can be put in order.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.errors import BusUnavailableError
from tests.support.addresses import RECRAWL_NGINX
from tests.support.cluster import FastCluster
from tests.support.monitors import threaded_monitors
from tests.support.nginx import find_nginx
from tests.support.revisit_site import (
    LogRecord,
    Mutator,
    RevisitNginx,
    RevisitSite,
    RevisitSiteConfig,
    by_url,
    read_log,
)
from tests.support.services import RedisServer, free_port
from tests.support.starting import service_unavailable, started

# the scheduled crawl of the re-crawl tests (tests/test_recrawl_nginx.py, and its Redis restart
# in tests/reliability/test_recrawl_faults.py)
HOSTS = RECRAWL_NGINX.hosts(1, 2)
INTERVAL_S = 2
THROTTLE_HITS, THROTTLE_WINDOW_S = 4, 1
GRACE_S = 1.0
LEASE_TIMEOUT_S = 2
ENGINES = ["fast", "scrapy"]
CRAWLER_ENV = {"QUEUE_HITS": str(THROTTLE_HITS), "QUEUE_WINDOW": str(THROTTLE_WINDOW_S),
               "LEASE_TIMEOUT": str(LEASE_TIMEOUT_S)}
MONITOR_ENV: dict[str, Any] = {"CRAWL_COMPLETE_GRACE_S": GRACE_S, "LEASE_TIMEOUT": LEASE_TIMEOUT_S,
                               "QUEUE_HITS": THROTTLE_HITS, "QUEUE_WINDOW": THROTTLE_WINDOW_S}
SCHEDULE_SITE = RevisitSiteConfig(HOSTS, pages_per_host=6, links_per_page=3)

PREFIX = "recrawl"
APPID = "recrawl"
WAIT_S = 45.0
MONITOR_SETTINGS: dict[str, Any] = {
    "BUS_BACKEND": "redis", "KAFKA_TOPIC_PREFIX": PREFIX, "STATS_DUMP": 0,
    "CIRCUIT_BREAKER_MIN_RESPONSES": 100_000, "REDIS_LOCK_EXPIRATION": 2}


class Watch:
    """The crawled and outbound topics, each message kept with its read time (epoch s, the
    clock nginx logs with); feeds requests to the Kafka Monitor."""

    def __init__(self, settings: Any) -> None:
        self.settings, self.bus = settings, create_bus(settings)
        self.producer = self.bus.producer()
        self.readers = {kind: self.bus.reader([name], from_beginning=True) for kind, name in (
            ("items", topics.crawled_firehose(PREFIX)), ("answers", topics.outbound_firehose(PREFIX)))}
        self.seen: dict[str, list[tuple[float, dict[str, Any]]]] = {"items": [], "answers": []}

    def feed(self, request: dict[str, Any]) -> None:
        self.producer.produce(topics.incoming(self.settings), request)
        self.producer.flush(10)

    def poll(self) -> None:
        for kind, reader in self.readers.items():
            try:
                batch = [message.value for message in reader.poll(500, 0.05) if message.value]
            except BusUnavailableError:  # Redis restarting (a fault test): read again later
                time.sleep(0.2)
                continue
            self.seen[kind] += [(time.time(), value) for value in batch]

    def until(self, predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            assert time.monotonic() < deadline, f"{what} not seen in {timeout_s} s"
            self.poll()

    def watch(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll()

    def items(self, crawlid: str) -> list[tuple[float, dict[str, Any]]]:
        return [(at, item) for at, item in self.seen["items"] if item.get("crawlid") == crawlid]

    def answers(self, crawlid: str, action: str) -> list[tuple[float, dict[str, Any]]]:
        return [(at, answer) for at, answer in self.seen["answers"]
                if answer.get("crawlid") == crawlid and answer.get("action") == action]

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()
        self.producer.close()
        self.bus.close()


@dataclass
class Rig:
    """One running re-crawl setup (``rig``): feeds crawls of ``APPID`` seeded at page 0 of
    the first host, asks the Redis Monitor, and reads nginx's log back."""

    site: RevisitSite
    nginx: RevisitNginx
    cluster: FastCluster
    watch: Watch
    mutator: Mutator
    grace_s: float
    redis: RedisServer

    def records(self) -> list[LogRecord]:
        assert self.nginx.access_log is not None
        return read_log(self.nginx.access_log)

    def fetches(self) -> dict[str, list[LogRecord]]:
        return by_url(self.records(), self.site.port)

    def feed(self, recrawl: dict[str, Any], **fields: Any) -> str:
        crawlid = uuid.uuid4().hex[:12]
        self.watch.feed({"url": self.site.url(self.site.config.hosts[0], "/p/0.html"), "appid": APPID,
                         "crawlid": crawlid, "spiderid": "link", "maxdepth": 3,
                         "recrawl": recrawl, **fields})
        return crawlid

    def wait_fetched(self, urls: set[str], times: int, timeout_s: float = WAIT_S) -> None:
        def done() -> bool:
            fetched = self.fetches()
            return all(len(fetched.get(url, ())) >= times for url in urls)
        self.watch.until(done, f"{times} fetch(es) of every page", timeout_s)

    def ask(self, action: str, crawlid: str) -> float:
        """Send ``action`` (``stop``, ``info``) for the crawl; the moment its answer was read."""
        uid = uuid.uuid4().hex
        self.watch.feed({"action": action, "appid": APPID, "spiderid": "link",
                         "crawlid": crawlid, "uuid": uid})
        found: list[float] = []

        def answered() -> bool:
            found[:] = [at for at, answer in self.watch.seen["answers"]
                        if answer.get("uuid") == uid]
            return bool(found)

        self.watch.until(answered, f"the {action} answer", 30)
        return found[0]

    def completed(self, crawlid: str) -> list[tuple[float, dict[str, Any]]]:
        """The crawl's complete notices once one came, after watching for a second one."""
        self.watch.until(lambda: bool(self.watch.answers(crawlid, "complete")),
                         f"the complete notice of {crawlid}")
        self.watch.watch(self.grace_s + 2.0)
        return self.watch.answers(crawlid, "complete")


@contextmanager
def monitors(redis_url: str, data_dir: Path, settings: dict[str, Any]) -> Iterator[Any]:
    """The Kafka Monitor and the Redis Monitor in threads (``MONITOR_SETTINGS`` and
    ``settings``); yields the Kafka Monitor's settings."""
    with threaded_monitors(redis_url, data_dir, {**MONITOR_SETTINGS, **settings}) as found:
        yield found


@contextmanager
def rig(workdir: Path, config: RevisitSiteConfig, settings: dict[str, Any], *,
        redis_persist: bool = False) -> Iterator[Rig]:
    """nginx serving ``config``'s site, a private redis-server (with AOF when
    ``redis_persist``, so a fault test can restart it on its data), both monitors (with
    ``settings``) and a ``FastCluster`` (crawlers started by the test), all stopped after."""
    binary = find_nginx()
    if binary is None:
        service_unavailable(RuntimeError("nginx is not installed (apt-get install nginx-light)"))
    workdir.chmod(0o755)
    site = RevisitSite(config, free_port(config.hosts[0]))
    server = started(RedisServer(workdir / "redis", persist=redis_persist))
    nginx = RevisitNginx(site, workdir / "nginx", binary=str(binary), status_port=free_port(),
                         access_log=workdir / "access.log")
    with ExitStack() as stack:
        stack.callback(server.stop)
        stack.enter_context(nginx)
        settings = stack.enter_context(monitors(server.url, workdir / "data", settings))
        cluster = FastCluster(workdir, server.url, {"BUS_BACKEND": "redis",
                                                    "KAFKA_TOPIC_PREFIX": PREFIX},
                              site)
        stack.callback(cluster.close)
        watch = Watch(settings)
        stack.callback(watch.close)
        yield Rig(site, nginx, cluster, watch, Mutator(site, workdir / "changes.log"),
                  float(settings.get("CRAWL_COMPLETE_GRACE_S", 3.0)), server)
