"""After ``scrapy-cluster migrate``, a real crawler process works off the original's state.

A Redis is filled as the original 1.2/1.3 wrote it; after the migration one crawler (one
request at a time) crawls the local test site, and the site's own request log shows that:
the imported requests of one domain arrive highest priority first and in the original's order
within a priority; requests of a crawl the original had stopped are never fetched; and of the
URLs the original's dupefilter had seen, the one named in ``--seen-urls`` is not fetched and
the one still queued is fetched once, although a page of the crawl links to both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from scrapy_cluster.sitegen.site import SiteConfig
from tests.support.addresses import MIGRATE_CRAWL
from tests.support.cluster import Cluster
from tests.support.migration import (
    LoggingSite,
    OriginalRedis,
    api_request,
    crawl_until_quiet,
    link_request,
    member,
    run_migrate,
    score,
)
from tests.support.services import RedisServer, free_port
from tests.support.starting import started

pytestmark = pytest.mark.integration

ORDERED, LINKED = MIGRATE_CRAWL.hosts(81, 82)
PRIORITIES = (5, 90, 20, 90, 20, 5, 50)
GRAPH = (((LINKED, 0), ((LINKED, 1), (LINKED, 2), (LINKED, 3))),
         *(((ORDERED, n), ()) for n in range(len(PRIORITIES))),
         ((LINKED, 4), ()), ((LINKED, 5), ()))




def _original_state(original: OriginalRedis, site: LoggingSite, tmp: Path) -> tuple[list[str], Path]:
    """Fills the original's keys; returns the expected order of ORDERED and the seen-urls file."""
    page = site.site.page_url
    ordered = [api_request(page((ORDERED, n)), f"order-{n % 2}", p) for n, p in enumerate(PRIORITIES)]
    original.queue("link", f"{ORDERED}.", *ordered)
    original.queue("link", f"{LINKED}.",
                   api_request(page((LINKED, 0)), "seen", 50, maxdepth=1),
                   link_request(page((LINKED, 2)), "seen", 40, curdepth=1, maxdepth=1),
                   api_request(page((LINKED, 4)), "stopped", 60),
                   link_request(page((LINKED, 5)), "stopped", 60))
    original.dupefilter("link", "seen", [page((LINKED, 1)), page((LINKED, 2))], extra_digests=2)
    original.stop("link", "app", "stopped")
    seen = tmp / "seen.jsonl"
    seen.write_bytes(orjson.dumps({"url": page((LINKED, 1)), "crawlid": "seen"}) + b"\n")
    return [r["url"] for r in sorted(ordered, key=lambda r: (score(r), member(r)))], seen




@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoggingSite, list[str]]]:
    tmp = tmp_path_factory.mktemp("migrate-crawl")
    server = started(RedisServer(tmp / "redis"))
    site = LoggingSite(SiteConfig(hosts=(ORDERED, LINKED), graph=GRAPH), free_port()).start()
    cluster = Cluster(tmp, server, site)
    try:
        order, seen = _original_state(OriginalRedis(cluster.client), site, tmp)
        run_migrate("--from", server.url, "--seen-urls", str(seen))
        cluster.start_crawler("link", CRAWLER_CONCURRENCY="1", CRAWLER_PER_DOMAIN_CONCURRENCY="1",
                              SCHEDULER_BUFFER_SIZE="1")
        page = site.site.page_url
        crawl_until_quiet(site, {*order, page((LINKED, 0)), page((LINKED, 2)),
                                  page((LINKED, 3))})
        yield site, order
    finally:
        for process in cluster.processes:
            cluster.stop(process)
        site.stop()
        server.stop()


def test_imported_requests_are_fetched_by_priority_then_in_the_original_order(
        crawled: tuple[LoggingSite, list[str]]) -> None:
    site, order = crawled
    assert [url for url in site.requested if f"//{ORDERED}:" in url] == order


def test_requests_of_a_crawl_the_original_stopped_are_never_fetched(
        crawled: tuple[LoggingSite, list[str]]) -> None:
    site, _ = crawled
    hits = site.hits_snapshot()
    assert [hits[site.site.page_url((LINKED, n))] for n in (4, 5)] == [0, 0]


def test_urls_the_original_had_seen_are_not_fetched_again(
        crawled: tuple[LoggingSite, list[str]]) -> None:
    site, _ = crawled
    hits = site.hits_snapshot()
    # 1: fetched by the original (--seen-urls); 2: still queued there; 3: new. Page 0 links to all.
    assert [hits[site.site.page_url((LINKED, n))] for n in (0, 1, 2, 3)] == [1, 0, 1, 1]
