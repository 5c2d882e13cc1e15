"""The fast engine end to end: ``scrapy-cluster crawler --engine fast`` processes, a real
redis-server, the real bus (both backends) and the generated test site."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.addresses import FAST_ENGINE_CRAWL
from tests.support.cluster import FastCluster
from tests.support.hostile import HostilePages, HostileSizes
from tests.support.services import free_port
from tests.support.spiders import HANDOFF_SPIDER

pytestmark = pytest.mark.integration

SLOW_HOST, SLOW_OTHER_HOST = FAST_ENGINE_CRAWL.hosts(5, 6)


@pytest.fixture(scope="module")
def site() -> Iterator[SiteServer]:
    with SiteServer(SiteConfig(huge_page_bytes=300_000, slow_page_s=0.2), free_port()) as server:
        yield server


@pytest.fixture(scope="module")
def slow_site() -> Iterator[SiteServer]:
    with SiteServer(SiteConfig(hosts=(SLOW_HOST, SLOW_OTHER_HOST), page_delay_s=0.5),
                    free_port()) as server:
        yield server


def make_cluster(tmp_path: Path, redis_url: str, bus: dict[str, Any],
                 site: SiteServer) -> Iterator[FastCluster]:
    cluster = FastCluster(tmp_path, redis_url, bus, site)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster(tmp_path: Path, redis_client: redis.Redis, redis_url: str,
            bus_backend: tuple[str, dict[str, Any]], site: SiteServer) -> Iterator[FastCluster]:
    """One test per bus backend, on a flushed Redis."""
    yield from make_cluster(tmp_path, redis_url, bus_backend[1], site)


@pytest.fixture
def redis_cluster(tmp_path: Path, redis_client: redis.Redis, redis_url: str,
                  site: SiteServer) -> Iterator[FastCluster]:
    """The Redis Streams bus only (for the tests whose subject is not the bus)."""
    yield from make_cluster(tmp_path, redis_url, {"BUS_BACKEND": "redis"}, site)


def test_depth_two_crawl_fetches_each_expected_page_once_and_leaves_nothing_queued(
        cluster: FastCluster) -> None:
    cluster.start()
    seed = cluster.site.site.url("127.0.0.2", "/p/0.html")
    expected = cluster.site.site.expected_urls(seed, 2)
    crawlid, items = cluster.crawl(seed, expected, maxdepth=2)
    info = cluster.settled(crawlid)
    assert (Counter(item["url"] for item in items), info["total_pending"], info["in_flight"],
            info["leases"]) == (Counter(dict.fromkeys(expected, 1)), 0, 0, 0)


def test_the_funnel_and_the_status_stats_count_fetches_and_deliveries(
        redis_cluster: FastCluster) -> None:
    redis_cluster.start()
    seed = redis_cluster.site.site.url("127.0.0.3", "/p/0.html")
    expected = redis_cluster.site.site.expected_urls(seed, 1)
    crawlid, _ = redis_cluster.crawl(seed, expected, maxdepth=1)
    redis_cluster.settled(crawlid)
    funnel = redis_cluster.frontier.crawl_funnels("link", [crawlid])[crawlid]
    status_key = keys.crawler_domain_last_statuses("127.0.0.3")
    deadline = time.monotonic() + 10  # statuses are written every STATS_CYCLE (1 s here)
    while b"200" not in redis_cluster.client.lrange(status_key, 0, -1) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (funnel.fetched, funnel.delivered, funnel.filtered.get("maxdepth", 0) > 0,
            b"200" in redis_cluster.client.lrange(status_key, 0, -1)) == \
        ({"200": len(expected)}, len(expected), True, True)


def comparable(item: dict[str, Any]) -> dict[str, Any]:
    """An item without what differs between two fetches of one page (time, crawl id, the
    server's Date header)."""
    headers = {k: v for k, v in (item.get("response_headers") or {}).items() if k != "Date"}
    return {**item, "timestamp": None, "crawlid": None, "response_headers": headers}


def test_items_equal_the_scrapy_crawlers_for_the_same_pages(redis_cluster: FastCluster) -> None:
    seed = redis_cluster.site.site.url("127.0.0.2", "/special/index.html")
    specials = {redis_cluster.site.site.url("127.0.0.2", path) for path in (
        "/special/index.html", "/special/missing.html", "/special/error500.html",
        "/special/latin1.html", "/special/huge.html", "/private/secret.html")}
    by_engine = {}
    for engine in ("fast", "scrapy"):
        process = redis_cluster.start(engine)
        _, items = redis_cluster.crawl(seed, specials, maxdepth=1)
        redis_cluster.stop(process)
        by_engine[engine] = {item["url"]: comparable(item) for item in items}
    assert by_engine["fast"] == by_engine["scrapy"]


def test_sigterm_exits_0_and_releases_the_held_leases(
        tmp_path: Path, redis_client: redis.Redis, redis_url: str,
        slow_site: SiteServer) -> None:
    for cluster in make_cluster(tmp_path, redis_url, {"BUS_BACKEND": "redis"}, slow_site):
        process = cluster.start(CRAWLER_CONCURRENCY="4")
        seed = slow_site.site.url(SLOW_HOST, "/p/0.html")
        crawlid = cluster.feed(seed, maxdepth=3)
        deadline = time.monotonic() + 20
        while cluster.client.zcard(keys.frontier_leases()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        held = cluster.client.zcard(keys.frontier_leases())
        code = cluster.stop(process)
        info = cluster.frontier.crawl_info("link", "test", crawlid).as_dict()
        assert (held >= 2, code, cluster.client.zcard(keys.frontier_leases()),
                info["in_flight"], info["total_pending"] > 0) == (True, 0, 0, 0, True)


def test_a_killed_crawlers_pages_are_crawled_by_another_once_its_leases_expire(
        tmp_path: Path, redis_client: redis.Redis, redis_url: str,
        slow_site: SiteServer) -> None:
    for cluster in make_cluster(tmp_path, redis_url, {"BUS_BACKEND": "redis"}, slow_site):
        env = {"LEASE_TIMEOUT": "2", "CRAWLER_CONCURRENCY": "4"}
        first = cluster.start(**env)
        seed = slow_site.site.url(SLOW_HOST, "/p/0.html")
        expected = slow_site.site.expected_urls(seed, 2)
        crawlid = cluster.feed(seed, maxdepth=2)
        deadline = time.monotonic() + 20
        while cluster.client.zcard(keys.frontier_leases()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.stop(first, signal.SIGKILL)
        held = cluster.client.zcard(keys.frontier_leases())
        cluster.start(**env)
        items = cluster.collect(crawlid, expected)
        info = cluster.settled(crawlid)
        assert (held > 0, {item["url"] for item in items}, info["leases"]) == \
            (True, expected, 0)


def test_the_fast_engine_refuses_a_spider_of_its_own(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scrapy_cluster", "crawler", "--engine", "fast", "--spider",
         HANDOFF_SPIDER],
        env={**os.environ, "REDIS_URL": "redis://127.0.0.1:1/0"},
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (result.returncode,
            "only the 'link' and 'wandering' spiders" in result.stderr) == (1, True)


WANDER_HOST = FAST_ENGINE_CRAWL.host(8)
WANDER_GRAPH = (((WANDER_HOST, 0), ((WANDER_HOST, 1),)),
                ((WANDER_HOST, 1), ((WANDER_HOST, 2), (WANDER_HOST, 3))),
                ((WANDER_HOST, 2), ((WANDER_HOST, 4),)),
                ((WANDER_HOST, 3), ((WANDER_HOST, 4),)),
                ((WANDER_HOST, 4), ((WANDER_HOST, 0),)))
"""Every walk from page 0: 0, 1, then 2 or 3 (the random draw), 4, whose only link (0) was
seen: four pages, steps 0-3."""


def wander_outcome(cluster: FastCluster, crawlid: str, items: list[dict[str, Any]],
                   hits: Counter[str]) -> dict[str, Any]:
    """What must be equal between engines for one wandering crawl: the pages fetched per the
    site's log, the items by step (the random branch named ``branch``), the URL funnel."""
    branch = {cluster.site.site.page_url((WANDER_HOST, n)): "branch" for n in (2, 3)}

    def named(text: str) -> str:
        for url, name in branch.items():
            text = text.replace(url, name).replace(url.rsplit("/", 1)[-1], f"{name}.html")
        return text

    funnel = cluster.frontier.crawl_funnels("wandering", [crawlid])[crawlid]
    by_step = sorted(items, key=lambda item: item["attrs"]["step"])
    return {
        "fetched": sorted(Counter({named(url): n for url, n in hits.items()}).items()),
        "items": [{**comparable(item), "url": named(item["url"]),
                   "response_url": named(item["response_url"]),
                   "body": named(item["body"]), "links": named(repr(item["links"])),
                   "request_headers": named(repr(item["request_headers"]))}
                  for item in by_step],
        "funnel": funnel,
    }


def test_the_wandering_spider_walks_as_the_scrapy_crawlers(
        tmp_path: Path, redis_client: redis.Redis, redis_url: str) -> None:
    config = SiteConfig(hosts=(WANDER_HOST,), graph=WANDER_GRAPH)
    with SiteServer(config, free_port()) as site:
        for cluster in make_cluster(tmp_path, redis_url, {"BUS_BACKEND": "redis"}, site):
            seed = site.site.page_url((WANDER_HOST, 0))
            pages = site.site.graph_urls()
            by_engine: dict[str, list[dict[str, Any]]] = {}
            for engine in ("fast", "scrapy"):
                process = cluster.start(engine, spider="wandering")
                by_engine[engine] = []
                for fields in ({}, {"deny_regex": [r"/p/3\.html$"]}, {"expires": 1}):
                    before = site.hits_snapshot()
                    crawlid = cluster.feed(seed, spiderid="wandering", **fields)
                    items = cluster.collect(crawlid, set(), count=1 if fields.get("expires")
                                            else 4)
                    cluster.settled(crawlid, spider="wandering")
                    hits = Counter({url: n for url, n in (site.hits_snapshot() - before).items()
                                    if url in pages})
                    by_engine[engine].append(wander_outcome(cluster, crawlid, items, hits))
                cluster.stop(process)
            assert by_engine["fast"] == by_engine["scrapy"]
            walk, denied, expired = by_engine["fast"]
            assert [(url.rsplit("/", 1)[-1], n) for url, n in walk["fetched"]] == \
                [("branch", 1), ("0.html", 1), ("1.html", 1), ("4.html", 1)]
            assert [(item["attrs"]["step"], item["url"].rsplit("/", 1)[-1], item["spiderid"],
                     item["status_code"]) for item in denied["items"]] == \
                [(0, "0.html", "wandering", 200), (1, "1.html", "wandering", 200),
                 (2, "branch", "wandering", 200), (3, "4.html", "wandering", 200)]
            assert "Referer" in denied["items"][3]["request_headers"]
            assert (denied["funnel"].queued, denied["funnel"].deduplicated,
                    denied["funnel"].fetched, denied["funnel"].delivered) == \
                (4, 1, {"200": 4}, 4)
            assert ([item["attrs"]["step"] for item in expired["items"]],
                    len(expired["fetched"])) == ([0], 1)


HOSTILE_HOST = FAST_ENGINE_CRAWL.host(7)
HOSTILE = ("/hostile/redirect-loop-a.html", "/hostile/redirect-loopback.html",
           "/hostile/redirect-metadata.html", "/hostile/bad-utf8.html",
           "/hostile/bogus-charset.html", "/hostile/mixed-encoding.html", "/hostile/large.html",
           "/hostile/large-chunked.html", "/hostile/gzip-bomb.html", "/hostile/many-links.html")


def outcome(item: dict[str, Any]) -> dict[str, Any]:
    """What must be equal between engines: the whole page item; for an error item all but the
    message of a download cut at DOWNLOAD_MAXSIZE (aiohttp's and Twisted's words differ)."""
    error = item.get("error")
    if error is not None and error["reason"] == "too_large":
        return {**comparable(item), "error": {**error, "message": None}}
    return comparable(item)


def test_hostile_pages_give_the_scrapy_crawlers_items(tmp_path: Path, redis_client: redis.Redis,
                                                      redis_url: str) -> None:
    sizes = HostileSizes(bomb_bytes=8_000_000, many_links=3_000, large_body_bytes=3_000_000)
    env = {"CRAWLER_ALLOW_PRIVATE_NETWORKS": "false", "DOWNLOAD_MAXSIZE": "1000000",
           "CRAWLER_ALLOWED_PRIVATE_NETWORKS": f'["{HOSTILE_HOST}/32"]',
           "REDIRECT_MAX_TIMES": "3"}
    with SiteServer(SiteConfig(hosts=(HOSTILE_HOST,), streamed=HostilePages(sizes)), free_port()) as site:
        for cluster in make_cluster(tmp_path, redis_url, {"BUS_BACKEND": "redis"}, site):
            by_engine = {}
            for engine in ("fast", "scrapy"):
                process = cluster.start(engine, **env)
                crawlid = uuid.uuid4().hex
                cluster.frontier.enqueue_many(
                    [{"url": site.site.url(HOSTILE_HOST, path), "appid": "test",
                      "crawlid": crawlid, "spiderid": "link", "priority": 5} for path in HOSTILE],
                    dedupe=True)
                items = cluster.collect(crawlid, set(), count=len(HOSTILE))
                cluster.stop(process)
                by_engine[engine] = {item["url"]: outcome(item) for item in items}
            assert by_engine["fast"] == by_engine["scrapy"]
