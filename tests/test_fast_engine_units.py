"""The fast engine's logic with an injected fetcher (our own ``Fetcher`` seam).

Pure tests compare what the fast engine builds with what the Scrapy crawler's own code builds
for the same page. Tests marked ``integration`` run the page logic and the engine loop against
a real redis-server (the real ``AsyncFrontier``); only the HTTP client is replaced.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import redis
import redis.asyncio
from scrapy.http.headers import Headers
from scrapy.responsetypes import responsetypes

from scrapy_cluster import keys
from scrapy_cluster.crawler import response_items
from scrapy_cluster.crawler.common import items
from scrapy_cluster.crawler.common.address_guard import AddressGuard
from scrapy_cluster.crawler.common.revisit import RevisitState, digest
from scrapy_cluster.crawler.fast.app import build_politeness, ssrf_check
from scrapy_cluster.crawler.fast.domain_hooks import Politeness
from scrapy_cluster.crawler.fast.engine import EngineParts, EnginePolicy, FastEngine
from scrapy_cluster.crawler.fast.extract import LxmlExtractor
from scrapy_cluster.crawler.fast.fetch import (
    AiohttpFetcher,
    FetchError,
    FetchRequest,
    FetchResponse,
    too_large,
)
from scrapy_cluster.crawler.fast.pages import redirect_target, response_header_dict
from scrapy_cluster.crawler.fast.requests import build_request, header_dict, last_header
from scrapy_cluster.crawler.fast.robots import RobotsCache
from scrapy_cluster.crawler.page_links import page_links
from scrapy_cluster.frontier import AsyncFrontier
from scrapy_cluster.frontier.model import LeasedRequest
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.fast_engine import CRAWL, POLICY, VIEW, Rig, scrapy_request
from tests.support.services import free_port

PAGE_URL = "http://example.com/dir/page.html"
PAGE = (b'<html><head><base href="/sub/"></head><body><a href="a.html">A</a>'
        b'<a href="http://other.org/b c">B</a><a href="/x/doc.pdf">pdf</a>'
        b'<a href="mailto:x@y">m</a></body></html>')
HEADERS = (("content-type", "text/html; charset=utf-8"), ("Set-Cookie", "a=1"),
           ("set-cookie", "b=2"), ("Content-Length", str(len(PAGE))), ("Connection", "keep-alive"))


# --- the same item as the Scrapy crawler ----------------------------------------------------


def scrapy_item(stored: Mapping[str, Any], status: int, headers: tuple[tuple[str, str], ...],
                body: bytes) -> dict[str, Any]:
    request = scrapy_request(stored)
    raw = Headers()  # as Scrapy's HTTP/1.1 handler: the length first, no connection headers
    raw["Content-Length"] = str(len(body))
    for name, value in headers:
        if name.lower() not in ("content-length", "connection"):
            raw.appendlist(name, value)
    cls = responsetypes.from_args(headers=raw, url=request.url, body=body)
    response = cls(url=request.url, status=status, headers=raw, body=body, request=request)
    found = page_links(response, max_links=POLICY.max_links)
    return response_items.response_item(response, found.links, now_s=0.0, base64_body=False,
                               links_dropped=found.dropped)


def fast_item(stored: Mapping[str, Any], status: int, headers: tuple[tuple[str, str], ...],
              body: bytes) -> dict[str, Any]:
    request = build_request(stored, POLICY)
    response = FetchResponse(request.url, status, headers, body)
    found = LxmlExtractor()(body, url=request.url,
                            content_type=last_header(headers, "Content-Type"),
                            content_disposition=None, max_links=POLICY.max_links)
    return items.page_item(url=request.url, response_url=response.url, status=status,
                           response_headers=response_header_dict(response),
                           request_headers=header_dict(request.headers), body=body,
                           encoding=found.encoding, links=found.links, meta=stored, now_s=0.0,
                           base64_body=False, links_dropped=found.dropped)


def test_page_item_equals_the_scrapy_crawlers_for_the_same_page() -> None:
    stored = {**CRAWL, "url": PAGE_URL}
    assert fast_item(stored, 200, HEADERS, PAGE) == scrapy_item(stored, 200, HEADERS, PAGE)


def test_request_headers_equal_the_scrapy_middlewares_output() -> None:
    stored = {**CRAWL, "url": "http://example.com/é?q=1", "cookies": {"c": "3"}}
    request = build_request(stored, POLICY)
    assert (request.url, header_dict(request.headers)) == \
        (scrapy_request(stored).url, items.headers_to_dict(scrapy_request(stored).headers))


def test_error_item_equals_the_scrapy_crawlers_error_item() -> None:
    from scrapy.exceptions import IgnoreRequest

    stored = {**CRAWL, "url": PAGE_URL, "retry_times": 2}
    request = build_request(stored, POLICY)
    fast = items.failed_item(url=request.url, error_type="IgnoreRequest",
                             message=items.MAX_REDIRECTS_MESSAGE, reason="too_many_redirects",
                             request_headers=header_dict(request.headers), meta=stored,
                             now_s=0.0)
    assert fast == response_items.error_item(scrapy_request(stored),
                                    IgnoreRequest(items.MAX_REDIRECTS_MESSAGE), now_s=0.0)


def test_extracted_links_and_encoding_equal_scrapys_for_undeclared_latin1() -> None:
    body = b'<html><a href="caf\xe9.html">caf\xe9</a></html>'
    headers = (("Content-Type", "text/html"),)
    stored = {**CRAWL, "url": PAGE_URL}
    fast, scrapy = fast_item(stored, 200, headers, body), scrapy_item(stored, 200, headers, body)
    assert (fast["links"], fast["encoding"]) == (scrapy["links"], scrapy["encoding"])


def test_redirect_target_is_joined_and_keeps_the_fragment() -> None:
    assert redirect_target("http://a.org/x/y.html#top", "../z.html") == "http://a.org/z.html#top"


def test_a_domain_gets_at_most_its_share_of_the_slots() -> None:
    engine = FastEngine(EngineParts(None, None, None, lambda: VIEW),  # type: ignore[arg-type]
                        policy=EnginePolicy(slots=8, per_domain=4, ack_flush_s=1,
                                            reap_interval_s=1))
    shares = []
    for domain in ("a.org", "b.org", "c.org"):
        engine._waiting[domain].append((None, None))  # type: ignore[arg-type]
        shares.append(engine.domain_cap())
    assert shares == [4, 4, 2]


def test_ssrf_check_refuses_loopback_with_the_scrapy_crawlers_message() -> None:
    message = asyncio.run(ssrf_check(AddressGuard())("http://127.0.0.1:8080/x"))
    assert message is not None and message.startswith(
        "refused http://127.0.0.1:8080/x: 127.0.0.1 is a loopback address (127.0.0.1)")


def test_robots_txt_is_read_once_per_host_and_obeyed() -> None:
    fetched: list[str] = []

    async def fetch(request: FetchRequest) -> FetchResponse:
        fetched.append(request.url)
        return FetchResponse(request.url, 200, (), b"User-agent: *\nDisallow: /private/\n")

    async def run() -> list[bool]:
        robots = RobotsCache(fetch)
        return [await robots.allowed(url, "ua") for url in
                ("http://a.org/p.html", "http://a.org/private/s.html", "http://a.org/q.html")]

    assert (asyncio.run(run()), fetched) == ([True, False, True], ["http://a.org/robots.txt"])


# --- the real HTTP client against the test site ---------------------------------------------


@pytest.fixture(scope="module")
def site() -> Iterator[SiteServer]:
    with SiteServer(SiteConfig(huge_page_bytes=200_000, slow_page_s=2.0), free_port()) as server:
        yield server


def fetch_once(url: str, *, timeout_s: float = 5.0, max_bytes: int = 0) -> FetchResponse:
    async def run() -> FetchResponse:
        fetcher = AiohttpFetcher(connections=2)
        try:
            return await fetcher.fetch(FetchRequest(url), timeout_s=timeout_s,
                                       max_bytes=max_bytes)
        finally:
            await fetcher.close()

    return asyncio.run(run())


@pytest.mark.integration
def test_fetcher_stops_reading_at_download_maxsize(site: SiteServer) -> None:
    with pytest.raises(FetchError) as raised:
        fetch_once(site.site.url("127.0.0.2", "/special/huge.html"), max_bytes=10_000)
    assert (raised.value.reason, raised.value.retryable) == ("too_large", False)


@pytest.mark.integration
def test_fetcher_gives_up_after_download_timeout(site: SiteServer) -> None:
    with pytest.raises(FetchError) as raised:
        fetch_once(site.site.url("127.0.0.2", "/special/slow.html"), timeout_s=0.3)
    assert (raised.value.error_type, raised.value.reason) == ("DownloadTimeoutError", "timeout")


@pytest.mark.integration
def test_fetcher_reports_a_refused_connection() -> None:
    with pytest.raises(FetchError) as raised:
        fetch_once(f"http://127.0.0.2:{free_port('127.0.0.2')}/x")
    assert raised.value.error_type == "DownloadConnectionRefusedError"


# --- the page logic on a real frontier ------------------------------------------------------


def html(url: str, *links: str, status: int = 200) -> FetchResponse:
    body = "".join(f'<a href="{link}">{link}</a>' for link in links).encode()
    return FetchResponse(url, status, (("Content-Type", "text/html"),), body)


def run_rig(redis_url: str, answers: Mapping[str, FetchResponse | FetchError],
            scenario: Any, **kwargs: Any) -> Any:
    async def run() -> Any:
        rig = Rig(redis_url, answers, **kwargs)
        try:
            return await scenario(rig)
        finally:
            await rig.close()

    return asyncio.run(run())


@pytest.mark.integration
def test_page_links_are_filtered_queued_and_the_item_produced(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"
    answers = {seed: html(seed, "/q.html", "http://b.org/x.html", "/doc.pdf", "/q.html")}

    async def scenario(rig: Rig) -> Any:
        await rig.seed(seed, allowed_domains=["a.org"])
        queued = await rig.crawl_one()
        return ([(q.request["url"], q.request["curdepth"], q.request["priority"])
                 for q in queued], [i["url"] for i in rig.items])

    assert run_rig(redis_url, answers, scenario) == \
        ([("http://a.org/q.html", 1, -5)], [seed])


@pytest.mark.integration
def test_links_of_a_page_at_maxdepth_are_counted_not_queued(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"

    async def scenario(rig: Rig) -> Any:
        await rig.seed(seed, maxdepth=1, curdepth=1)
        queued = await rig.crawl_one()
        funnel = (await rig.frontier.crawl_funnels("link", ["c1"]))["c1"]
        return len(queued), funnel.filtered

    assert run_rig(redis_url, {seed: html(seed, "/q.html", "/r.html")}, scenario) == \
        (0, {"maxdepth": 2})


@pytest.mark.integration
def test_a_redirect_queues_its_target_and_finishes_the_lease(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed, target = "http://a.org/old.html", "http://a.org/new.html"
    answers = {seed: FetchResponse(seed, 301, (("Location", "/new.html"),), b"")}

    async def scenario(rig: Rig) -> Any:
        await rig.seed(seed)
        (queued,) = await rig.crawl_one()
        leases = await rig.client.zcard(keys.frontier_leases())
        return queued.request["url"], queued.request["redirect_times"], leases, rig.items

    assert run_rig(redis_url, answers, scenario) == (target, 1, 1, [])


@pytest.mark.integration
def test_a_redirect_past_redirect_max_times_yields_a_too_many_redirects_item(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/loop.html"
    answers = {seed: FetchResponse(seed, 302, (("Location", "/loop.html"),), b"")}

    async def scenario(rig: Rig) -> Any:
        await rig.frontier.enqueue_many([{**CRAWL, "url": seed, "redirect_times": 3}])
        queued = await rig.crawl_one()
        return len(queued), [(i["url"], i["error"]["reason"]) for i in rig.items]

    assert run_rig(redis_url, answers, scenario) == (0, [(seed, "too_many_redirects")])


@pytest.mark.integration
def test_a_server_error_is_retried_through_the_frontier_then_produces_its_page(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/e.html"

    async def scenario(rig: Rig) -> Any:
        await rig.seed(seed)
        seen = []
        for _ in range(3):
            (leased,) = await rig.pop(1)
            seen.append((leased.request.get("retry_times", 0), leased.request["priority"]))
            await rig.processor.process(leased)
        await rig.leases.flush()
        return seen, [i["status_code"] for i in rig.items], await rig.pop()

    assert run_rig(redis_url, {seed: html(seed, status=500)}, scenario) == \
        ([(0, 5), (1, 4), (2, 3)], [500], [])


@pytest.mark.integration
def test_a_connection_failure_after_retries_yields_an_error_item(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/down.html"
    refused = FetchError("refused", error_type="DownloadConnectionRefusedError")

    async def scenario(rig: Rig) -> Any:
        await rig.frontier.enqueue_many([{**CRAWL, "url": seed, "retry_times": 2}])
        await rig.crawl_one()
        return [(i["error"]["type"], i["error"]["reason"], i["retry_times"]) for i in rig.items]

    assert run_rig(redis_url, {seed: refused}, scenario) == \
        [("DownloadConnectionRefusedError", "download_failed", 2)]


@pytest.mark.integration
def test_a_body_past_download_maxsize_is_not_retried(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/big.html"

    async def scenario(rig: Rig) -> Any:
        await rig.seed(seed)
        queued = await rig.crawl_one()
        return len(queued), [(i["error"]["reason"], i["retry_times"]) for i in rig.items]

    assert run_rig(redis_url, {seed: too_large(seed, 10, None)}, scenario) == \
        (0, [("too_large", 0)])


@pytest.mark.integration
def test_a_page_robots_txt_disallows_yields_a_robots_error_item_unfetched(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/private/s.html"

    async def robots_txt(request: FetchRequest) -> FetchResponse:
        return FetchResponse(request.url, 200, (), b"User-agent: *\nDisallow: /private/\n")

    async def scenario(rig: Rig) -> Any:
        await rig.seed(seed)
        await rig.crawl_one()
        funnel = (await rig.frontier.crawl_funnels("link", ["c1"]))["c1"]
        return ([(i["error"]["message"], i["error"]["reason"]) for i in rig.items],
                rig.fetcher.fetched, funnel.filtered)

    assert run_rig(redis_url, {}, scenario, robots=RobotsCache(robots_txt)) == \
        ([("Forbidden by robots.txt", "robots")], [], {"robots": 1})


@pytest.mark.integration
def test_unreachable_redis_while_queueing_links_gives_the_lease_back(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"

    async def scenario(rig: Rig) -> Any:
        await rig.seed(seed)
        (leased,) = await rig.pop(1)
        await rig.process_with_redis_down(leased)
        return rig.items, [q.request["url"] for q in await rig.pop()]

    assert run_rig(redis_url, {seed: html(seed, "/q.html")}, scenario) == ([], [seed])


@pytest.mark.integration
def test_the_engine_crawls_a_small_site_once_and_acks_every_lease(
        redis_client: redis.Redis, redis_url: str) -> None:
    pages = {f"http://a.org/{n}.html": [f"/{(n + 1) % 6}.html", f"/{(n + 2) % 6}.html"]
             for n in range(6)}
    answers = {url: html(url, *links) for url, links in pages.items()}

    async def scenario(rig: Rig) -> Any:
        await rig.seed("http://a.org/0.html", maxdepth=5)
        engine = FastEngine(EngineParts(rig.frontier, rig.processor, rig.leases, lambda: VIEW),
                            policy=EnginePolicy(slots=4, per_domain=2, ack_flush_s=0.02,
                                                reap_interval_s=1))
        task = asyncio.create_task(engine.run())
        for _ in range(3000):  # at most ~30 s
            if len(rig.items) >= len(pages):
                break
            await asyncio.sleep(0.01)
        engine.stop()
        await task
        return (sorted(i["url"] for i in rig.items), await rig.client.zcard(
            keys.frontier_leases()), (await rig.frontier.crawl_info("link", "app", "c1")).as_dict())

    urls, leases, info = run_rig(redis_url, answers, scenario)
    assert (urls, leases, info["total_pending"], info["in_flight"]) == \
        (sorted(pages), 0, 0, 0)


def politeness_for(rig: Rig, client: redis.Redis) -> Politeness:
    settings = load_settings("crawler", environ={}, overrides={"QUEUE_WINDOW": 0})
    return build_politeness(settings, POLICY, rig.frontier, lambda: VIEW, client)


@pytest.mark.integration
def test_a_429_with_retry_after_pauses_its_domain_for_the_cluster(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/busy.html"
    answers = {seed: FetchResponse(seed, 429, (("Retry-After", "30"),), b"")}

    async def scenario(rig: Rig) -> Any:
        rig.processor.politeness = politeness_for(rig, redis_client)
        await rig.frontier.enqueue_many([{**CRAWL, "url": seed, "retry_times": 2}])
        await rig.crawl_one()
        return [i["status_code"] for i in rig.items]

    assert run_rig(redis_url, answers, scenario) == [429]
    assert redis_client.hexists(keys.domain_paused(), "a.org")


@pytest.mark.integration
def test_a_robots_crawl_delay_slows_the_domain_for_the_cluster(
        redis_client: redis.Redis, redis_url: str) -> None:
    async def robots_txt(request: FetchRequest) -> FetchResponse:
        return FetchResponse(request.url, 200, (), b"User-agent: *\nCrawl-delay: 3\n")

    async def scenario(rig: Rig) -> Any:
        politeness = politeness_for(rig, redis_client)
        robots = RobotsCache(robots_txt, on_parsed=politeness.robots_parsed)
        return await robots.allowed("http://www.a.org/p.html", "ua")

    assert run_rig(redis_url, {}, scenario) is True
    assert redis_client.hexists(keys.domain_throttle_config(), "a.org")


@pytest.mark.integration
def test_a_large_page_is_parsed_off_the_event_loop_a_small_one_on_it(
        redis_client: redis.Redis, redis_url: str) -> None:
    import threading

    from scrapy_cluster.crawler.fast import pages as pages_module

    small, large = "http://a.org/small.html", "http://a.org/large.html"
    filler = "<p>" + "x" * pages_module.OFFLOAD_EXTRACT_BYTES + "</p>"
    answers = {small: html(small, "/s.html"),
               large: FetchResponse(large, 200, (("Content-Type", "text/html"),),
                                    (filler + '<a href="/l.html">l</a>').encode())}

    async def scenario(rig: Rig) -> Any:
        threads: dict[str, int] = {}
        extract = rig.processor.extractor

        def recording(body: bytes, **kwargs: Any) -> Any:
            threads[kwargs["url"]] = threading.get_ident()
            return extract(body, **kwargs)

        rig.processor.extractor = recording
        await rig.seed(small)
        await rig.seed(large)
        for leased in await rig.pop(2):
            await rig.processor.process(leased)
        await rig.leases.flush()
        queued = sorted(q.request["url"] for q in await rig.pop())
        return threads, threading.get_ident(), queued

    threads, loop_thread, queued = run_rig(redis_url, answers, scenario)
    assert threads[small] == loop_thread
    assert threads[large] != loop_thread
    assert queued == ["http://a.org/l.html", "http://a.org/s.html"]


@pytest.mark.integration
def test_a_page_that_raises_gets_an_error_item_not_a_retry_loop(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"

    async def scenario(rig: Rig) -> Any:
        await rig.seed(seed)
        (leased,) = await rig.pop(1)
        rig.processor.failed(leased, RuntimeError("boom"))
        await rig.leases.flush()
        info = await rig.frontier.crawl_info("link", "app", "c1")
        funnel = (await rig.frontier.crawl_funnels("link", ["c1"]))["c1"]
        return rig.items, info.in_flight, info.total_pending, funnel.dropped

    items, in_flight, pending, dropped = run_rig(redis_url, {}, scenario)
    assert [(i["url"], i["error"]) for i in items] == \
        [(seed, {"type": "RuntimeError", "message": "boom", "reason": "download_failed"})]
    assert (in_flight, pending, dropped) == (0, 0, 1)


class GatedLinks:
    """Our ``enqueue_many`` seam, held shut until the test opens it (a slow Redis)."""

    def __init__(self, frontier: AsyncFrontier) -> None:
        self.frontier, self.open = frontier, asyncio.Event()

    async def enqueue_many(self, requests: Any, *, dedupe: bool = False,
                           funnel: bool = True) -> Any:
        await self.open.wait()
        return await self.frontier.enqueue_many(requests, dedupe=dedupe, funnel=funnel)


@pytest.mark.integration
def test_a_downloaded_page_frees_its_slot_and_at_most_four_times_the_slots_are_in_hand(
        redis_client: redis.Redis, redis_url: str) -> None:
    pages = [f"http://a.org/{n}.html" for n in range(10)]
    answers = {url: html(url, "/next.html") for url in pages}

    async def scenario(rig: Rig) -> Any:
        for url in pages:
            await rig.seed(url, maxdepth=1)
        gate = GatedLinks(rig.frontier)
        rig.processor.frontier = gate
        engine = FastEngine(EngineParts(rig.frontier, rig.processor, rig.leases, lambda: VIEW),
                            policy=EnginePolicy(slots=2, per_domain=2, ack_flush_s=0.02,
                                                reap_interval_s=1))
        task = asyncio.create_task(engine.run())
        for _ in range(500):  # at most ~5 s
            if len(rig.fetcher.fetched) >= 8:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # nothing more may start while the links wait
        while_shut = list(rig.fetcher.fetched)
        gate.open.set()
        for _ in range(1000):
            if len(rig.items) > len(pages):
                break
            await asyncio.sleep(0.01)
        engine.stop()
        await task
        return while_shut, sorted(i["url"] for i in rig.items)

    while_shut, delivered = run_rig(redis_url, answers, scenario)
    # 2 slots downloading, then 6 more pages past their download (PAGES_IN_HAND_PER_SLOT 4)
    assert len(while_shut) == 8
    assert delivered == sorted([*pages, "http://a.org/next.html"])


# --- re-crawls: conditional GET, 304, unchanged pages, the revisit acked -------------------

RECRAWL = {"interval": 60}
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


class RecordingFetcher:
    """``SiteFetcher`` that also keeps every request sent (to read its headers)."""

    def __init__(self, answers: Mapping[str, FetchResponse | FetchError]) -> None:
        self.answers = answers
        self.sent: list[FetchRequest] = []

    async def fetch(self, request: FetchRequest, *, timeout_s: float,
                    max_bytes: int) -> FetchResponse:
        self.sent.append(request)
        answer = self.answers[request.url]
        if isinstance(answer, FetchError):
            raise answer
        return answer

    async def close(self) -> None:
        return None


def recrawl_state(body: bytes, *, fetches: int = 1, etag: str | None = None) -> str:
    return RevisitState(60, fetches, digest(body), 1445412480, etag).encode()


async def refetch(rig: Rig, url: str, state: str | None, **fields: Any) -> Any:
    """Seed ``url`` with a re-crawl policy, pop it as if its previous fetch left ``state``,
    process it: the flush plan (not sent) and the requests it queued."""
    await rig.seed(url, **{"recrawl": RECRAWL, **fields})
    (leased,) = await rig.pop(1)
    await rig.processor.process(dataclasses.replace(leased, revisit=state))
    plan = rig.leases.plan_flush()
    return plan, leased.lease_id, await rig.pop()


def run_refetch(redis_url: str, answer: FetchResponse | FetchError, state: str | None,
                **fields: Any) -> tuple[Any, str, list[LeasedRequest], list[Any], list[Any]]:
    fetcher = RecordingFetcher({answer.url if isinstance(answer, FetchResponse)
                                else "http://a.org/p.html": answer})

    async def scenario(rig: Rig) -> Any:
        plan, lease_id, queued = await refetch(rig, "http://a.org/p.html", state, **fields)
        return plan, lease_id, queued, rig.items

    plan, lease_id, queued, sent_items = run_rig(redis_url, {}, scenario, fetcher=fetcher)
    return plan, lease_id, queued, sent_items, fetcher.sent


@pytest.mark.integration
def test_a_refetch_sends_the_validators_and_a_304_gives_the_small_item_and_no_links(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"
    state = recrawl_state(b"old", fetches=3, etag='"v1"')
    plan, lease_id, queued, sent_items, sent = run_refetch(
        redis_url, FetchResponse(seed, 304, (("ETag", '"v1"'),)), state)
    headers = header_dict(sent[0].headers)
    assert (headers["If-None-Match"], headers["If-Modified-Since"]) == (['"v1"'], [LAST_MODIFIED])
    (item,) = sent_items
    assert (item["status_code"], item["not_modified"], item["recrawl_fetch"], item["links"],
            "body" in item) == (304, True, 4, [], False)
    assert queued == []
    assert plan.ack == [lease_id] and plan.revisits[lease_id].delay_ms == 60_000


@pytest.mark.integration
def test_an_unchanged_200_extracts_no_link_and_none_gives_no_item(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"
    page = html(seed, "/q.html")
    plan, lease_id, queued, sent_items, _ = run_refetch(
        redis_url, page, recrawl_state(page.body),
        recrawl={**RECRAWL, "not_modified": "none"})
    assert (sent_items, queued, list(plan.revisits)) == ([], [], [lease_id])


@pytest.mark.integration
def test_a_changed_page_gives_its_item_and_links_that_inherit_the_policy(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"
    plan, lease_id, queued, sent_items, sent = run_refetch(
        redis_url, html(seed, "/q.html"), recrawl_state(b"before", fetches=1))
    (item,) = sent_items
    assert (item["recrawl_fetch"], "not_modified" in item, item["links"][0]["url"]) == \
        (2, False, "http://a.org/q.html")
    assert [(q.request["url"], q.request["recrawl"]) for q in queued] == \
        [("http://a.org/q.html", RECRAWL)]
    assert "If-None-Match" not in header_dict(sent[0].headers)
    assert lease_id in plan.revisits


@pytest.mark.integration
def test_a_link_of_a_seeds_only_policy_carries_no_recrawl(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"
    _, lease_id, queued, _, _ = run_refetch(
        redis_url, html(seed, "/q.html"), None, recrawl={**RECRAWL, "links": False})
    assert [("recrawl" in q.request) for q in queued] == [False]


@pytest.mark.integration
def test_a_seeds_only_policy_schedules_no_page_below_the_seed(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"
    plan, _, _, sent_items, _ = run_refetch(redis_url, html(seed), None, curdepth=1,
                                            recrawl={**RECRAWL, "links": False})
    assert (plan.revisits, sent_items[0]["recrawl_fetch"]) == ({}, 1)


@pytest.mark.integration
def test_a_download_failed_for_good_stays_scheduled_and_a_retry_carries_the_state(
        redis_client: redis.Redis, redis_url: str) -> None:
    refused = FetchError("refused", error_type="DownloadConnectionRefusedError")
    state = recrawl_state(b"old", etag='"v1"')
    plan, lease_id, queued, _, _ = run_refetch(redis_url, refused, state)
    (retry,) = queued  # RETRY_TIMES is 2: first a retry, carrying the state
    assert (retry.request["recrawl_state"], plan.revisits) == (state, {})

    plan, lease_id, _, sent_items, _ = run_refetch(redis_url, refused, state, retry_times=2,
                                                   crawlid="c2")
    assert sent_items[0]["error"]["type"] == "DownloadConnectionRefusedError"
    assert plan.revisits[lease_id].delay_ms == 60_000


@pytest.mark.integration
def test_the_ack_hands_the_revisit_to_the_frontiers_schedule(
        redis_client: redis.Redis, redis_url: str) -> None:
    seed = "http://a.org/p.html"

    async def scenario(rig: Rig) -> Any:
        await rig.seed(seed, recrawl=RECRAWL)
        await rig.crawl_one()
        info = await rig.frontier.crawl_info("link", "app", "c1")
        return info.scheduled, info.in_flight, [i["recrawl_fetch"] for i in rig.items]

    assert run_rig(redis_url, {seed: html(seed)}, scenario) == (1, 0, [1])
