"""The crawler side of sitemaps (issue 27): ``crawler/common/sitemap_flow.py`` on bodies, and
each engine handling a robots.txt or sitemap response (the fast engine with its fake HTTP
session on a real frontier, the Scrapy engine with Scrapy responses through the cluster
scheduler). The end-to-end crawl of the fixture site is tested elsewhere."""

from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from scrapy.http import Response, TextResponse
from scrapy.utils.test import get_crawler

from scrapy_cluster import keys
from scrapy_cluster.crawler.common.sitemap_flow import (
    LASTMOD_META,
    MAX_INDEX_DEPTH,
    SITEMAP_FIELD,
    SitemapFlow,
    host_key,
)
from scrapy_cluster.crawler.common.sitemaps import SitemapLimits
from scrapy_cluster.crawler.fast.fetch import FetchResponse
from scrapy_cluster.frontier.model import LeasedRequest
from tests.support.fast_engine import CRAWL, Rig

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
SITE = "http://a.test"
ROBOTS = {**CRAWL, "url": f"{SITE}/robots.txt", SITEMAP_FIELD: {"kind": "robots"}}


def sitemap_request(url: str, **spec: Any) -> dict[str, Any]:
    return {**CRAWL, "url": url, SITEMAP_FIELD: {"kind": "sitemap", "depth": 0, **spec}}


def urlset(*entries: str | tuple[str, str]) -> bytes:
    parts = []
    for entry in entries:
        loc, lastmod = (entry, None) if isinstance(entry, str) else entry
        extra = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
        parts.append(f"<url><loc>{loc}</loc>{extra}</url>")
    return f'<?xml version="1.0"?><urlset {NS}>{"".join(parts)}</urlset>'.encode()


def index(*locs: str) -> bytes:
    body = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f'<sitemapindex {NS}>{body}</sitemapindex>'.encode()


def flow(stored: dict[str, Any], body: bytes, *, status: int = 200,
         content_type: str | None = "application/xml", **kwargs: Any) -> SitemapFlow:
    return SitemapFlow(stored, status=status, content_type=content_type, body=body, **kwargs)


# --- the flow on bodies ---------------------------------------------------------------------


def test_robots_sitemap_lines_become_sitemap_requests_announced_by_the_host() -> None:
    body = (b"User-agent: *\nDisallow: /private\n"
            b"Sitemap: http://a.test/sitemap.xml\n"
            b"sitemap:   https://cdn.test/maps/a.xml.gz # ours\n"
            b"SITEMAP: /relative.xml\n"
            b"Sitemap: http://a.test/sitemap.xml\n"      # twice: once
            b"Sitemap: https://cdn.test/maps/b.xml\n"
            b"Sitemap: ftp://a.test/s.xml\n"
            b"# Sitemap: http://a.test/commented.xml\n")
    result = flow({**ROBOTS, "url": "http://A.test:80/robots.txt", "retry_times": 2,
                   "dont_filter": True}, body, content_type="text/plain")
    requests = result.requests()
    assert [(r["url"], r[SITEMAP_FIELD]) for r in requests] == [
        ("http://a.test/sitemap.xml", {"kind": "sitemap", "depth": 0, "announced_by": "a.test"}),
        ("http://A.test:80/relative.xml",
         {"kind": "sitemap", "depth": 0, "announced_by": "a.test"}),
        ("https://cdn.test/robots.txt",  # the other host's robots.txt must announce them too
         {"kind": "robots", "announced_by": "a.test",
          "confirm": ["https://cdn.test/maps/a.xml.gz", "https://cdn.test/maps/b.xml"]})]
    assert all("retry_times" not in r and "dont_filter" not in r for r in requests)
    assert (requests[0]["crawlid"], requests[0]["curdepth"], requests[0]["priority"]) == \
        ("c1", 0, 5)
    assert dict(result.funnel) == {"submitted": 1, "filtered:sitemap_not_http": 1}


def test_the_other_hosts_robots_txt_confirms_only_the_sitemaps_it_announces() -> None:
    confirm = ["https://cdn.test/maps/a.xml.gz", "https://cdn.test/maps/b.xml"]
    stored = {**ROBOTS, "url": "https://cdn.test/robots.txt",
              SITEMAP_FIELD: {"kind": "robots", "announced_by": "a.test", "confirm": confirm}}
    body = b"Sitemap: https://cdn.test/maps/b.xml\nSitemap: https://cdn.test/own.xml\n"
    result = flow(stored, body)
    assert [(r["url"], r[SITEMAP_FIELD]) for r in result.requests()] == [
        ("https://cdn.test/maps/b.xml",
         {"kind": "sitemap", "depth": 0, "announced_by": "a.test"})]
    assert dict(result.funnel) == {"submitted": 1, "filtered:sitemap_not_cross_submitted": 1}
    missing = flow(stored, b"", status=404)
    assert (missing.requests(), dict(missing.funnel)) == \
        ([], {"submitted": 2, "filtered:sitemap_not_cross_submitted": 2})


def test_a_robots_txt_on_a_port_names_it_and_any_host_needs_no_confirmation() -> None:
    stored = {**ROBOTS, "url": "http://a.test:8080/robots.txt",
              SITEMAP_FIELD: {"kind": "robots", "any_host": True}}
    (request,) = flow(stored, b"Sitemap: http://b.test/s.xml\n").requests()
    assert (request["url"], request[SITEMAP_FIELD]) == (
        "http://b.test/s.xml",
        {"kind": "sitemap", "depth": 0, "announced_by": "a.test:8080", "any_host": True})


def test_a_urlset_queues_allowed_pages_with_lastmod_and_counts_the_refused() -> None:
    body = urlset((f"{SITE}/shop/a.html", "2024-01-02T03:04:05Z"), f"{SITE}/shop/b.html",
                  f"{SITE}/other/c.html", "http://b.test/shop/d.html", "/shop/relative.html",
                  "mailto:x@a.test", "")
    stored = {**sitemap_request(f"{SITE}/shop/sitemap.xml"), "curdepth": 0,
              "meta": {"own": 1}, "redirect_times": 1, "depth_upgrade": True}
    result = flow(stored, body)
    requests = result.requests()
    assert [(r["url"], r.get("meta")) for r in requests] == [
        (f"{SITE}/shop/a.html", {"own": 1, LASTMOD_META: 1704164645}),
        (f"{SITE}/shop/b.html", {"own": 1})]
    assert all(SITEMAP_FIELD not in r and "redirect_times" not in r
               and "depth_upgrade" not in r and r["curdepth"] == 0 for r in requests)
    assert dict(result.funnel) == {
        "submitted": 5, "filtered:sitemap_outside_directory": 1,
        "filtered:sitemap_cross_host": 1, "filtered:sitemap_relative": 1,
        "filtered:sitemap_not_http": 1, "filtered:sitemap_empty": 1}
    assert result.logs == [] and result.result is not None and result.result.urls == 4


def test_a_cross_submitted_sitemap_covers_the_announcing_host_and_its_own() -> None:
    body = urlset("http://a.test/x.html", "https://a.test/y.html", "http://cdn.test/m/z.html",
                  "http://cdn.test/other.html", "http://c.test/spam.html")
    stored = sitemap_request("http://cdn.test/m/sitemap.xml", announced_by="a.test")
    result = flow(stored, body)
    assert [r["url"] for r in result.requests()] == [
        "http://a.test/x.html", "https://a.test/y.html", "http://cdn.test/m/z.html"]
    assert result.funnel["filtered:sitemap_cross_host"] == 1
    assert result.funnel["filtered:sitemap_outside_directory"] == 1
    relaxed = flow(sitemap_request("http://cdn.test/m/sitemap.xml", any_host=True), body)
    assert len(relaxed.requests()) == 5


def test_an_index_queues_child_sitemaps_one_level_deeper_with_the_host_rules() -> None:
    body = index("http://cdn.test/maps/1.xml.gz", "http://a.test/maps/2.xml",
                 "http://b.test/3.xml", "http://cdn.test/elsewhere/4.xml")
    stored = sitemap_request("http://cdn.test/maps/index.xml", depth=3, announced_by="a.test")
    result = flow(stored, body)
    assert [(r["url"], r[SITEMAP_FIELD]) for r in result.requests()] == [
        ("http://cdn.test/maps/1.xml.gz",
         {"kind": "sitemap", "depth": 4, "announced_by": "a.test"}),
        ("http://a.test/maps/2.xml", {"kind": "sitemap", "depth": 4})]
    assert dict(result.funnel) == {"submitted": 2, "filtered:sitemap_cross_host": 1,
                                   "filtered:sitemap_outside_directory": 1}


def test_children_of_an_index_at_the_depth_cap_are_refused_as_too_deep() -> None:
    body = index(f"{SITE}/a.xml", f"{SITE}/b.xml")
    at_cap = flow(sitemap_request(f"{SITE}/index.xml", depth=MAX_INDEX_DEPTH), body)
    assert (at_cap.requests(), dict(at_cap.funnel)) == \
        ([], {"submitted": 2, "filtered:sitemap_too_deep": 2})
    below = flow(sitemap_request(f"{SITE}/index.xml", depth=MAX_INDEX_DEPTH - 1), body)
    assert [r[SITEMAP_FIELD]["depth"] for r in below.requests()] == [MAX_INDEX_DEPTH] * 2


def test_a_gzip_body_is_inflated_and_queued_in_batches() -> None:
    body = gzip.compress(urlset(*(f"{SITE}/p{i}.html" for i in range(2500))))
    result = flow(sitemap_request(f"{SITE}/sitemap.xml.gz"), body,
                  content_type="application/octet-stream")
    sizes = [len(batch) for batch in result]
    assert sizes == [1000, 1000, 500]
    assert result.result is not None and result.result.gzip and not result.funnel


def test_a_gzip_bomb_stops_at_the_cap_is_logged_and_counted() -> None:
    head = urlset(f"{SITE}/first.html")[:-len(b"</urlset>")]
    bomb = gzip.compress(head + b" " * 2_000_000 + b"</urlset>")
    result = flow(sitemap_request(f"{SITE}/bomb.xml.gz"), bomb,
                  limits=SitemapLimits(max_bytes=200_000))
    assert [r["url"] for r in result.requests()] == [f"{SITE}/first.html"]
    assert dict(result.funnel) == {"sitemap:too_large": 1}
    (line,) = result.logs
    assert (line.level, line.message, line.fields["url"], line.fields["reason"],
            line.fields["crawlid"]) == (logging.WARNING, "sitemap stopped: too_large",
                                        f"{SITE}/bomb.xml.gz", "too_large", "c1")
    assert result.result is not None and result.result.document_bytes <= 200_001


def test_a_document_with_a_dtd_is_refused_unread() -> None:
    body = (b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY x "http://a.test/e.html">]>'
            + urlset("&x;"))
    result = flow(sitemap_request(f"{SITE}/sitemap.xml"), body)
    assert (result.requests(), dict(result.funnel)) == ([], {"sitemap:dtd": 1})


def test_a_response_outside_2xx_reads_nothing() -> None:
    result = flow(sitemap_request(f"{SITE}/sitemap.xml"), urlset(f"{SITE}/a.html"), status=404)
    assert (result.requests(), dict(result.funnel), len(result.logs)) == ([], {}, 1)


def test_host_key_omits_the_default_port() -> None:
    assert [host_key(u) for u in ("https://A.test:443/x", "http://a.test:8080/", "ftp://a/")] \
        == ["a.test", "a.test:8080", None]


# --- the fast engine ------------------------------------------------------------------------


def xml(url: str, body: bytes, content_type: str = "application/xml") -> FetchResponse:
    return FetchResponse(url, 200, (("Content-Type", content_type),), body)


async def process_next(rig: Rig) -> list[LeasedRequest]:
    """Pop one request, process it, ack: the requests it queued, popped."""
    (leased,) = await rig.pop(1)
    await rig.processor.process(leased)
    await rig.leases.flush()
    return await rig.pop()


def run_fast(redis_url: str, answers: dict[str, FetchResponse], scenario: Any) -> Any:
    async def run() -> Any:
        rig = Rig(redis_url, answers)
        try:
            return await scenario(rig)
        finally:
            await rig.close()

    return asyncio.run(run())


@pytest.mark.integration
def test_fast_engine_queues_robots_sitemaps_then_their_pages_without_items(
        redis_client: redis.Redis, redis_url: str) -> None:
    answers = {
        f"{SITE}/robots.txt": xml(f"{SITE}/robots.txt",
                                  b"Sitemap: http://a.test/sitemap.xml\n", "text/plain"),
        f"{SITE}/sitemap.xml": xml(f"{SITE}/sitemap.xml", urlset(
            (f"{SITE}/a.html", "2024-01-02"), f"{SITE}/b.html", "http://b.test/spam.html")),
    }

    async def scenario(rig: Rig) -> Any:
        await rig.frontier.enqueue_many([ROBOTS], dedupe=True)
        (leased,) = await process_next(rig)
        await rig.processor.process(leased)
        await rig.leases.flush()
        leases = await rig.client.zcard(keys.frontier_leases())  # every lease acknowledged
        child, pages = leased.request, [queued.request for queued in await rig.pop()]
        funnel = (await rig.frontier.crawl_funnels("link", ["c1"]))["c1"]
        return child, pages, funnel, leases, rig.items

    child, pages, funnel, leases, items = run_fast(redis_url, answers, scenario)
    assert (child["url"], child[SITEMAP_FIELD]) == \
        (f"{SITE}/sitemap.xml", {"kind": "sitemap", "depth": 0, "announced_by": "a.test"})
    assert sorted((p["url"], (p.get("meta") or {}).get(LASTMOD_META), SITEMAP_FIELD in p)
                  for p in pages) == [(f"{SITE}/a.html", 1704153600, False),
                                      (f"{SITE}/b.html", None, False)]
    assert (items, leases) == ([], 0)
    assert (funnel.submitted, funnel.queued, funnel.filtered, funnel.fetched) == \
        (5, 4, {"sitemap_cross_host": 1}, {"200": 2})


@pytest.mark.integration
def test_fast_engine_fetches_a_sitemap_of_a_loop_once(
        redis_client: redis.Redis, redis_url: str) -> None:
    answers = {f"{SITE}/index.xml": xml(f"{SITE}/index.xml",
                                        index(f"{SITE}/index.xml", f"{SITE}/child.xml"))}

    async def scenario(rig: Rig) -> Any:
        await rig.frontier.enqueue_many([sitemap_request(f"{SITE}/index.xml")], dedupe=True)
        queued = await process_next(rig)
        funnel = (await rig.frontier.crawl_funnels("link", ["c1"]))["c1"]
        return [q.request["url"] for q in queued], funnel.deduplicated

    assert run_fast(redis_url, answers, scenario) == ([f"{SITE}/child.xml"], 1)


@pytest.mark.integration
def test_fast_engine_gives_a_sitemap_back_when_redis_is_down(
        redis_client: redis.Redis, redis_url: str) -> None:
    url = f"{SITE}/sitemap.xml"

    async def scenario(rig: Rig) -> Any:
        await rig.frontier.enqueue_many([sitemap_request(url)], dedupe=True)
        (leased,) = await rig.pop(1)
        await rig.process_with_redis_down(leased)
        again = await rig.pop()
        return [q.request["url"] for q in again], rig.items

    assert run_fast(redis_url, {url: xml(url, urlset(f"{SITE}/a.html"))}, scenario) == \
        ([url], [])


# --- the Scrapy engine ----------------------------------------------------------------------


@pytest.fixture
def scrapy_rig(redis_client: redis.Redis) -> Iterator[Any]:
    """A ``link`` spider on a Scrapy crawler whose engine has the cluster scheduler, on a real
    frontier (no download: responses are made in the test)."""
    from scrapy_cluster.crawler.common.public_ip import PublicIpLookup, PublicIpRefresher
    from scrapy_cluster.crawler.funnel_hooks import funnel_for
    from scrapy_cluster.crawler.scheduler import DistributedScheduler, SchedulerPolicy
    from scrapy_cluster.crawler.spiders.link import LinkSpider
    from scrapy_cluster.frontier import DispatchView, Frontier
    from scrapy_cluster.settings import load_settings

    settings = load_settings("crawler", environ={}, overrides={"QUEUE_WINDOW": 0})
    frontier = Frontier.from_settings(settings, redis_client)
    crawler = get_crawler(LinkSpider)
    ip = PublicIpRefresher(PublicIpLookup("", "", refresh_s=60, timeout_s=1, fallback_ip=""),
                           logger=logging.getLogger("t"))
    scheduler = DistributedScheduler(frontier, ip, SchedulerPolicy(
        buffer_size=1, ack_flush_s=1.0, ip_enabled=False), view_type=DispatchView,
        funnel=funnel_for(crawler))
    spider = LinkSpider()
    spider._set_crawler(crawler)
    scheduler.spider = spider
    crawler.engine = SimpleNamespace(scheduler=scheduler)  # type: ignore[assignment]
    yield SimpleNamespace(frontier=frontier, scheduler=scheduler, spider=spider)


def popped(rig: Any) -> list[Any]:
    """Every request the scheduler serves now (Scrapy requests, their leases held)."""
    served: list[Any] = []
    while True:
        rig.scheduler._next_pop_at = 0.0  # no waiting for the throttle's next moment
        request = rig.scheduler.next_request()
        if request is None:
            return served
        served.append(request)


def stored_of(rig: Any, request: Any) -> dict[str, Any]:
    return dict(rig.scheduler.leases.request(request.meta["_sc_lease_id"]))


def answer(rig: Any, request: Any, body: bytes, content_type: bytes) -> list[Any]:
    """Answer a served sitemap request with ``body`` through its callback, then ack: what the
    callback yielded."""
    assert request.callback == rig.spider.parse_sitemap_response
    response_class = TextResponse if content_type.startswith(b"text/") else Response
    response = response_class(request.url, status=200, body=body, request=request,
                              headers={b"Content-Type": content_type})
    output = list(request.callback(response))
    rig.scheduler.outputs_done(request)
    assert rig.scheduler.leases.flush() == 1
    return output


@pytest.mark.integration
def test_scrapy_engine_queues_robots_sitemaps_then_their_pages_without_items(
        scrapy_rig: Any) -> None:
    scrapy_rig.frontier.enqueue_many([ROBOTS], dedupe=True)
    (robots,) = popped(scrapy_rig)
    robots_body = b"Sitemap: http://a.test/sitemap.xml.gz\nSitemap: http://a.test/news.xml\n"
    assert answer(scrapy_rig, robots, robots_body, b"text/plain") == []
    children = popped(scrapy_rig)
    assert sorted((c.url, stored_of(scrapy_rig, c)[SITEMAP_FIELD]["announced_by"])
                  for c in children) == \
        [("http://a.test/news.xml", "a.test"), ("http://a.test/sitemap.xml.gz", "a.test")]
    body = gzip.compress(urlset((f"{SITE}/a.html", "2024-01-02"), "http://b.test/x.html"))
    gz = next(c for c in children if c.url.endswith(".gz"))
    assert answer(scrapy_rig, gz, body, b"application/x-gzip") == []
    (page,) = popped(scrapy_rig)
    stored = stored_of(scrapy_rig, page)
    assert (page.url, page.callback, page.meta[LASTMOD_META], SITEMAP_FIELD in stored) == \
        (f"{SITE}/a.html", None, 1704153600, False)
    funnel = scrapy_rig.frontier.crawl_funnels("link", ["c1"])["c1"]
    assert (funnel.submitted, funnel.queued, funnel.filtered) == \
        (5, 4, {"sitemap_cross_host": 1})  # robots.txt, 2 sitemaps, 1 page; 1 refused


@pytest.mark.integration
def test_scrapy_engine_counts_a_stopped_sitemap_and_keeps_sitemap_on_a_redirect(
        scrapy_rig: Any, caplog: pytest.LogCaptureFixture) -> None:
    stored = {**sitemap_request(f"{SITE}/sitemap.xml"), "callback": "parse"}
    scrapy_rig.frontier.enqueue_many([stored], dedupe=True)
    (request,) = popped(scrapy_rig)
    moved = request.replace(url=f"{SITE}/moved.xml",
                            meta={**request.meta, "redirect_times": 1})
    assert scrapy_rig.scheduler.enqueue_request(moved)
    (target,) = popped(scrapy_rig)
    assert (target.url, target.callback) == \
        (f"{SITE}/moved.xml", scrapy_rig.spider.parse_sitemap_response)
    stored_target = scrapy_rig.scheduler.leases.request(target.meta["_sc_lease_id"])
    assert (stored_target[SITEMAP_FIELD], stored_target["callback"]) == \
        ({"kind": "sitemap", "depth": 0}, "parse")
    response = Response(target.url, status=200, body=b"<html><body>no sitemap</body></html>",
                        request=target)
    with caplog.at_level(logging.WARNING):
        assert list(target.callback(response)) == []
    assert "sitemap stopped: unknown_format" in caplog.text
    assert scrapy_rig.spider.crawler is not None
    from scrapy_cluster.crawler.funnel_hooks import funnel_for
    assert funnel_for(scrapy_rig.spider.crawler).pending("link", "c1") == \
        {"sitemap:unknown_format": 1}



def test_a_page_item_carries_its_sitemap_lastmod() -> None:
    from scrapy_cluster.crawler.common.items import page_item

    def item(meta: dict[str, object]) -> dict[str, object]:
        return page_item(url="http://a.test/p.html", response_url="http://a.test/p.html",
                         status=200, response_headers={}, request_headers={}, body=b"x",
                         encoding="utf-8", links=[], meta=meta, now_s=0.0, base64_body=False)

    assert item({"crawlid": "c", "meta": {"sitemap_lastmod": 1700000000}})["sitemap_lastmod"] \
        == 1700000000
    assert item({"crawlid": "c", "sitemap_lastmod": 5})["sitemap_lastmod"] == 5
    assert "sitemap_lastmod" not in item({"crawlid": "c"})


def test_with_recrawls_a_lastmod_page_follows_its_sitemap_and_comes_again_when_changed() -> None:
    from scrapy_cluster.crawler.common.revisit import RecrawlPolicy, Refetch, RevisitState
    from scrapy_cluster.crawler.common.sitemap_flow import previous_fetch_s

    recrawl = {"interval": 3600}
    stored = {**sitemap_request(f"{SITE}/shop/sitemap.xml"), "recrawl": recrawl}
    body = urlset((f"{SITE}/shop/old.html", "2024-01-01T00:00:00Z"),
                  (f"{SITE}/shop/new.html", "2024-01-01T02:00:00Z"), f"{SITE}/shop/plain.html")
    first = {r["url"]: r for r in flow(stored, body).requests()}
    # pages with a lastmod leave their own schedule to the sitemap's; the one without keeps it
    assert [(url.rsplit("/", 1)[1], "recrawl" in r, r.get("dont_filter")) for url, r in
            first.items()] == [("old.html", False, None), ("new.html", False, None),
                               ("plain.html", True, None)]
    fetched_before = 1704067200 + 3600  # 2024-01-01T01:00:00Z: the sitemap's previous fetch
    refetch = Refetch(RecrawlPolicy.parse(recrawl), RevisitState(3600, 2), {})
    assert previous_fetch_s(refetch, fetched_before + 3600) == fetched_before
    assert previous_fetch_s(None, fetched_before) is None
    again = {r["url"]: r for r in flow(stored, body, previous_fetch_s=fetched_before).requests()}
    # changed since: queued past the dedupe; not changed: left to the dedupe (not fetched)
    assert [(url.rsplit("/", 1)[1], r.get("dont_filter")) for url, r in again.items()] == [
        ("old.html", None), ("new.html", True), ("plain.html", None)]
