"""The ``wandering`` spider on the fast engine.

Pure tests run the Scrapy crawler's own ``WanderingSpider.parse`` and spider middlewares on a
Scrapy response and the fast engine's ``WanderingSpider`` on the same page, with the same
random draw, and compare the request queued and the item produced. Tests marked
``integration`` run the page logic and the engine loop on a real redis-server (the real
``AsyncFrontier``); only the HTTP client is replaced.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any

import pytest
import redis
import redis.asyncio
from scrapy import Request
from scrapy.http.headers import Headers
from scrapy.responsetypes import responsetypes
from scrapy.spidermiddlewares.referer import RefererMiddleware
from scrapy.spidermiddlewares.urllength import UrlLengthMiddleware
from scrapy.utils.test import get_crawler

from scrapy_cluster import keys
from scrapy_cluster.crawler.common import items
from scrapy_cluster.crawler.fast.app import check_spider
from scrapy_cluster.crawler.fast.engine import EngineParts, EnginePolicy, FastEngine
from scrapy_cluster.crawler.fast.extract import LxmlExtractor
from scrapy_cluster.crawler.fast.fetch import FetchResponse
from scrapy_cluster.crawler.fast.pages import response_header_dict
from scrapy_cluster.crawler.fast.requests import build_request, header_dict, last_header
from scrapy_cluster.crawler.fast.spiders import (
    LinkSpider,
    WanderingSpider,
    fast_spider,
)
from scrapy_cluster.crawler.middlewares import MetaPassthroughMiddleware
from scrapy_cluster.crawler.serialization import request_from_dict, request_to_dict
from scrapy_cluster.crawler.spiders.wandering import WanderingSpider as ScrapyWanderingSpider
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.frontier import DispatchView
from scrapy_cluster.settings import load_settings
from tests.support.fast_engine import POLICY, Rig, scrapy_request
from tests.support.spiders import HANDOFF_SPIDER

VIEW = DispatchView("wandering")
PAGE_URL = "http://example.com/dir/page.html"
CRAWL = {"appid": "app", "crawlid": "w1", "spiderid": "wandering", "attrs": {"k": 1},
         "priority": 5, "curdepth": 2, "maxdepth": 1, "useragent": "ua/1",
         "allowed_domains": ["example.com"], "meta": {"step": 2}}
LINKS = ('<a href="a.html">a</a><a href="/b/c.html">c</a><a href="http://other.org/x">off</a>'
         '<a href="/doc.pdf">pdf</a><a href="https://sub.example.com/s?q=é">s</a>'
         '<a href="mailto:x@y">m</a><a href="a.html">again</a>')
HTML_HEADERS = (("Content-Type", "text/html; charset=utf-8"),)


def page(links: str = LINKS) -> bytes:
    return f"<html><body><h1>page</h1>{links}</body></html>".encode()


# --- the same request and item as the Scrapy crawler's wandering spider -------------------------


def scrapy_wander(stored: Mapping[str, Any], body: bytes, headers: tuple[tuple[str, str], ...],
                  *, seed: int, url_length_limit: int = 2083, now_s: float = 0.0,
                  referrer_policy: str | None = None) -> tuple[list[dict[str, Any]],
                                                               list[dict[str, Any]]]:
    """What the Scrapy crawler queues and produces for this page: the spider's ``parse``,
    then its spider middlewares (UrlLength 800, Referer 700, MetaPassthrough 100) and the
    scheduler's ``request_to_dict``."""
    settings: dict[str, Any] = {"URLLENGTH_LIMIT": url_length_limit}
    if referrer_policy is not None:
        settings["REFERRER_POLICY"] = referrer_policy
    crawler = get_crawler(settings_dict=settings)
    spider = ScrapyWanderingSpider()
    spider.rng = random.Random(seed)
    spider.now_s = lambda: now_s
    spider.max_links_per_page = POLICY.max_links
    request = scrapy_request(stored)
    raw = Headers()
    raw["Content-Length"] = str(len(body))
    for name, value in headers:
        raw.appendlist(name, value)
    cls = responsetypes.from_args(headers=raw, url=request.url, body=body)
    response = cls(url=request.url, status=200, headers=raw, body=body, request=request)
    outputs: Any = spider.parse(response)
    for middleware in (UrlLengthMiddleware.from_crawler(crawler),
                       RefererMiddleware.from_crawler(crawler), MetaPassthroughMiddleware()):
        outputs = middleware.process_spider_output(response, outputs)
    outputs = list(outputs)
    queued = [request_to_dict(o, spider) for o in outputs if isinstance(o, Request)]
    return queued, [o for o in outputs if not isinstance(o, Request)]


def fast_wander(stored: Mapping[str, Any], body: bytes, headers: tuple[tuple[str, str], ...],
                *, seed: int, url_length_limit: int = 2083, now_s: float = 0.0,
                referrer_policy: str | None = None) -> tuple[list[dict[str, Any]],
                                                             list[dict[str, Any]]]:
    """What the fast engine's page logic queues and produces for this page."""
    overrides: dict[str, Any] = {"URLLENGTH_LIMIT": url_length_limit}
    if referrer_policy is not None:
        overrides["REFERRER_POLICY"] = referrer_policy
    spider = WanderingSpider.from_settings(load_settings("crawler", environ={},
                                                         overrides=overrides),
                                           rng=random.Random(seed))
    request = build_request(stored, POLICY)
    response = FetchResponse(request.url, 200, (("Content-Length", str(len(body))), *headers),
                             body)
    found = LxmlExtractor()(body, url=request.url,
                            content_type=last_header(headers, "Content-Type"),
                            content_disposition=None, max_links=POLICY.max_links)
    followed = spider.follow(stored, url=request.url, response_url=response.url,
                             response_headers=response.headers, links=found.links,
                             dropped=found.dropped, now_s=now_s)
    item = spider.item(items.page_item(
        url=request.url, response_url=response.url, status=200,
        response_headers=response_header_dict(response),
        request_headers=header_dict(request.headers), body=body, encoding=found.encoding,
        links=found.links, meta=stored, now_s=now_s, base64_body=False,
        links_dropped=found.dropped), stored)
    assert not followed.filtered  # the Scrapy spider counts no link it does not follow
    return followed.requests, [item]


@pytest.mark.parametrize("seed", range(8))
def test_the_request_queued_and_the_item_equal_the_scrapy_spiders(seed: int) -> None:
    stored = {**CRAWL, "url": PAGE_URL}
    fast = fast_wander(stored, page(), HTML_HEADERS, seed=seed)
    assert fast == scrapy_wander(stored, page(), HTML_HEADERS, seed=seed)


def test_the_draws_cover_every_allowed_link_and_nothing_else() -> None:
    stored = {**CRAWL, "url": PAGE_URL}
    drawn = {fast_wander(stored, page(), HTML_HEADERS, seed=seed)[0][0]["url"]
             for seed in range(60)}
    assert drawn == {"http://example.com/dir/a.html", "http://example.com/b/c.html",
                     "https://sub.example.com/s?q=%C3%A9"}


def test_the_queued_request_carries_the_step_the_crawl_and_a_referer() -> None:
    stored = {**CRAWL, "url": PAGE_URL}
    (queued,), (item,) = fast_wander(stored, page('<a href="a.html">a</a>'), HTML_HEADERS,
                                     seed=0)
    assert queued == {
        "url": "http://example.com/dir/a.html", "appid": "app", "crawlid": "w1",
        "spiderid": "wandering", "attrs": {"k": 1}, "maxdepth": 1, "curdepth": 3,
        "allowed_domains": ["example.com"], "useragent": "ua/1", "priority": 5,
        "headers": {"Referer": [PAGE_URL]}, "meta": {"step": 3}, "callback": "parse",
        "retry_times": 0}
    assert item["attrs"] == {"k": 1, "step": 2}


@pytest.mark.parametrize(("case", "stored", "headers", "kwargs"), [
    ("seed page, no step yet", {k: v for k, v in CRAWL.items() if k != "meta"}, HTML_HEADERS,
     {}),
    ("the page's Referrer-Policy", CRAWL, (*HTML_HEADERS, ("Referrer-Policy", "origin")), {}),
    ("REFERRER_POLICY no-referrer", CRAWL, HTML_HEADERS, {"referrer_policy": "no-referrer"}),
    ("expired crawl", {**CRAWL, "expires": 10}, HTML_HEADERS, {"now_s": 20.0}),
    ("crawl expiring later", {**CRAWL, "expires": 30}, HTML_HEADERS, {"now_s": 20.0}),
    ("past URLLENGTH_LIMIT", CRAWL, HTML_HEADERS, {"url_length_limit": 20}),
    ("not html", CRAWL, (("Content-Type", "image/png"),), {}),
])
def test_edge_cases_equal_the_scrapy_spiders(case: str, stored: Mapping[str, Any],
                                             headers: tuple[tuple[str, str], ...],
                                             kwargs: dict[str, Any]) -> None:
    stored = {**stored, "url": PAGE_URL}
    body = page() if case != "not html" else b"\x89PNG\r\n\x1a\n\x00\x00"
    fast = fast_wander(stored, body, headers, seed=3, **kwargs)
    assert fast == scrapy_wander(stored, body, headers, seed=3, **kwargs)
    queued = fast[0]
    if case in ("expired crawl", "past URLLENGTH_LIMIT", "not html"):
        assert queued == []
    else:
        assert len(queued) == 1


def test_an_https_page_sends_no_referer_to_an_http_link() -> None:
    stored = {**CRAWL, "url": "https://example.com/p.html"}
    body = page('<a href="http://example.com/q.html">q</a>')
    fast = fast_wander(stored, body, HTML_HEADERS, seed=0)
    assert fast == scrapy_wander(stored, body, HTML_HEADERS, seed=0)
    assert "headers" not in fast[0][0]


def test_a_page_without_allowed_links_queues_nothing() -> None:
    stored = {**CRAWL, "url": PAGE_URL}
    body = page('<a href="http://other.org/">x</a><a href="/x.zip">z</a>')
    fast = fast_wander(stored, body, HTML_HEADERS, seed=0)
    assert (fast, fast[0]) == (scrapy_wander(stored, body, HTML_HEADERS, seed=0), [])


def test_the_fast_engine_runs_the_link_and_wandering_spiders_only() -> None:
    settings = load_settings("crawler", environ={}, overrides={})
    check_spider("link")
    check_spider("wandering")
    with pytest.raises(SettingsError, match="only the 'link' and 'wandering' spiders"):
        check_spider(HANDOFF_SPIDER)
    assert (type(fast_spider("link", settings)), type(fast_spider("wandering", settings))) == \
        (LinkSpider, WanderingSpider)


def test_a_request_the_fast_engine_queued_rebuilds_into_the_scrapy_spiders_request() -> None:
    """Both engines can share a wandering crawl: the Scrapy crawler reads the fast engine's
    requests back with their callback, step and Referer."""
    stored = {**CRAWL, "url": PAGE_URL}
    (queued,), _ = fast_wander(stored, page('<a href="a.html">a</a>'), HTML_HEADERS, seed=0)
    spider = ScrapyWanderingSpider()
    request = request_from_dict(queued, spider)
    assert (request.callback, request.meta["step"], request.headers.get("Referer"),
            request.priority) == (spider.parse, 3, PAGE_URL.encode(), 5)


# --- the page logic on a real frontier ------------------------------------------------------


class Answers:
    """Our ``Fetcher`` seam answering from a dict (404 for any other URL)."""

    def __init__(self, pages: Mapping[str, list[str]]) -> None:
        self.pages = pages
        self.fetched: list[str] = []

    async def fetch(self, request: Any, *, timeout_s: float, max_bytes: int) -> FetchResponse:
        self.fetched.append(request.url)
        if request.url not in self.pages:
            return FetchResponse(request.url, 404, HTML_HEADERS, b"missing")
        body = "".join(f'<a href="{link}">{link}</a>' for link in self.pages[request.url])
        return FetchResponse(request.url, 200, HTML_HEADERS, body.encode())

    async def close(self) -> None:
        return None


class WanderRig(Rig):
    """A wandering-spider processor on a real AsyncFrontier; items collected in a list."""

    def __init__(self, redis_url: str, pages: Mapping[str, list[str]], seed: int = 0) -> None:
        settings = load_settings("crawler", environ={}, overrides={"QUEUE_WINDOW": 0})
        super().__init__(redis_url, {}, fetcher=Answers(pages), view=VIEW,
                         spider=WanderingSpider.from_settings(settings, rng=random.Random(seed)))

    async def seed(self, url: str, **fields: Any) -> None:
        crawl = {k: v for k, v in CRAWL.items() if k not in ("meta", "curdepth", "maxdepth")}
        await self.frontier.enqueue_many([{**crawl, "url": url, **fields}], dedupe=True)

    async def funnel_of(self) -> Any:
        return (await self.frontier.crawl_funnels("wandering", ["w1"]))["w1"]


def run_wander(redis_url: str, pages: Mapping[str, list[str]], scenario: Any,
               seed: int = 0) -> Any:
    async def run() -> Any:
        rig = WanderRig(redis_url, pages, seed)
        try:
            return await scenario(rig)
        finally:
            await rig.close()

    return asyncio.run(run())


CHAIN = {"http://example.com/0.html": ["/1.html", "http://other.org/x.html"],
         "http://example.com/1.html": ["/2.html"],
         "http://example.com/2.html": ["/0.html"]}


@pytest.mark.integration
def test_a_page_queues_one_link_and_its_lease_is_acked_after_it(
        redis_client: redis.Redis, redis_url: str) -> None:
    async def scenario(rig: WanderRig) -> Any:
        await rig.seed("http://example.com/0.html", allowed_domains=["example.com"])
        (leased,) = await rig.pop(1)
        await rig.processor.process(leased)
        held = await rig.client.zcard(keys.frontier_leases())
        await rig.leases.flush()
        after = await rig.client.zcard(keys.frontier_leases())
        (child,) = await rig.pop()
        funnel = await rig.funnel_of()
        return (held, after, [i["attrs"] for i in rig.items],
                {k: child.request.get(k) for k in ("url", "curdepth", "priority", "meta",
                                                    "callback", "headers")},
                (funnel.submitted, funnel.queued, funnel.filtered, funnel.fetched))

    assert run_wander(redis_url, CHAIN, scenario) == (
        1, 0, [{"k": 1, "step": 0}],
        {"url": "http://example.com/1.html", "curdepth": 1, "priority": 5,
         "meta": {"step": 1}, "callback": "parse",
         "headers": {"Referer": ["http://example.com/0.html"]}},
        (2, 2, {}, {"200": 1}))


@pytest.mark.integration
def test_the_walk_ends_at_a_page_whose_drawn_link_was_seen(
        redis_client: redis.Redis, redis_url: str) -> None:
    async def scenario(rig: WanderRig) -> Any:
        await rig.seed("http://example.com/0.html", allowed_domains=["example.com"])
        for _ in range(10):
            popped = await rig.pop(1)
            if not popped:
                break
            await rig.processor.process(popped[0])
            await rig.leases.flush()
        info = (await rig.frontier.crawl_info("wandering", "app", "w1")).as_dict()
        funnel = await rig.funnel_of()
        return (rig.fetcher.fetched, [i["attrs"]["step"] for i in rig.items],
                info["total_pending"], info["in_flight"],
                await rig.client.zcard(keys.frontier_leases()),
                (funnel.submitted, funnel.queued, funnel.deduplicated, funnel.delivered))

    assert run_wander(redis_url, CHAIN, scenario) == (
        ["http://example.com/0.html", "http://example.com/1.html", "http://example.com/2.html"],
        [0, 1, 2], 0, 0, 0, (4, 3, 1, 0))


@pytest.mark.integration
def test_unreachable_redis_while_queueing_the_link_gives_the_lease_back_without_an_item(
        redis_client: redis.Redis, redis_url: str) -> None:
    async def scenario(rig: WanderRig) -> Any:
        await rig.seed("http://example.com/0.html")
        (leased,) = await rig.pop(1)
        await rig.process_with_redis_down(leased)
        return rig.items, [(q.request["url"], q.request.get("meta")) for q in await rig.pop()]

    assert run_wander(redis_url, CHAIN, scenario) == \
        ([], [("http://example.com/0.html", None)])


@pytest.mark.integration
def test_the_engine_wanders_until_the_walk_ends_and_acks_every_lease(
        redis_client: redis.Redis, redis_url: str) -> None:
    pages = {f"http://example.com/{n}.html": [f"/{n + 1}.html", f"/{n + 1}.html?v=b"]
             for n in range(8)}
    pages.update({f"http://example.com/{n}.html?v=b": [f"/{n + 1}.html"] for n in range(8)})
    pages["http://example.com/8.html"] = ["/0.html"]

    async def scenario(rig: WanderRig) -> Any:
        await rig.seed("http://example.com/0.html")
        engine = FastEngine(EngineParts(rig.frontier, rig.processor, rig.leases, lambda: VIEW),
                            policy=EnginePolicy(slots=4, per_domain=2, ack_flush_s=0.02,
                                                reap_interval_s=1))
        task = asyncio.create_task(engine.run())
        for _ in range(3000):  # at most ~30 s
            if len(rig.items) >= 9:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        engine.stop()
        await task
        info = (await rig.frontier.crawl_info("wandering", "app", "w1")).as_dict()
        return ([i["attrs"]["step"] for i in rig.items], len(rig.fetcher.fetched),
                await rig.client.zcard(keys.frontier_leases()), info["total_pending"])

    steps, fetched, leases, pending = run_wander(redis_url, pages, scenario, seed=5)
    assert (steps, fetched, leases, pending) == (list(range(9)), 9, 0, 0)
