"""Sitemaps survive a crawler killed mid-sitemap (issue 27): a ``sitemaps: "robots"`` crawl over
the sitemap fixture (``tests/support/sitemap_site.py``) on nginx, with each crawler engine,
through the Kafka Monitor, whose first crawler gets SIGKILL while it reads a large urlset.

A sitemap response's lease is finished only once every batch of requests it makes is queued,
so a crawler that dies between the fetch and the last batch leaves the lease to be reaped
(LEASE_TIMEOUT, short here) and the sitemap is fetched and read again by a second crawler; its
pages already queued are deduplicated. The large urlsets are long (``URLS_PER_LARGE``) but the
crawl's ``deny_regex`` keeps one page in a thousand of them: reading one takes about a second
while few pages are fetched, and a throttle keeps the other work coming meanwhile. The kill
comes once nginx answered the first large urlset and then a request leased after that answer
was acknowledged (so a sitemap lease finished too early would be acknowledged by then), or
``SETTLE_S`` after the answer (the Scrapy engine acknowledges nothing while it reads).

Judged from nginx's access log: the page URLs fetched are exactly the ground truth after the
host rules, limits and the deny regex (0 missing, 0 extra); a page or sitemap fetched twice
was leased at the kill (no more than one urlset's worth of pages); the kill did land
while the urlset's lease was held and before its pages were fetched; one complete notice."""

from __future__ import annotations

import re
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import orjson
import pytest
import redis

from scrapy_cluster import keys
from tests.support.cluster import FastCluster
from tests.support.revisit_site import LogRecord, RevisitNginx
from tests.support.sitemap_rig import sitemap_services
from tests.support.sitemap_site import MIB, SitemapRules, SitemapSite, SitemapSiteConfig

pytestmark = pytest.mark.integration

URLS_PER_LARGE = 30_000
CONFIG = replace(SitemapSiteConfig(), large_sitemaps=2, urls_per_large=URLS_PER_LARGE,
                 url_limit=80, bomb_bytes=8 * MIB, small_count=3)
RULES = SitemapRules(max_urls=URLS_PER_LARGE, max_bytes=4 * MIB)
DENY = r"/p/large-\d+/\d*(?<!000)\.html$"
"""Pages of the large urlsets refused by the crawl, but for those whose number ends in 000."""
KEPT_PER_LARGE = URLS_PER_LARGE // 1000 - 1
LEASE_TIMEOUT_S = 6
"""Short, but longer than a crawler takes to fetch and read a large urlset on a busy machine
(a lease expiring while held would make a fetch the kill did not cause)."""
THROTTLE = {"QUEUE_HITS": 25, "QUEUE_WINDOW": 1}
"""Requests per second and host: the crawl's work comes in a stream, not at once."""
CRAWLER_ENV = {"SITEMAP_MAX_URLS": str(RULES.max_urls), "SITEMAP_MAX_BYTES": str(RULES.max_bytes),
               "LEASE_TIMEOUT": str(LEASE_TIMEOUT_S),
               **{name: str(value) for name, value in THROTTLE.items()}}
MONITOR_ENV: dict[str, Any] = {"CRAWL_COMPLETE_GRACE_S": 1.0, "LEASE_TIMEOUT": LEASE_TIMEOUT_S,
                               **THROTTLE}
ACK_FLUSH_S = 0.06
"""A little more than CRAWLER_ACK_FLUSH_MS (50 ms)."""
SETTLE_S = 0.5
"""Longest wait from nginx's answer of the first large urlset to the kill (reading one of
them takes about a second)."""
APPID = "sitemapkill"
WAIT_S = 60.0
_LEASED_URL = re.compile(rb'"u":("(?:[^"\\]|\\.)*")')


@dataclass
class Kill:
    """What stood at the moment of the kill."""

    sitemap: str
    """The large urlset nginx had answered first."""
    leased: set[str]
    """URLs leased (to the killed crawler) right after the kill."""
    in_flight: int
    pages_of_sitemap: int
    """Pages of that urlset fetched by then."""


@dataclass
class Outcome:
    site: SitemapSite
    records: list[LogRecord]
    kill: Kill
    notices: int


def _url(site: SitemapSite, record: LogRecord) -> str:
    return f"http://{record.host}:{site.port}{record.uri}"


def _is_page(record: LogRecord) -> bool:
    return urlsplit(record.uri).path.endswith(".html")


def _leased_urls(client: redis.Redis) -> set[str]:
    """The URLs of every lease record (each holds its request's encoded item)."""
    found: set[str] = set()
    for record in client.hvals(keys.frontier_lease_items()):
        found.update(orjson.loads(match) for match in _LEASED_URL.findall(cast(bytes, record)))
    return found


def _kill_mid_sitemap(cluster: FastCluster, nginx: RevisitNginx, site: SitemapSite,
                      crawlid: str) -> Kill:
    """SIGKILL the only crawler once nginx answered a large urlset and then a request leased
    after it was acknowledged (an ack flush came after the urlset's download: a lease finished
    before its batches would be gone by now), or ``SETTLE_S`` after the answer at the latest
    (the Scrapy engine reads a sitemap on its reactor thread: nothing is acknowledged
    meanwhile)."""
    process = cluster.processes[-1]
    large = {site.a(path) for path in site.large_paths()}
    deadline = time.monotonic() + WAIT_S
    while True:
        answered = [_url(site, r) for r in nginx.records() if r.status == 200]
        first = next((url for url in answered if url in large), None)
        if first is not None:
            break
        assert process.poll() is None, "the first crawler died on its own"
        assert time.monotonic() < deadline, "no large urlset fetched"
        time.sleep(0.01)
    settle = time.monotonic() + SETTLE_S
    time.sleep(ACK_FLUSH_S)
    client = cluster.client
    after = int(client.get(keys.frontier_lease_sequence()) or 0)
    while time.monotonic() < settle:
        last = int(client.get(keys.frontier_lease_sequence()) or 0)
        held = {int(cast(bytes, lease)) for lease in client.zrange(keys.frontier_leases(), 0, -1)}
        if any(lease not in held for lease in range(after + 1, last + 1)):
            break
        time.sleep(0.01)
    cluster.stop(process, signal.SIGKILL)
    leased = _leased_urls(client)
    info = cluster.frontier.crawl_info("link", APPID, crawlid)
    prefix = next(doc.series.prefix for doc in site.docs.values()
                  if doc.url == first and doc.series is not None)
    pages = sum(1 for r in nginx.records() if _url(site, r).startswith(prefix))
    return Kill(first, leased, info.in_flight, pages)


def _crawl(workdir: Path, engine: str) -> Outcome:
    with sitemap_services(workdir, CONFIG, MONITOR_ENV) as running:
        site, watch, cluster = running.site, running.watch, running.cluster
        cluster.start(engine, **CRAWLER_ENV)
        crawlid = uuid.uuid4().hex[:12]
        watch.feed({"url": site.a("/"), "appid": APPID, "crawlid": crawlid,
                    "spiderid": "link", "maxdepth": 0, "sitemaps": "robots",
                    "deny_regex": [DENY]})
        kill = _kill_mid_sitemap(cluster, running.nginx, site, crawlid)
        cluster.start(engine, **CRAWLER_ENV)
        watch.until(lambda: bool(watch.answers(crawlid, "complete")),
                    "the complete notice", WAIT_S)
        watch.watch(float(MONITOR_ENV["CRAWL_COMPLETE_GRACE_S"]) + 2.0)
        notices = len(watch.answers(crawlid, "complete"))
        records = running.nginx.records()
    return Outcome(site, records, kill, notices)


@pytest.fixture(scope="module", params=["fast", "scrapy"])
def outcome(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Outcome]:
    yield _crawl(tmp_path_factory.mktemp(f"sitemap-kill-{request.param}"), request.param)


def _expected(site: SitemapSite) -> set[str]:
    deny = re.compile(DENY)
    return {url for url in site.expected(RULES).urls if not deny.search(url)}


def test_no_page_is_lost_and_only_pages_leased_at_the_kill_come_twice(outcome: Outcome) -> None:
    site = outcome.site
    pages = Counter(_url(site, r) for r in outcome.records if _is_page(r))
    expected = _expected(site)
    assert sorted(expected - set(pages)) == []
    assert sorted(set(pages) - expected) == []
    twice = {url for url, count in pages.items() if count > 1}
    assert sorted(twice - outcome.kill.leased) == []
    assert len(twice) <= KEPT_PER_LARGE


def test_only_sitemaps_leased_at_the_kill_are_fetched_again(outcome: Outcome) -> None:
    site = outcome.site
    fetched = Counter(_url(site, r) for r in outcome.records
                      if not _is_page(r) and r.uri not in ("/", "/robots.txt"))
    assert sorted(fetched) == sorted(set(site.expected(RULES).fetched))
    again = {url: count for url, count in fetched.items() if count > 1}
    assert sorted(url for url in again if url not in outcome.kill.leased) == [], (
        again, outcome.kill)
    assert again.get(outcome.kill.sitemap) == 2, (again, outcome.kill)  # read again after the reap


def test_the_kill_came_while_a_large_urlset_was_being_read(outcome: Outcome) -> None:
    kill = outcome.kill
    assert kill.sitemap in kill.leased
    assert kill.in_flight > 0
    assert kill.pages_of_sitemap < KEPT_PER_LARGE


def test_the_complete_notice_comes_once(outcome: Outcome) -> None:
    assert outcome.notices == 1
