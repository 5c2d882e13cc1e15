"""Crawls of a site written the way real sites are (``sitegen/relative_site.py``: root-relative
and relative hrefs, ``..``, ``./``, query strings, fragments, percent-encoded names, links that
are not http), judged from the site's own request log: both engines fetch exactly the pages a
reference resolution of every href reaches, each once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urldefrag, urljoin

import pytest
import redis

from scrapy_cluster.sitegen.relative_site import (
    SEED_PATH,
    RelativeSite,
    RelativeSiteConfig,
    RelativeSiteServer,
)
from tests.support.addresses import RELATIVE_SITE_CRAWL
from tests.support.cluster import FastCluster
from tests.support.services import free_port

pytestmark = pytest.mark.integration

HOSTS = RELATIVE_SITE_CRAWL.hosts(1, 2)
CONFIG = RelativeSiteConfig(hosts=HOSTS, children=3, leaves=1, page_bytes=3000)


@pytest.fixture
def site() -> Iterator[RelativeSiteServer]:
    with RelativeSiteServer(CONFIG, free_port()) as server:
        yield server


@pytest.fixture
def cluster(tmp_path: Path, redis_client: redis.Redis, redis_url: str,
            site: RelativeSiteServer) -> Iterator[FastCluster]:
    cluster = FastCluster(tmp_path, redis_url, {"BUS_BACKEND": "redis"}, site)  # type: ignore[arg-type]
    try:
        yield cluster
    finally:
        cluster.close()


def test_every_kind_of_href_is_on_the_page_and_the_expected_set_follows_from_them() -> None:
    site = RelativeSite(CONFIG, 8080)
    hrefs = site.hrefs(HOSTS[0])
    page = site.page(HOSTS[0]).decode()
    assert [f'href="{href.replace("&", "&amp;")}"' in page for href in hrefs] == \
        [True] * len(hrefs)
    assert {"/", "../0/", "./", "#top", "?page=2", "caf%C3%A9/", "a%20b.html", "0/",
            "item-0.html", "javascript:void(0)", f"http://{HOSTS[1]}:8080/t/"} <= set(hrefs)
    seed = site.url(HOSTS[0], SEED_PATH)
    one_hop = site.expected_urls(seed, 1)
    assert one_hop == {seed} | {
        site.url(HOSTS[0], path) for path in (
            "/", "/news/", "/about.html", "/help/faq.html#shipping", "/products/?sort=price",
            "/t/0/", "/t/1/", "/t/2/", "/t/item-0.html", "/0/", "/1/", "/t/?page=2",
            "/t/?page=2&sort=asc", "/t/caf%C3%A9/", "/t/a%20b.html")} | {
        site.url(HOSTS[1], "/t/")}
    assert len(site.expected_urls(seed, 2)) > 5 * len(one_hop)


def test_reference_resolution_of_the_hrefs_is_what_a_plain_join_gives() -> None:
    site = RelativeSite(CONFIG, 8080)
    page = site.url(HOSTS[0], "/t/3/")
    assert [urljoin(page, href) for href in ("../0/", "./", "?page=2", "#top")] == [
        site.url(HOSTS[0], "/t/0/"), page, page + "?page=2", page + "#top"]


@pytest.mark.parametrize("engine", ["fast", "scrapy"])
def test_a_depth_two_crawl_fetches_each_page_a_reference_resolution_reaches_once(
        cluster: FastCluster, site: RelativeSiteServer, engine: str) -> None:
    cluster.start(engine)
    seed = site.site.url(HOSTS[0], SEED_PATH)
    expected = site.site.expected_urls(seed, 2)
    crawlid, items = cluster.crawl(seed, expected, maxdepth=2)
    served = Counter({url: n for url, n in site.hits_snapshot().items()
                      if not url.endswith("/robots.txt")})
    assert served == Counter(urldefrag(url)[0] for url in expected)
    assert Counter(item["url"] for item in items) == Counter(expected)
    info = cluster.settled(crawlid)
    assert (info["total_pending"], info["in_flight"], info["leases"]) == (0, 0, 0)
