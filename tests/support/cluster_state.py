"""A small cluster state written into a real Redis through the components' own code, for the
tests that read the cluster back (the dashboard snapshot, the read budgets of ``stats.reader``).

``Scene(client, settings_for(redis_url))`` writes queued and leased requests of three crawls, a
domain throttle override, a halted domain, crawler responses by status, monitor heartbeats of a
live and a dead node, a node description, exception counts and a domain's last error.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import redis

from scrapy_cluster import keys
from scrapy_cluster.crawler.common.response_stats import ResponseStats
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from scrapy_cluster.frontier.model import DispatchView
from scrapy_cluster.frontier.pause import DomainPauses
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.settings import load_settings
from scrapy_cluster.stats import WindowedStats


def settings_for(redis_url: str, **overrides: Any) -> dict[str, Any]:
    """The Rest service's settings on ``redis_url`` and the Redis Streams bus."""
    return dict(load_settings("rest", environ={}, settings_file=None,
                              overrides={"REDIS_URL": redis_url, "BUS_BACKEND": "redis",
                                         **overrides}))


def request(url: str, crawlid: str, appid: str, **fields: Any) -> dict[str, Any]:
    """A crawl request of the ``link`` spider."""
    return {"url": url, "appid": appid, "crawlid": crawlid, "spiderid": "link", **fields}


class Scene:
    """A small cluster state written through the components' own code."""

    def __init__(self, client: redis.Redis, settings: dict[str, Any]) -> None:
        self.client, self.settings = client, settings
        self.frontier = Frontier.from_settings(settings, client)
        now_ms = int(time.time() * 1000)
        # a.test: 3 queued for crawl c1 (app-one, expires), 2 of b.test for c2 (app-two)
        self.frontier.enqueue_many(
            [request(f"http://a.test/{i}", "c1", "app-one") for i in range(3)]
            + [request(f"http://b.test/{i}", "c2", "app-two") for i in range(2)])
        self.popped = self.frontier.pop(DispatchView("link"), 2)  # one of each: moderated throttle
        # c.test was due ten seconds ago and nobody took it
        DomainConfig(client, self.frontier).set_throttle("c.test", DomainThrottle(1, 100))
        past = Frontier.from_settings(settings, client, clock=lambda: now_ms - 10_000)
        past.enqueue_many([request("http://c.test/1", "c3", "app-three")])
        pipe = client.pipeline()
        JobWriter.from_settings(settings).queue_timeout(pipe, "link", "app-one", "c1",
                                                        2_000_000_000)
        pipe.execute()
        DomainPauses(client).halt("b.test")
        stats = ResponseStats.from_settings(settings, client, hostname="host-1", spiderid="link")
        for status in (200, 200, 200, 504):
            stats.record("d.test", status)
        for status in (200, 200):
            stats.record("a.test", status)
        stats.flush()
        self.crawler_member = f"host-1:link:{stats.instance_id}"
        monitor = WindowedStats.from_settings(settings, client, key_prefix="stats:kafka-monitor")
        monitor.heartbeat("km-host", "11-aa")
        old = WindowedStats.from_settings(settings, client, key_prefix="stats:kafka-monitor",
                                          clock=lambda: time.time() - 500)
        old.heartbeat("km-host", "22-bb")
        client.set(keys.node_info("kafka-monitor", "km-host:11-aa"),
                   orjson.dumps({"version": "9.9", "cpu_percent": 1.5, "rss_bytes": 2048}))
        errors = WindowedStats.from_settings(settings, client,
                                             key_prefix=keys.crawler_error_stats())
        errors.increment("TimeoutError", amount=3)
        client.set(keys.crawler_domain_last_error("d.test"), orjson.dumps(
            {"at_ms": now_ms, "status": 504, "error": None, "url": "http://d.test/x"}))
