"""Sitemaps end to end (issue 27): a crawl with ``sitemaps: "robots"`` over the sitemap fixture
(``tests/support/sitemap_site.py``: robots.txt, a gzipped 3-level index with a loop, a
cross-submitted and a not cross-submitted sitemap on other hosts, a disallowed sitemap, text,
RSS and Atom, an over-limit urlset, gzip bombs as a file and as Content-Encoding, DTD
documents) served by Debian's nginx, with each crawler engine, through the Kafka Monitor.

Judged from nginx's access log and the crawl's funnel: the page URLs fetched are exactly the
ground truth after the host rules and limits, and exactly what ``ultimate-sitemap-parser`` (a
third-party parser) lists from the same site after the same rules; 0 missing, 0 extra; each
page and each sitemap fetched once (the loop ends), the disallowed sitemap and the sitemap not
cross-submitted never fetched, every bad input stopped with its reason in the funnel."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.revisit_site import LogRecord
from tests.support.sitemap_rig import sitemap_services
from tests.support.sitemap_site import (
    MIB,
    SitemapRules,
    SitemapSite,
    SitemapSiteConfig,
)

pytestmark = pytest.mark.integration

CONFIG = replace(SitemapSiteConfig(), large_sitemaps=3, urls_per_large=60, url_limit=80,
                 bomb_bytes=2 * MIB, small_count=3)
RULES = SitemapRules(max_urls=80, max_bytes=MIB)
CRAWLER_ENV = {"SITEMAP_MAX_URLS": "80", "SITEMAP_MAX_BYTES": str(MIB)}
APPID = "sitemaps"


@dataclass
class Outcome:
    site: SitemapSite
    records: list[LogRecord]
    notice: dict[str, Any]
    reference: set[str] | None


def _crawl(workdir: Path, engine: str) -> Outcome:
    with sitemap_services(workdir, CONFIG, {"CRAWL_COMPLETE_GRACE_S": 1.0}) as running:
        site, watch, cluster = running.site, running.watch, running.cluster
        cluster.start(engine, **CRAWLER_ENV)
        crawlid = uuid.uuid4().hex[:12]
        watch.feed({"url": site.a("/"), "appid": APPID, "crawlid": crawlid,
                    "spiderid": "link", "maxdepth": 0, "sitemaps": "robots"})
        watch.until(lambda: bool(watch.answers(crawlid, "complete")), "the complete notice", 120)
        notice = watch.answers(crawlid, "complete")[0][1]
        records = running.nginx.records()  # before usp reads the site too
        funnels, _ = cluster.frontier.crawl_funnels_and_statuses("link", [crawlid])
        notice = {**notice, "funnel": funnels[crawlid].as_dict()}
        reference = _reference(site)
    return Outcome(site, records, notice, reference)


def _reference(site: SitemapSite) -> set[str] | None:
    """What usp lists from the served site, after the same rules (None without usp)."""
    try:
        from usp.tree import sitemap_tree_for_homepage
    except ImportError:
        return None
    return site.reference_urls(sitemap_tree_for_homepage(site.a("/"), use_known_paths=False),
                               RULES)


@pytest.fixture(scope="module", params=["fast", "scrapy"])
def outcome(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Outcome]:
    yield _crawl(tmp_path_factory.mktemp(f"sitemaps-{request.param}"), request.param)


def _url(site: SitemapSite, record: LogRecord) -> str:
    return f"http://{record.host}:{site.port}{record.uri}"


def _is_page(record: LogRecord) -> bool:
    return urlsplit(record.uri).path.endswith(".html")


def _pages(outcome: Outcome) -> Counter[str]:
    return Counter(_url(outcome.site, r) for r in outcome.records if _is_page(r))


def test_the_pages_fetched_are_exactly_the_ground_truth_each_once(outcome: Outcome) -> None:
    pages = _pages(outcome)
    expected = outcome.site.expected(RULES).urls
    assert sorted(set(pages) - expected) == []
    assert sorted(expected - set(pages)) == []
    assert [url for url, count in pages.items() if count > 1] == []


def test_the_pages_fetched_are_what_a_third_party_parser_lists(outcome: Outcome) -> None:
    if outcome.reference is None:
        pytest.skip("ultimate-sitemap-parser is not installed (pip install -e '.[dev]')")
    assert set(_pages(outcome)) == outcome.reference


def test_each_sitemap_is_fetched_once_and_refused_ones_never(outcome: Outcome) -> None:
    site = outcome.site
    expected = outcome.site.expected(RULES)
    fetched = Counter(_url(site, r) for r in outcome.records
                      if not _is_page(r) and r.uri not in ("/", "/robots.txt"))
    assert sorted(fetched) == sorted(set(expected.fetched))
    assert [url for url, count in fetched.items() if count > 1] == []
    assert site.a("/private/sitemap.xml") not in fetched


def test_every_bad_input_stopped_with_its_reason(outcome: Outcome) -> None:
    """The fixture's stops (``expected.stops``) in the crawl's funnel: a sitemap that stopped
    early under ``sitemaps``, a refused sitemap or URL under ``filtered`` (the loop ends by
    dedupe: ``deduplicated``)."""
    funnel = outcome.notice["funnel"]
    stops = Counter(stop.reason for stop in outcome.site.expected(RULES).stops)
    assert funnel.get("sitemaps") == {
        reason: stops[reason] for reason in ("dtd", "too_large", "too_many_urls")}
    assert {reason: funnel["filtered"].get(name) for reason, name in (
        ("outside_directory", "sitemap_outside_directory"), ("outside_host", "sitemap_cross_host"),
        ("not_cross_submitted", "sitemap_not_cross_submitted"), ("robots", "robots"))} == {
        reason: stops[reason] for reason in (
            "outside_directory", "outside_host", "not_cross_submitted", "robots")}
    assert funnel["deduplicated"] >= stops["loop"]
    expected = outcome.site.expected(RULES)
    totals = outcome.notice["totals"]  # the complete notice counts the sitemaps' pages
    assert totals["delivered"] >= len(expected.urls)
    assert totals["fetched"] >= len(expected.urls) + len(expected.fetched)
