"""What one leased request becomes in the fast engine, with a spider's semantics
(``fast/spiders.py``: ``link`` or ``wandering``).

``PageProcessor.process`` takes a popped request through the SSRF guard, robots.txt, the
download, then one of: a retry back to the frontier (RETRY_TIMES, RETRY_HTTP_CODES, failures
worth another try), a redirect back to the frontier (target not deduplicated, carrying
``redirect_times``; past REDIRECT_MAX_TIMES an error item), or the page: the requests its
spider makes of its links (``link``: every link the crawl's rules allow; ``wandering``: one of
them) queued in ONE ``enqueue_many(dedupe=True)``, then its item. The lease is finished only
after that; when Redis is unreachable while queueing links it is given back (released, crawled
again, no item now). Round trips per page: 1 (the links' enqueue; 0 with nothing to queue), or
1 for a retry or redirect, 0 for an error item; the ack is shared by the batch.

A request with a ``recrawl`` policy (``common/revisit.py``) is sent with the conditional headers
of its previous fetch; a 304, or a body equal to the previous one, extracts no link and gives a
small ``not_modified`` item (or none, per the policy); the verdict's ``Revisit`` goes with the
lease's acknowledgement. A request without one costs one dict lookup more.

A request carrying ``sitemap`` (a robots.txt or a sitemap, ``common/sitemap_flow.py``) is
fetched the same way, but its response is no page: where a page's links would be read, the
requests its ``Sitemap:`` lines or entries make are queued in batches (each ONE
``enqueue_many(dedupe=True)``), its refusals and stop counted in the funnel, and no item is
sent; the lease is finished after the last batch. A request without one costs one dict lookup
more.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from scrapy.utils.url import strip_url
from w3lib.url import safe_url_string

from scrapy_cluster.crawler.common import items
from scrapy_cluster.crawler.common import revisit as recrawl
from scrapy_cluster.crawler.common.funnel import ROBOTS_MESSAGE, FunnelCounter
from scrapy_cluster.crawler.common.response_stats import NO_RESPONSE
from scrapy_cluster.crawler.common.sitemap_flow import SITEMAP_FIELD, SitemapFlow, previous_fetch_s
from scrapy_cluster.crawler.fast.async_lease_book import AsyncLeaseBook
from scrapy_cluster.crawler.fast.domain_hooks import Politeness
from scrapy_cluster.crawler.fast.extract import Extractor
from scrapy_cluster.crawler.fast.fetch import (
    CONNECTION_HEADERS,
    Fetcher,
    FetchError,
    FetchRequest,
    FetchResponse,
)
from scrapy_cluster.crawler.fast.policy import PagePolicy
from scrapy_cluster.crawler.fast.requests import (
    build_request,
    header_dict,
    last_header,
    stored_headers,
)
from scrapy_cluster.crawler.fast.robots import RobotsCache
from scrapy_cluster.crawler.fast.spiders import FastSpider, LinkSpider
from scrapy_cluster.frontier.model import LeasedRequest
from scrapy_cluster.log_fields import request_fields
from scrapy_cluster.outage import is_redis_outage

logger = logging.getLogger(__name__)

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
OFFLOAD_EXTRACT_BYTES = 128 * 1024
"""Bodies larger than this are parsed in a worker thread (a 128 KB page takes ~2 ms)."""


class LinkQueue(Protocol):
    async def enqueue_many(self, requests: Sequence[dict[str, Any]], *, dedupe: bool = False,
                           funnel: bool = True) -> Any: ...


class Observer(Protocol):
    """Per-download counts (``ResponseStats`` + ``FetchTelemetry``); no I/O."""

    def response(self, domain: str, url: str, status: int, waited_s: float | None) -> None: ...

    def failure(self, domain: str, url: str, error: FetchError) -> None: ...


SsrfCheck = Callable[[str], Any]
"""``async (url) -> str | None``: why the URL's address is refused, or None."""


@dataclass(frozen=True)
class PageParts:
    """What a ``PageProcessor`` works with: the seams every page goes through, then the
    optional hooks (``robots``: robots.txt, ``ssrf``: the SSRF guard's first step,
    ``observer``: per-download counts, ``politeness``: late sends, Retry-After, Crawl-delay,
    ``on_give_back``: told when a page is given back); ``spider`` None: ``link``."""

    fetcher: Fetcher
    extractor: Extractor
    frontier: LinkQueue
    leases: AsyncLeaseBook
    send: Callable[[dict[str, Any]], None]
    funnel: FunnelCounter
    spider: FastSpider | None = None
    robots: RobotsCache | None = None
    ssrf: SsrfCheck | None = None
    observer: Observer | None = None
    politeness: Politeness | None = None
    on_give_back: Callable[[BaseException, str], None] | None = None


class PageProcessor:
    """One leased request to its outcome (see module docstring)."""

    def __init__(self, parts: PageParts, policy: PagePolicy, *,
                 now_s: Callable[[], float] = time.time) -> None:
        self.spider: FastSpider = parts.spider if parts.spider is not None else LinkSpider()
        self.fetcher, self.extractor, self.frontier = parts.fetcher, parts.extractor, parts.frontier
        self.leases, self.send, self.funnel = parts.leases, parts.send, parts.funnel
        self.robots, self.ssrf, self.observer = parts.robots, parts.ssrf, parts.observer
        self.on_give_back, self.politeness = parts.on_give_back, parts.politeness
        self.policy, self.now_s = policy, now_s

    async def process(self, leased: LeasedRequest, *, enqueued_at_s: float | None = None,
                      fetched: Callable[[], None] | None = None) -> None:
        """Handle one popped request (held in ``leases``) until its lease is finished or given
        back. ``fetched`` is called once the download is over (answered or failed)."""
        stored = leased.request
        try:
            request = build_request(stored, self.policy)
        except (KeyError, TypeError, ValueError) as exc:
            self.funnel.add(stored, "dropped")
            self.leases.finish(leased.lease_id)
            raise ValueError(f"malformed queued request: {exc}") from exc
        refetch = None
        if recrawl.RECRAWL_FIELD in stored:
            request, refetch = _conditional(request, leased)
        if await self._refused(leased, request):
            return
        if self.politeness is not None:
            await self.politeness.sending(leased)
        try:
            response = await self.fetcher.fetch(request, timeout_s=self.policy.download_timeout_s,
                                                max_bytes=self.policy.download_maxsize)
        except FetchError as exc:
            if fetched is not None:
                fetched()
            await self._failed(leased, request, exc, refetch)
            return
        if fetched is not None:
            fetched()
        waited_s = None if enqueued_at_s is None else time.monotonic() - enqueued_at_s
        self.funnel.add(stored, f"fetched:{response.status}")
        logger.debug("Crawled (%d) <%s %s>", response.status, request.method, request.url,
                     extra=request_fields([stored]))  # as Scrapy's engine logs each response
        if self.observer is not None:
            self.observer.response(leased.domain, request.url, response.status, waited_s)
        if self.politeness is not None:
            await self.politeness.response(leased.domain, response.status,
                                           last_header(response.headers, "Retry-After"))
        if response.status in self.policy.retry_http_codes and await self._retry(leased, refetch):
            return
        if await self._redirected(leased, request, response, refetch):
            return
        await self._page(leased, request, response, refetch)

    async def _refused(self, leased: LeasedRequest, request: FetchRequest) -> bool:
        """SSRF guard, then robots.txt: an error item and ``filtered:<reason>`` when refused."""
        refusal: tuple[str, str, str] | None = None
        if self.ssrf is not None:
            message = await self.ssrf(request.url)
            if message is not None:
                refusal = ("ForbiddenAddress", message, "ssrf")
        if refusal is None and self.robots is not None and self.policy.robots_obey:
            agent = header_dict(request.headers).get("User-Agent", [self.policy.user_agent])[-1]
            if not await self.robots.allowed(request.url, agent):
                refusal = ("IgnoreRequest", ROBOTS_MESSAGE, "robots")
        if refusal is None:
            return False
        error_type, message, reason = refusal
        self.funnel.add(leased.request, f"filtered:{reason}")
        # refused before the header middlewares ran, as in the Scrapy crawler
        self._error_item(leased, request, error_type, message, reason,
                         headers=stored_headers(leased.request))
        return True

    async def _failed(self, leased: LeasedRequest, request: FetchRequest,
                      error: FetchError, refetch: recrawl.Refetch | None = None) -> None:
        self.funnel.add(leased.request, f"fetched:{NO_RESPONSE}")
        if self.observer is not None:
            self.observer.failure(leased.domain, request.url, error)
        if error.retryable and await self._retry(leased, refetch):
            return
        self.funnel.add(leased.request, "dropped")
        if refetch is not None:  # failed for good: judged as an error, so it stays scheduled
            verdict = refetch.judge(depth=leased.request.get("curdepth"), status=None,
                                    headers={}, body=b"", now_s=self.now_s())
            self.leases.schedule(leased.lease_id, verdict.revisit)
        self._error_item(leased, request, error.error_type, str(error), error.reason)

    def _error_item(self, leased: LeasedRequest, request: FetchRequest, error_type: str,
                    message: str, reason: str,
                    headers: dict[str, list[str]] | None = None) -> None:
        self.send(items.failed_item(
            url=request.url, error_type=error_type, message=message, reason=reason,
            request_headers=header_dict(request.headers) if headers is None else headers,
            meta=leased.request, now_s=self.now_s()))
        self.leases.finish(leased.lease_id)

    def failed(self, leased: LeasedRequest, exc: BaseException) -> None:
        """A page whose handling raised (a bug, not an outage): an error item naming the
        exception and the lease finished, so the page is neither lost silently nor fetched
        again for ever. No I/O."""
        self.funnel.add(leased.request, "dropped")
        self.send(items.failed_item(
            url=str(leased.request.get("url")), error_type=type(exc).__name__,
            message=str(exc) or type(exc).__name__, reason="download_failed",
            request_headers={}, meta=leased.request, now_s=self.now_s()))
        self.leases.finish(leased.lease_id)

    async def _retry(self, leased: LeasedRequest, refetch: recrawl.Refetch | None = None) -> bool:
        """Queue the request again with ``retry_times + 1`` at lower priority (ONE round trip)
        and finish its lease; False when retries are used up or Redis is unreachable (the
        caller then produces the final item)."""
        stored = leased.request
        if stored.get("meta", {}).get("dont_retry") \
                or int(stored.get("retry_times") or 0) >= self.policy.retry_times:
            return False
        retry = {**stored, "retry_times": int(stored.get("retry_times") or 0) + 1,
                 "priority": int(stored.get("priority") or 0) + self.policy.retry_priority_adjust,
                 "dont_filter": True}
        if refetch is not None:
            retry.update(refetch.retry_fields())
        try:
            await self.frontier.enqueue_many([retry], dedupe=False, funnel=False)
        except Exception:  # noqa: BLE001 - Redis down: the item is produced instead
            return False
        self.funnel.add(stored, "retried")
        self.leases.finish(leased.lease_id)
        return True

    async def _redirected(self, leased: LeasedRequest, request: FetchRequest,
                          response: FetchResponse, refetch: recrawl.Refetch | None = None) -> bool:
        location = last_header(response.headers, "Location")
        if response.status not in REDIRECT_STATUSES or location is None:
            return False
        stored = leased.request
        try:
            target = redirect_target(request.url, location)
        except ValueError as exc:  # 'http://[::1': Scrapy's RedirectMiddleware fails the same way
            self.funnel.add(stored, "dropped")
            self._error_item(leased, request, "ValueError", str(exc), "download_failed")
            return True
        if "://" not in target and not target.startswith(("about:", "data:")):
            # javascript:, mailto:: scrapy.Request refuses the URL, so the Scrapy engine's
            # RedirectMiddleware fails the request with this error
            self.funnel.add(stored, "dropped")
            self._error_item(leased, request, "ValueError",
                             f"Missing scheme in request url: {target}", "download_failed")
            return True
        if urlsplit(target).scheme not in ("http", "https"):
            return False
        times = int(stored.get("redirect_times") or 0) + 1
        if times > self.policy.redirect_max_times:
            self.funnel.add(stored, "dropped")
            self._error_item(leased, request, "IgnoreRequest", items.MAX_REDIRECTS_MESSAGE,
                             "too_many_redirects")
            return True
        queued = {**stored, "url": target, "redirect_times": times,
                  "headers": redirect_headers(request, target),
                  "priority": int(stored.get("priority") or 0)
                  + self.policy.redirect_priority_adjust}
        if refetch is not None:  # the target starts its own schedule: no validators, no state
            queued["headers"] = {name: values for name, values in queued["headers"].items()
                                 if name not in refetch.headers}
            queued.pop(recrawl.RETRY_STATE_FIELD, None)
        if await self._enqueue(leased, [queued], dedupe=False, url=request.url):
            self.leases.finish(leased.lease_id)
        return True

    async def _page(self, leased: LeasedRequest, request: FetchRequest,
                    response: FetchResponse, refetch: recrawl.Refetch | None = None) -> None:
        stored = leased.request
        if SITEMAP_FIELD in stored:  # a robots.txt or a sitemap: no page
            await self._sitemap(leased, request, response, refetch)
            return
        verdict = None
        if refetch is not None:
            verdict = refetch.judge(depth=stored.get("curdepth"), status=response.status,
                                    headers=dict(response.headers), body=response.body,
                                    now_s=self.now_s())
            if verdict.not_modified:
                self._not_modified(leased, request, response, refetch, verdict)
                return
        extract = functools.partial(
            self.extractor, response.body, url=request.url,
            content_type=last_header(response.headers, "Content-Type"),
            content_disposition=last_header(response.headers, "Content-Disposition"),
            max_links=self.policy.max_links)
        # a large page is parsed in a worker thread (lxml releases the GIL while it parses),
        # so it does not hold up the other requests' sends; a typical page costs less than
        # the thread hand-off
        extracted = await asyncio.to_thread(extract) \
            if len(response.body) > OFFLOAD_EXTRACT_BYTES else extract()
        followed = self.spider.follow(
            stored, url=request.url, response_url=response.url,
            response_headers=response.headers, links=extracted.links,
            dropped=extracted.dropped, now_s=self.now_s())
        if followed.requests and not await self._enqueue(leased, followed.requests, dedupe=True,
                                                         url=request.url):
            return
        if followed.filtered:
            self.funnel.add_filtered(followed.crawl, followed.filtered)
        item = self.spider.item(items.page_item(
            url=request.url, response_url=response.url, status=response.status,
            response_headers=response_header_dict(response),
            request_headers=header_dict(request.headers), body=response.body,
            encoding=extracted.encoding, links=extracted.links, meta=stored,
            now_s=self.now_s(), base64_body=self.policy.base64_body,
            links_dropped=extracted.dropped), stored)
        if verdict is not None:
            self.leases.schedule(leased.lease_id, verdict.revisit)
            recrawl.mark_item(item, verdict)
        self.send(item)
        self.leases.finish(leased.lease_id)

    async def _sitemap(self, leased: LeasedRequest, request: FetchRequest,
                       response: FetchResponse, refetch: recrawl.Refetch | None) -> None:
        """A robots.txt or sitemap response: the requests it makes queued batch by batch (a
        large body parsed in a worker thread), counts and log lines, no item; the lease
        finished last (given back when Redis is unreachable)."""
        stored = leased.request
        verdict = None
        if refetch is not None:
            verdict = refetch.judge(depth=stored.get("curdepth"), status=response.status,
                                    headers=dict(response.headers), body=response.body,
                                    now_s=self.now_s())
        if verdict is None or not verdict.not_modified:  # an unchanged sitemap is not read
            flow = SitemapFlow(stored, status=response.status,
                               content_type=last_header(response.headers, "Content-Type"),
                               body=response.body, limits=self.policy.sitemap_limits,
                               previous_fetch_s=previous_fetch_s(refetch, self.now_s()))
            batches = iter(flow)
            offload = len(response.body) > OFFLOAD_EXTRACT_BYTES
            while (batch := await asyncio.to_thread(next, batches, None) if offload
                   else next(batches, None)) is not None:
                if not await self._enqueue(leased, batch, dedupe=True, url=request.url):
                    return
            for name, count in flow.funnel.items():
                self.funnel.add(stored, name, count)
            for line in flow.logs:
                logger.log(line.level, line.message, extra=line.fields)
        if verdict is not None:
            self.leases.schedule(leased.lease_id, verdict.revisit)
        self.leases.finish(leased.lease_id)

    def _not_modified(self, leased: LeasedRequest, request: FetchRequest,
                      response: FetchResponse, refetch: recrawl.Refetch,
                      verdict: recrawl.Verdict) -> None:
        """A 304 or an unchanged body: no link read, the small item (unless the policy says
        ``none``), the lease finished with its revisit. No I/O."""
        if refetch.policy.not_modified_item:
            self.send(self.spider.item(recrawl.not_modified_item(items.page_item(
                url=request.url, response_url=response.url, status=response.status,
                response_headers=response_header_dict(response),
                request_headers=header_dict(request.headers), body=b"", encoding=None,
                links=(), meta=leased.request, now_s=self.now_s(), base64_body=False),
                verdict), leased.request))
        self.leases.schedule(leased.lease_id, verdict.revisit)
        self.leases.finish(leased.lease_id)

    async def _enqueue(self, leased: LeasedRequest, requests: list[dict[str, Any]], *,
                       dedupe: bool, url: str) -> bool:
        """ONE round trip; False (the lease given back) when Redis is unreachable."""
        try:
            result = await self.frontier.enqueue_many(requests, dedupe=dedupe)
        except Exception as exc:
            if not is_redis_outage(exc):
                raise
            if self.leases.give_back(leased.lease_id) and self.on_give_back is not None:
                self.on_give_back(exc, url)
            return False
        if result.cached_by_crawl:  # known duplicates, never sent: counted here
            self.funnel.add_cached(result.cached_by_crawl)
        return True


def _conditional(request: FetchRequest,
                 leased: LeasedRequest) -> tuple[FetchRequest, recrawl.Refetch | None]:
    """``request`` with the conditional headers of its previous fetch (those it does not send
    itself), and its ``Refetch``; unchanged and None without a usable policy."""
    refetch = recrawl.refetch_of(leased.request, leased.revisit,
                                 (name for name, _ in request.headers))
    if refetch is None or not refetch.headers:
        return request, refetch
    return replace(request, headers=request.headers + tuple(refetch.headers.items())), refetch


def redirect_target(url: str, location: str) -> str:
    """Scrapy's RedirectMiddleware target: quoted, joined, the fragment kept."""
    safe = safe_url_string(location.encode("latin-1"))
    if location.startswith("//"):
        safe = urlsplit(url).scheme + "://" + safe.lstrip("/")
    target = urljoin(url, safe)
    fragment = urlsplit(url).fragment
    if fragment and not urlsplit(target).fragment:
        target = urljoin(target, f"#{fragment}")
    return target


def redirect_headers(request: FetchRequest, target: str) -> dict[str, list[str]]:
    """The headers Scrapy's RedirectMiddleware gives the target (and the Scrapy scheduler
    stores with it): those sent, less ``Cookie`` to another host or a downgraded scheme and
    ``Authorization`` to another origin, with the ``Referer`` of the default policy."""
    headers = header_dict(request.headers)
    source, moved = urlsplit(request.url), urlsplit(target)
    ports = {"http": 80, "https": 443}
    if moved.scheme not in (source.scheme, "https") or source.hostname != moved.hostname:
        headers.pop("Cookie", None)
    if (source.scheme, source.hostname, source.port or ports.get(source.scheme)) != \
            (moved.scheme, moved.hostname, moved.port or ports.get(moved.scheme)):
        headers.pop("Authorization", None)
    headers.pop("Referer", None)
    referer = _referer(request.url, target)
    if referer is not None:
        headers["Referer"] = [referer]
    return headers


def _referer(source: str, target: str) -> str | None:
    """The Referer Scrapy's default policy puts on a redirect (none from https to http)."""
    if urlsplit(source).scheme == "https" and urlsplit(target).scheme != "https":
        return None
    return strip_url(source, strip_credentials=True, strip_fragment=True)


def response_header_dict(response: FetchResponse) -> dict[str, list[str]]:
    """Response headers as the Scrapy crawler reports them: ``Content-Length`` first when the
    length is known (Scrapy's HTTP/1.1 handler), then the others title-cased and grouped,
    connection-control headers left out (Twisted), Content-Encoding dropped once decoded."""
    result: dict[str, list[str]] = {}
    length = last_header(response.headers, "Content-Length")
    chunked = "chunked" in (last_header(response.headers, "Transfer-Encoding") or "").lower()
    if length is not None and length.strip().isdigit() and not chunked:
        result["Content-Length"] = [str(int(length))]
    kept = [(name, value) for name, value in response.headers
            if name.lower() not in CONNECTION_HEADERS
            and not (name.lower() == "content-encoding" and response.content_encodings)]
    result.update(header_dict(kept))
    return result
