"""Stop and expire as the site sees them: once the Redis Monitor has answered, no page of the
crawl reaches the site any more (beyond the requests already on the wire), and nothing of the
crawl is left queued, not even links found by pages that were in flight.

Real redis-server, a real crawler process, the Redis Monitor in this process, the generated
site on two loopback hosts throttled to 10 requests/s each, a crawl far larger than the test.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.redis_monitor.app import open_monitor
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig
from tests.support.addresses import REDIS_MONITOR_CRAWL
from tests.support.cluster import Cluster, running_cluster

pytestmark = pytest.mark.integration

HOSTS = REDIS_MONITOR_CRAWL.hosts(81, 82)
IN_FLIGHT_GRACE_S = 1.0
"""Requests dispatched before the stop may still reach the site this long after the answer."""
WATCH_S = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = SiteConfig(hosts=HOSTS, pages_per_host=400, links_per_page=8, page_bytes=600)
    with running_cluster(tmp_path_factory.mktemp("rm-crawl"), config) as cluster:
        for host in HOSTS:
            DomainConfig(cluster.client, cluster.frontier).set_throttle(
                host, DomainThrottle(window_s=1, hits=10))
        cluster.start_crawler("link", QUEUE_MODERATED="true")
        yield cluster


class Monitor:
    """The Redis Monitor running in a thread, and a reader of its answers."""

    def __init__(self, cluster: Cluster) -> None:
        prefix = f"rmc{uuid.uuid4().hex[:6]}"
        self.settings = load_settings("redis-monitor", environ={}, settings_file=None, overrides={
            "REDIS_URL": cluster.redis_server.url, "BUS_BACKEND": "redis",
            "KAFKA_TOPIC_PREFIX": prefix, "STATS_DUMP": 0})
        self.cluster = cluster
        self.bus = create_bus(self.settings)
        self.reader = self.bus.reader([f"{prefix}.outbound_firehose"], from_beginning=True)
        self.answers: list[dict[str, Any]] = []
        self.stop_event = threading.Event()

    def wait_answer(self, match: dict[str, Any], timeout_s: float) -> tuple[float, dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.answers += [message.value for message in self.reader.poll(100, 0.1)]
            for answer in self.answers:
                if all(answer.get(k) == v for k, v in match.items()):
                    return time.monotonic(), answer
        raise AssertionError(f"no answer matching {match} in {timeout_s} s: {self.answers}")


@pytest.fixture
def monitor(cluster: Cluster) -> Iterator[Monitor]:
    running = Monitor(cluster)
    with open_monitor(running.settings, logging.getLogger("rm-crawl-test")) as redis_monitor:
        thread = threading.Thread(target=redis_monitor.run, args=(running.stop_event.is_set,),
                                  daemon=True)
        thread.start()
        try:
            yield running
        finally:
            running.stop_event.set()
            thread.join(10)
            running.reader.close()
            running.bus.close()


def start_crawl(cluster: Cluster, crawlid: str) -> float:
    """Feed a crawl much larger than the test; returns when the site has served 15 of its pages."""
    started = time.monotonic()
    seed = {"url": cluster.site.site.url(HOSTS[0], "/p/0.html"), "appid": "rmtest",
            "crawlid": crawlid, "spiderid": "link", "maxdepth": 20}
    assert cluster.frontier.enqueue_many([seed], dedupe=True).queued == 1
    deadline = started + 30
    while sum(len(arrivals(cluster, host, started)) for host in HOSTS) < 15:
        assert time.monotonic() < deadline, "the crawl did not start"
        time.sleep(0.05)
    return started


def arrivals(cluster: Cluster, host: str, start_s: float, end_s: float = float("inf")) -> list[float]:
    return [t for t in cluster.site.arrivals_snapshot().get(host, []) if start_s <= t < end_s]


def after(cluster: Cluster, moment_s: float) -> int:
    return sum(len(arrivals(cluster, host, moment_s)) for host in HOSTS)


def test_a_stopped_crawl_stops_reaching_the_site(cluster: Cluster, monitor: Monitor) -> None:
    crawlid = uuid.uuid4().hex
    start_crawl(cluster, crawlid)
    pending = cluster.frontier.crawl_info("link", "rmtest", crawlid).total_pending
    pipe = cluster.client.pipeline()
    JobWriter.from_settings(monitor.settings).queue_job(
        pipe, "stop", keys.stop_job("link", "rmtest", crawlid, "s1"),
        {"action": "stop", "appid": "rmtest", "spiderid": "link", "crawlid": crawlid,
         "uuid": "s1"})
    pipe.execute()
    answered_s, answer = monitor.wait_answer({"action": "stop", "uuid": "s1"}, 10)
    time.sleep(IN_FLIGHT_GRACE_S + WATCH_S)
    info = cluster.frontier.crawl_info("link", "rmtest", crawlid)
    assert answer["total_purged"] > 0 and pending > 0
    assert after(cluster, answered_s + IN_FLIGHT_GRACE_S) == 0
    assert (info.total_pending, info.in_flight) == (0, 0)  # in-flight pages' links refused


def test_an_expired_crawl_stops_reaching_the_site(cluster: Cluster, monitor: Monitor) -> None:
    crawlid = uuid.uuid4().hex
    pipe = cluster.client.pipeline()
    JobWriter.from_settings(monitor.settings).queue_timeout(
        pipe, "link", "rmtest", crawlid, int(time.time()) + 3)
    pipe.execute()
    start_crawl(cluster, crawlid)
    answered_s, answer = monitor.wait_answer({"action": "expired", "crawlid": crawlid}, 15)
    time.sleep(IN_FLIGHT_GRACE_S + WATCH_S)
    info = cluster.frontier.crawl_info("link", "rmtest", crawlid)
    assert answer["total_expired"] > 0
    assert after(cluster, answered_s + IN_FLIGHT_GRACE_S) == 0
    assert (info.total_pending, info.in_flight) == (0, 0)
