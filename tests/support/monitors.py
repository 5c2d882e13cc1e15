"""The Kafka Monitor and the Redis Monitor in tests: both in threads of this process beside a
crawler cluster (``running_monitors``), an application's end of the bus (``Api``: feeds
requests, reads crawled pages and answers), a crawl fed and waited for until it is over
(``run_crawl``), and the Redis Monitors alive (``monitors_up``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.kafka_monitor.app import open_monitor as open_kafka_monitor
from scrapy_cluster.redis_monitor.app import open_monitor as open_redis_monitor
from scrapy_cluster.settings import load_settings
from tests.support.cluster import Cluster

IDLE_S = 1.5
CRAWL_TIMEOUT_S = 60.0
MONITOR_OVERRIDES = {"BUS_BACKEND": "redis", "STATS_DUMP": 0,
                     # the generated site's special pages answer 500 on purpose: that must
                     # not pause their host mid-test
                     "CIRCUIT_BREAKER_MIN_RESPONSES": 100_000}


@contextmanager
def running_monitors(cluster: Cluster, data_dir: Path) -> Iterator[dict[str, Any]]:
    """The Kafka Monitor and the Redis Monitor in threads; yields the Kafka Monitor's settings."""
    with threaded_monitors(cluster.redis_server.url, data_dir, MONITOR_OVERRIDES) as settings:
        yield settings


@contextmanager
def threaded_monitors(redis_url: str, data_dir: Path,
                      overrides: dict[str, Any]) -> Iterator[Any]:
    """The Kafka Monitor and the Redis Monitor in threads, on ``redis_url`` with ``overrides``;
    yields the Kafka Monitor's settings; both stopped after."""
    overrides = {**overrides, "REDIS_URL": redis_url, "SC_DATA_DIR": str(data_dir)}
    stop = threading.Event()
    threads = []
    with ExitStack() as stack:
        for component, opener in (("kafka-monitor", open_kafka_monitor),
                                  ("redis-monitor", open_redis_monitor)):
            settings = load_settings(component, environ={}, settings_file=None,
                                     overrides=overrides)
            monitor = stack.enter_context(opener(settings, logging.getLogger(component)))
            thread = threading.Thread(target=monitor.run, args=(stop.is_set,), daemon=True)
            thread.start()
            threads.append(thread)
        try:
            yield load_settings("kafka-monitor", environ={}, settings_file=None,
                                overrides=overrides)
        finally:
            stop.set()
            for thread in threads:
                thread.join(15)


class Api:
    """Feeds requests to the Kafka Monitor and reads crawled pages and answers."""

    def __init__(self, settings: dict[str, Any] | Any) -> None:
        self.settings = settings
        self.bus = create_bus(settings)
        self.producer = self.bus.producer()
        prefix = str(settings["KAFKA_TOPIC_PREFIX"])
        self.pages = self.bus.reader([topics.crawled_firehose(prefix)], from_beginning=True)
        self.answers = self.bus.reader([topics.outbound_firehose(prefix)], from_beginning=True)
        self.items: list[dict[str, Any]] = []

    def feed(self, request: dict[str, Any]) -> None:
        self.producer.produce(topics.incoming(self.settings), request)
        self.producer.flush(10)

    def read_items(self) -> None:
        self.items += [m.value for m in self.pages.poll(500, 0.1) if m.value]

    def items_of(self, crawlid: str) -> list[dict[str, Any]]:
        return [item for item in self.items if item.get("crawlid") == crawlid]

    def ask_info(self, appid: str, crawlid: str) -> dict[str, Any]:
        uid = uuid.uuid4().hex
        self.feed({"action": "info", "appid": appid, "spiderid": "link", "crawlid": crawlid,
                   "uuid": uid})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for message in self.answers.poll(100, 0.1):
                if message.value and message.value.get("uuid") == uid:
                    return dict(message.value)
        raise AssertionError(f"no info answer for {crawlid}")

    def close(self) -> None:
        self.pages.close()
        self.answers.close()
        self.producer.close()
        self.bus.close()


def run_crawl(cluster: Cluster, api: Api, request: dict[str, Any], expected_items: int) -> str:
    """Feed ``request`` (a crawl) and wait until the frontier is idle for it, its items arrived
    and the crawler's funnel counts (written every STATS_CYCLE) show them delivered."""
    crawlid = request["crawlid"]
    api.feed(request)
    deadline, idle_since = time.monotonic() + CRAWL_TIMEOUT_S, None
    while True:
        assert time.monotonic() < deadline, f"crawl {crawlid} not over: {api.items_of(crawlid)}"
        api.read_items()
        info = cluster.frontier.crawl_info("link", request["appid"], crawlid)
        busy = info.total_pending or info.in_flight or len(api.items_of(crawlid)) < expected_items
        idle_since = None if busy else (idle_since or time.monotonic())
        delivered = cluster.frontier.crawl_funnels("link", [crawlid])[crawlid].delivered
        if idle_since and time.monotonic() - idle_since >= IDLE_S \
                and delivered >= len(api.items_of(crawlid)):
            return crawlid


def monitors_up(client: redis.Redis) -> list[str]:
    """Live Redis Monitors: their heartbeats (written after their first pass), each named like
    its member of the job group (``<machine>:<pid>-<random>``)."""
    members: Any = client.zrange(keys.heartbeat_index("redis-monitor"), 0, -1)
    return sorted(member.decode() for member in members)
