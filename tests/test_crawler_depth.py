"""Depth-exact crawls: ``maxdepth`` N fetches exactly the pages within N clicks of the seed,
whatever order the pages are found in. Judged by the crawled topic and the site's own log.

Real redis-server, real crawler processes (one, then three), and an explicit 26-page graph
(``GRAPH``) on three loopback hosts (``HOSTS``): A and C are not throttled, B allows one
request per 2 s. The seed A0 links to B1, B2 and B3 in that order,
so B3, which holds the short paths to C5 and B4, waits behind B's backlog and is fetched
about 4 s after the seed; the fast chain A0 -> A1 -> A2 finds C5 and B4 at 3 clicks within a
fraction of a second::

    clicks  0        1                  2             3
            A0 ──▶ A1 ────────────▶ A2 ───┬──▶ C5 ──▶ C6, C7   (C: fast, fetched at once)
             │                            └──▶ B4 ──▶ A7, A8   (B: slow, waits in B's queue)
             ├──▶ B1, B2   B's backlog: fetched at 0 s and 2 s
             └──▶ B3 ───── fetched at ~4 s ──▶ C5, B4 at 2 clicks

The other pages mix the three hosts and reach 5 clicks (depths beside ``LINKS``).

* First discovery wins (the bug): with maxdepth 3, C5 and B4 are crawled at depth 3 and
  their links are not followed, so C6, C7, A7 and A8 (3 clicks) are never fetched. Maxdepth 1
  and 2 cannot go wrong that way: the seed's own links are always found first from the seed,
  and reaching a 2-click page at depth 3 needs depth-2 pages to follow links, which they do
  only from maxdepth 3 on. Those cases check that depth-exact crawling changes nothing there.
* Depth-exact: C5, already fetched, is fetched once more at depth 2 and that item carries
  ``depth_upgrade: true``; B4, still queued, moves to depth 2 and is fetched once.
* A crawl deeper than any path of the site (``WHOLE_SITE_DEPTH`` > its 26 pages) never
  stops at the limit, so a smaller depth found later changes nothing: every page once.

A crawl is over when the frontier has had nothing queued or leased for it for ``IDLE_S``.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from scrapy_cluster.sitegen.site import GeneratedSite, GraphPage, SiteConfig
from tests.support.addresses import CRAWLER_DEPTH
from tests.support.cluster import Cluster, running_cluster

pytestmark = pytest.mark.integration

HOSTS = dict(zip("ABC", CRAWLER_DEPTH.hosts(71, 72, 73), strict=True))
SLOW_HOST = HOSTS["B"]
SLOW_THROTTLE = DomainThrottle(window_s=2.0, hits=1)
SEED = "A0"
LINKS = {  # page: its links in page order; clicks from A0
    "A0": "A1 A3 B1 B2 B3 C1",  # 0: B1, B2 queue on the slow host before B3
    "A1": "A2 A4",              # 1
    "A3": "A4 C2",              # 1
    "B1": "C3 A5",              # 1
    "B2": "A5 C4",              # 1
    "B3": "C5 B4 A4",           # 1: the short paths to C5 and B4
    "C1": "C2 C3",              # 1
    "A2": "C5 B4 A6",           # 2: the long paths to C5 and B4
    "A4": "A6",                 # 2
    "A5": "A9",                 # 2
    "C2": "C8",                 # 2
    "C3": "C8",                 # 2
    "C4": "A9",                 # 2
    "C5": "C6 C7",              # 2: found at 3 first, on the fast host
    "B4": "A7 A8",              # 2: found at 3 first, on the slow host
    "A6": "C10",                # 3
    "A7": "A10",                # 3: only through B4
    "A8": "A10",                # 3: only through B4
    "A9": "A10",                # 3
    "C6": "C9",                 # 3: only through C5
    "C7": "C9",                 # 3: only through C5
    "C8": "C9",                 # 3
    "A10": "A0",                # 4
    "C9": "C11",                # 4
    "C10": "C11",               # 4
    "C11": "",                  # 5
}
DEPTHS = pytest.mark.parametrize("maxdepth", [1, 2, 3, 4], ids=lambda depth: f"maxdepth-{depth}")
WHOLE_SITE_DEPTH = 50
IDLE_S = 1.5
CRAWL_TIMEOUT_S = 45.0


def graph_page(name: str) -> GraphPage:
    return HOSTS[name[0]], int(name[1:])


def page_order(name: str) -> tuple[str, int]:
    return name[0], int(name[1:])


GRAPH = tuple((graph_page(page), tuple(graph_page(link) for link in links.split()))
              for page, links in LINKS.items())
SITE_CONFIG = SiteConfig(hosts=tuple(HOSTS.values()), graph=GRAPH, page_bytes=600)


@dataclass(frozen=True)
class Outcome:
    """One crawl, pages named as in ``LINKS``."""

    crawled: list[str]
    """Pages with a status-200 item on the crawled topic, sorted."""
    fetched: Counter[str]
    """Requests per page in the site's log during the crawl."""
    upgraded: Counter[str]
    """Items with ``depth_upgrade: true``, per page."""


def page_name(url: str) -> str:
    parts = urlsplit(url)
    letter = next(key for key, host in HOSTS.items() if host == parts.hostname)
    return letter + parts.path.removeprefix("/p/").removesuffix(".html")


def within(site: GeneratedSite, maxdepth: int) -> list[str]:
    """The pages within ``maxdepth`` clicks of the seed, breadth first, sorted."""
    expected = site.expected_urls(site.page_url(graph_page(SEED)), maxdepth)
    return sorted(map(page_name, expected), key=page_order)


def crawl(cluster: Cluster, maxdepth: int) -> Outcome:
    """Feed one crawl from the seed and read its items until the frontier is idle for it."""
    crawlid, site = uuid.uuid4().hex, cluster.site
    bus = create_bus(cluster.settings)
    consumer = bus.consumer([topics.crawled_firehose("demo")], group=crawlid,
                            from_beginning=False)
    consumer.poll(1, 0.2)
    before = site.hits_snapshot()
    seed = {"url": site.site.page_url(graph_page(SEED)), "appid": "depth", "crawlid": crawlid,
            "spiderid": "link", "priority": 5, "maxdepth": maxdepth}
    assert cluster.frontier.enqueue_many([seed], dedupe=True).queued == 1
    items: list[dict] = []
    deadline, idle_since = time.monotonic() + CRAWL_TIMEOUT_S, None
    try:
        while idle_since is None or time.monotonic() - idle_since < IDLE_S:
            assert time.monotonic() < deadline, f"crawl not over within {CRAWL_TIMEOUT_S} s"
            items += [m.value for m in consumer.poll(200, 0.2)
                      if m.value and m.value.get("crawlid") == crawlid]
            info = cluster.frontier.crawl_info("link", "depth", crawlid)
            busy = info.total_pending or info.in_flight
            idle_since = None if busy else (idle_since or time.monotonic())
    finally:
        consumer.close()
        bus.close()
    fetched = site.hits_snapshot() - before
    return Outcome(
        crawled=sorted({page_name(i["url"]) for i in items if i.get("status_code") == 200},
                       key=page_order),
        fetched=Counter({page_name(url): n for url, n in fetched.items()
                         if url in site.site.graph_urls()}),
        upgraded=Counter(page_name(i["url"]) for i in items if i.get("depth_upgrade") is True))


@pytest.fixture(scope="module")
def depth_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("depth"), SITE_CONFIG) as cluster:
        DomainConfig(cluster.client, cluster.frontier).set_throttle(SLOW_HOST, SLOW_THROTTLE)
        yield cluster


@pytest.fixture(scope="module", params=[1, 3], ids=["1-crawler", "3-crawlers"])
def crawlers(request: pytest.FixtureRequest, depth_cluster: Cluster) -> Iterator[Cluster]:
    processes = [depth_cluster.start_crawler("link") for _ in range(request.param)]
    yield depth_cluster
    for process in processes:
        depth_cluster.stop(process)


@pytest.fixture(scope="module")
def crawls(crawlers: Cluster) -> Callable[[int], Outcome]:
    """The crawl with a given maxdepth, run once per crawler count and shared by its tests."""
    done: dict[int, Outcome] = {}

    def outcome(maxdepth: int) -> Outcome:
        if maxdepth not in done:
            done[maxdepth] = crawl(crawlers, maxdepth)
        return done[maxdepth]
    return outcome


def test_c5_and_b4_are_two_clicks_away_through_the_slow_host_and_three_through_the_fast() -> None:
    site = GeneratedSite(SITE_CONFIG, 1)
    depths = {page_name(url): depth
              for url, depth in site.click_depths(site.page_url(graph_page(SEED))).items()}
    a2_links = [page_name(url) for url in site.graph_links(site.page_url(graph_page("A2")))]
    assert ([depths[page] for page in ("B3", "A2", "C5", "B4")], a2_links[:2],
            len(depths), max(depths.values())) == ([1, 2, 2, 2], ["C5", "B4"], len(LINKS), 5)


@DEPTHS
def test_a_crawl_fetches_exactly_the_pages_within_maxdepth_clicks(
        crawls: Callable[[int], Outcome], crawlers: Cluster, maxdepth: int) -> None:
    expected, outcome = within(crawlers.site.site, maxdepth), crawls(maxdepth)
    assert {"missing": [page for page in expected if page not in outcome.crawled],
            "unexpected": [page for page in outcome.crawled if page not in expected]} == \
        {"missing": [], "unexpected": []}


@DEPTHS
def test_a_page_fetched_again_at_a_smaller_depth_is_fetched_twice_at_most_and_marked(
        crawls: Callable[[int], Outcome], maxdepth: int) -> None:
    outcome = crawls(maxdepth)
    fetched_twice = Counter({page: 1 for page, count in outcome.fetched.items() if count == 2})
    assert ({page: n for page, n in outcome.fetched.items() if n > 2}, outcome.upgraded) == \
        ({}, fetched_twice)


def test_a_crawl_deeper_than_the_site_fetches_every_page_exactly_once(
        crawls: Callable[[int], Outcome], crawlers: Cluster) -> None:
    every_page, whole_site = within(crawlers.site.site, WHOLE_SITE_DEPTH), crawls(WHOLE_SITE_DEPTH)
    assert (whole_site.crawled, whole_site.fetched) == \
        (every_page, Counter(dict.fromkeys(every_page, 1)))


def test_a_crawl_deeper_than_the_site_marks_no_item_depth_upgrade(
        crawls: Callable[[int], Outcome]) -> None:
    assert crawls(WHOLE_SITE_DEPTH).upgraded == Counter()
