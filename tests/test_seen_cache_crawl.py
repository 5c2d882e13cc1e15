"""The seen cache in real crawls, both engines: on a site where every page links to every
page, the crawl fetches each page once, its funnel is exact, and the repeated links never
reach Redis (counted by the server: the dupefilter reads inside the enqueue script).

Real redis-server (private: its command statistics are the measure), Redis Streams bus,
real crawler processes, the generated site."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.addresses import SEEN_CACHE_CRAWL
from tests.support.cluster import FastCluster
from tests.support.services import free_port

pytestmark = pytest.mark.integration

HOST = SEEN_CACHE_CRAWL.host(97)
PAGES = 12
CLIQUE = tuple(((HOST, page), tuple((HOST, link) for link in range(PAGES)))
               for page in range(PAGES))
"""Page i links to every page, itself included: 12 x 12 = 144 links, 12 distinct."""


@pytest.fixture(scope="module")
def clique_site() -> Iterator[SiteServer]:
    with SiteServer(SiteConfig(hosts=(HOST,), graph=CLIQUE, page_bytes=600),
                    free_port()) as server:
        yield server


@pytest.mark.parametrize("engine", ["fast", "scrapy"])
def test_repeated_links_skip_redis_and_the_funnel_stays_exact(
        engine: str, tmp_path: Path, private_redis, clique_site: SiteServer) -> None:  # type: ignore[no-untyped-def]
    cluster = FastCluster(tmp_path, private_redis.url, {"BUS_BACKEND": "redis"}, clique_site)
    try:
        admin = redis.Redis.from_url(private_redis.url)
        cluster.start(engine, CRAWLER_CONCURRENCY="1", CONCURRENT_REQUESTS="1")
        before = clique_site.hits_snapshot()
        admin.config_resetstat()
        seed = clique_site.site.page_url((HOST, 0))
        expected = {clique_site.site.page_url((HOST, page)) for page in range(PAGES)}
        crawlid, items = cluster.crawl(seed, expected, maxdepth=3)
        info = cluster.settled(crawlid)
        hits = clique_site.hits_snapshot() - before
        page_hits = {url: n for url, n in hits.items() if not url.endswith("/robots.txt")}
        assert sorted(item["url"] for item in items) == sorted(expected)
        assert set(page_hits.values()) == {1} and len(page_hits) == PAGES
        funnel = cluster.frontier.crawl_funnels("link", [crawlid])[crawlid].as_dict()
        # the seed (fed with dedupe) + 144 links; 12 queued; every other link a duplicate
        assert (funnel["submitted"], funnel["queued"], funnel["deduplicated"]) == (145, 12, 133)
        assert (funnel["fetched"], funnel["delivered"]) == ({"200": PAGES}, PAGES)
        assert info["in_flight"] == 0 and info["total_pending"] == 0
        dupefilter_reads = int(admin.info("commandstats").get("cmdstat_hget", {}).get("calls", 0))
        # without the cache every one of the 144 links reads its dupefilter bucket; with it a
        # link reaches Redis once per crawler (12), plus the scripts' other HGETs (crawl
        # status, a few per batch)
        assert dupefilter_reads < 60, dupefilter_reads
        admin.close()
    finally:
        cluster.close()
