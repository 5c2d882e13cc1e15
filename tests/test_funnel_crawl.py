"""The URL funnel end to end: crawls fed through the real Kafka Monitor, fetched by a real
crawler process from the generated site, and an ``info`` request answered by the real Redis
Monitor. Judged by the site's own log and the messages on the crawled topic.

Real redis-server, Redis Streams bus, the two monitors in threads of this process.

The graph crawl (maxdepth 2, allowed_domains A and B, deny_regex ``/p/5.html``)::

    clicks 0            1                      2
           A0 ──▶ A1 ──────────────────▶ A2 (links A3, A0: cut by maxdepth)
            │      ├──▶ B2 (links B4: cut by maxdepth)
            │      └──▶ A0 (seen)
            ├──▶ B1 ──▶ B2 (seen), B3 (links A1, B4: cut by maxdepth), C2 (offsite)
            ├──▶ C1 (offsite), A5 (deny_regex)
            └──▶ A0 (itself: seen)

Every page has one shortest path and every repeated link is at the same depth or points back
at an ancestor, so the counts do not depend on fetch order.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from scrapy_cluster.sitegen.site import SiteConfig
from tests.support.addresses import FUNNEL_CRAWL
from tests.support.cluster import Cluster, running_cluster
from tests.support.monitors import Api, run_crawl, running_monitors

pytestmark = pytest.mark.integration

HOSTS = dict(zip("ABC", FUNNEL_CRAWL.hosts(91, 92, 93), strict=True))
LINKS = {"A0": "A1 B1 C1 A5 A0", "A1": "A2 B2 A0", "B1": "B2 B3 C2", "A2": "A3 A0",
         "B2": "B4", "B3": "A1 B4"}
GRAPH = tuple(((HOSTS[page[0]], int(page[1:])),
               tuple((HOSTS[link[0]], int(link[1:])) for link in links.split()))
              for page, links in LINKS.items())
SITE_CONFIG = SiteConfig(hosts=tuple(HOSTS.values()), graph=GRAPH, page_bytes=600,
                         huge_page_bytes=20_000, slow_page_s=0.2)
FETCHED_PAGES = ["A0", "A1", "B1", "A2", "B2", "B3"]
GRAPH_FUNNEL = {
    # 9 offered to the frontier (the seed; A0: A1 B1 A0; A1: A2 B2 A0; B1: B2 B3) + 8 filtered
    "submitted": 17, "queued": 6, "deduplicated": 3,
    "filtered": {"deny_regex": 1, "maxdepth": 5, "offsite": 2},
    "fetched": {"200": 6}, "retried": 0, "dropped": 0, "delivered": 6}
SPECIAL_FUNNEL = {
    # the index and its 7 links; doc.pdf denied, secret.html refused by robots.txt at fetch
    # time, error500.html answered 500 three times (RETRY_TIMES 2), the last one delivered
    "submitted": 8, "queued": 7, "deduplicated": 0,
    "filtered": {"deny_extensions": 1, "robots": 1},
    "fetched": {"200": 4, "404": 1, "500": 3}, "retried": 2, "dropped": 0, "delivered": 7}


def page_name(url: str) -> str:
    parts = urlsplit(url)
    letter = next(key for key, host in HOSTS.items() if host == parts.hostname)
    return letter + parts.path.removeprefix("/p/").removesuffix(".html")


@pytest.fixture(scope="module")
def funnel_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Api]]:
    tmp = tmp_path_factory.mktemp("funnel")
    with running_cluster(tmp, SITE_CONFIG) as cluster, \
            running_monitors(cluster, tmp / "data") as settings:
        cluster.start_crawler("link", STATS_CYCLE="1")
        api = Api(settings)
        try:
            yield cluster, api
        finally:
            api.close()


@pytest.fixture(scope="module")
def graph_crawl(funnel_cluster: tuple[Cluster, Api]) -> tuple[str, dict[str, Any], Any]:
    """The graph crawl: its crawlid, the info answer, and the site's hits during the crawl."""
    cluster, api = funnel_cluster
    before = cluster.site.hits_snapshot()
    seed = cluster.site.site.page_url((HOSTS["A"], 0))
    crawlid = run_crawl(cluster, api, {
        "url": seed, "appid": "funnel", "crawlid": uuid.uuid4().hex, "spiderid": "link",
        "maxdepth": 2, "allowed_domains": [HOSTS["A"], HOSTS["B"]],
        "deny_regex": [r"/p/5\.html$"]}, expected_items=len(FETCHED_PAGES))
    return crawlid, api.ask_info("funnel", crawlid), cluster.site.hits_snapshot() - before


@pytest.fixture(scope="module")
def special_crawl(funnel_cluster: tuple[Cluster, Api],
                  graph_crawl: Any) -> tuple[str, dict[str, Any], Any]:
    cluster, api = funnel_cluster
    before = cluster.site.hits_snapshot()
    seed = cluster.site.site.url(HOSTS["B"], "/special/index.html")
    crawlid = run_crawl(cluster, api, {
        "url": seed, "appid": "funnel", "crawlid": uuid.uuid4().hex, "spiderid": "link",
        "maxdepth": 1}, expected_items=7)
    return crawlid, api.ask_info("funnel", crawlid), cluster.site.hits_snapshot() - before


def page_hits(hits: Any, keep: Callable[[str], bool] = lambda url: True) -> int:
    return sum(n for url, n in hits.items() if not url.endswith("/robots.txt") and keep(url))


def test_the_graph_crawl_fetched_exactly_its_pages(graph_crawl: Any) -> None:
    _, _, hits = graph_crawl
    assert sorted(page_name(url) for url in hits if not url.endswith("/robots.txt")) == \
        sorted(FETCHED_PAGES)


def test_info_reports_the_graph_crawls_funnel(graph_crawl: Any) -> None:
    _, answer, _ = graph_crawl
    assert answer["funnel"] == GRAPH_FUNNEL


def test_the_funnel_matches_what_the_site_served_and_the_bus_carried(
        funnel_cluster: tuple[Cluster, Api], graph_crawl: Any, special_crawl: Any) -> None:
    _, api = funnel_cluster
    seen = []
    for crawlid, answer, hits in (graph_crawl, special_crawl):
        funnel = answer["funnel"]
        seen.append((sum(funnel["fetched"].values()), funnel["delivered"]))
        assert seen[-1] == (page_hits(hits), len(api.items_of(crawlid)))


def test_info_reports_statuses_retries_and_refusals_of_the_special_pages(
        special_crawl: Any) -> None:
    crawlid, answer, _ = special_crawl
    assert (answer["crawlid"], answer["total_pending"], answer["funnel"]) == \
        (crawlid, 0, SPECIAL_FUNNEL)
