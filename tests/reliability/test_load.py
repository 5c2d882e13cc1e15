"""Load: 100,000 crawl requests fed as fast as one bus producer goes, while a crawl runs.

Two ``kafka-monitor run`` processes share the incoming topic; one ``crawler --spider link``
process crawls a small generated site (fed through the bus as a crawl request just before
the flood, its pages slowed down so that it is still crawling during it). The 100,000
requests are distinct URLs over 1,000 hosts ``10.255.x.y`` (routed nowhere), in 10 crawls of
spider ``load``, which no crawler runs: they stay queued and are never fetched.

Properties: every one of the 100,000 is on the frontier (the crawls' counts sum to exactly
100,000) and the monitors counted no failure; the monitors' group lag returns to 0; the
growth of Redis ``used_memory`` per request is within the frontier memory benchmark's
figure (docs/benchmarks.md, "Frontier": 205.8 bytes per queued request at 10,000 domains,
12.3 per fingerprint) plus a margin; the site crawl fetched pages meanwhile. The feed rate,
the time until the lag is 0 and the bytes per request are printed for docs/reliability.md.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.processes import Processes
from tests.support.services import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REQUESTS = 100_000
DOMAINS = 1_000
CRAWLS = 10
SPIDER = "load"  # no crawler runs this spider: its requests stay queued
APPID = "loadapp"
# docs/benchmarks.md, "Frontier": a queued request at 10,000 domains, plus its fingerprint
BENCHMARK_BYTES_PER_REQUEST = 205.8 + 12.3
MARGIN = 1.25
FEED_TARGET_S = 10.0
SESSION_TIMEOUT_MS = load_settings("kafka-monitor", environ={})[
    "KAFKA_CONSUMER_SESSION_TIMEOUT_MS"]
SITE = SiteConfig(pages_per_host=20, page_delay_s=0.3)


def load_request(index: int, crawlids: list[str]) -> dict[str, Any]:
    domain = index % DOMAINS
    return {"url": f"http://10.255.{domain // 250}.{domain % 250 + 1}/item/{index}",
            "appid": APPID, "crawlid": crawlids[index % CRAWLS], "spiderid": SPIDER}


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str,
             state: Callable[[], Any] = lambda: None) -> float:
    """Seconds it took; fails after ``timeout_s`` saying ``state()``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"timed out waiting for {what}: {state()}"
        time.sleep(0.5)
    return time.monotonic() - started


def lifetime(client: redis.Redis, name: str) -> int:
    return int(client.get(f"stats:kafka-monitor:{name}:lifetime") or 0)


def bus_stream_bytes(client: redis.Redis) -> int:
    """Memory of the Redis Streams bus's streams (0 on Kafka): not the frontier's."""
    members: Any = client.smembers(keys.bus_topics())
    topics = [member.decode() for member in members]
    return sum(int(client.memory_usage(keys.bus_stream(topic), samples=0) or 0)
               for topic in topics)


def frontier_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"]) - bus_stream_bytes(client)


@pytest.fixture
def env(bus_backend: tuple[str, dict[str, Any]], redis_url: str,
        tmp_path: Path) -> dict[str, str]:
    name = uuid.uuid4().hex[:8]
    # the production session timeout: the suite's 3 s (quick group joins) expires under this
    # load on two cores, and the group then rebalances over and over
    values = {**bus_backend[1], "KAFKA_CONSUMER_SESSION_TIMEOUT_MS": SESSION_TIMEOUT_MS,
              "REDIS_URL": redis_url, "KAFKA_INCOMING_TOPIC": f"load-{name}.in",
              "KAFKA_TOPIC_PREFIX": f"load-{name}", "KAFKA_GROUP": f"load-{name}",
              "STATS_DUMP": 0, "LOG_LEVEL": "WARNING", "SC_LOG_LEVEL": "WARNING",
              "SC_DATA_DIR": str(tmp_path / "no-cluster"),
              "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "QUEUE_WINDOW": 0,
              "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": "http://127.0.0.1:1/",
              "DOWNLOAD_TIMEOUT": 10}
    return {key: str(value) for key, value in values.items()}


@pytest.fixture
def site() -> Iterator[SiteServer]:
    server = SiteServer(SITE, free_port()).start()
    yield server
    server.stop()


def test_hundred_thousand_requests_fed_while_crawling_are_all_queued(
        bus_backend: tuple[str, dict[str, Any]], env: dict[str, str], redis_client: redis.Redis,
        site: SiteServer, tmp_path: Path) -> None:
    settings = load_settings("kafka-monitor", environ=env)
    topic = str(settings["KAFKA_INCOMING_TOPIC"])
    bus = create_bus(settings)
    bus.reader([topic]).close()  # creates the topic
    processes = Processes(tmp_path)
    try:
        for _ in range(2):
            processes.start(env, "kafka-monitor", "run")
        processes.start(env, "crawler", "--spider", "link")
        producer = bus.producer()
        site_crawlid = uuid.uuid4().hex[:16]
        producer.produce(topic, {"url": site.site.url("127.0.0.2", "/p/0.html"),
                                 "appid": APPID, "crawlid": site_crawlid, "maxdepth": 3})
        producer.flush()
        frontier = Frontier.from_settings(settings, redis_client)
        wait_for(lambda: lifetime(redis_client, "total") == 1, 60, "the site crawl queued")
        wait_for(lambda: sum(frontier.crawl_funnels("link", [site_crawlid])[
            site_crawlid].fetched.values()) > 0, 60, "the crawler's first page")
        memory_before = frontier_memory(redis_client)

        crawlids = [f"load-{uuid.uuid4().hex[:8]}-{n}" for n in range(CRAWLS)]
        started = time.monotonic()
        for index in range(REQUESTS):
            producer.produce(topic, load_request(index, crawlids))
        producer.flush(120)
        feed_s = time.monotonic() - started
        producer.close()

        group = str(settings["KAFKA_GROUP"])
        drained_s = feed_s + wait_for(
            lambda: bus.group_lag(topic, group) == 0, 300, "the monitors' lag back to 0",
            lambda: (bus.group_lag(topic, group), lifetime(redis_client, "total")))
        wait_for(lambda: lifetime(redis_client, "total") >= REQUESTS + 1, 60, "stats written")
        queued = sum(frontier.crawl_info(SPIDER, APPID, crawlid).total_pending
                     for crawlid in crawlids)
        memory_growth = frontier_memory(redis_client) - memory_before
        fetched = sum(frontier.crawl_funnels("link", [site_crawlid])[site_crawlid]
                      .fetched.values())
        alive = [process.poll() is None for process, _ in processes.processes]
        print(f"{bus_backend[0]}: fed {REQUESTS} in {feed_s:.1f} s ({REQUESTS / feed_s:,.0f}/s, "
              f"target {FEED_TARGET_S:.0f} s); lag 0 after {drained_s:.1f} s; queued {queued}; "
              f"memory {memory_growth / REQUESTS:.1f} B/request; site pages fetched {fetched}; "
              f"monitor total {lifetime(redis_client, 'total')} fail "
              f"{lifetime(redis_client, 'fail')}")
        assert alive == [True, True, True], processes.logs()
        assert queued == REQUESTS
        assert lifetime(redis_client, "total") == REQUESTS + 1
        assert lifetime(redis_client, "fail") == 0
        assert memory_growth / REQUESTS <= BENCHMARK_BYTES_PER_REQUEST * MARGIN
        assert fetched > 1
    finally:
        processes.stop_all()
        bus.close()
