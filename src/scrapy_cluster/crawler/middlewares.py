"""Scrapy middlewares of the cluster crawler.

Spider middlewares: ``MetaPassthroughMiddleware`` (children inherit the crawl-API fields) and
``LeaseFinishMiddleware`` (a page's lease is finished once its outputs are handled).
Downloader middlewares: ``FrontierRetryMiddleware`` (retries go back to the frontier),
``CrawlCookiesMiddleware`` (per-request cookies, no shared jar), ``RecrawlMiddleware`` (the
verdict on a re-crawled URL's response, see ``common/revisit.py``) and
``ResponseStatsMiddleware`` (status counts, see ``stats.py``; URL funnel, see ``funnel.py``;
download telemetry, see ``telemetry.py``; a 429/503 ``Retry-After`` pauses the domain
cluster-wide, see ``retry_after.py``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object
from twisted.internet import task

from scrapy_cluster.crawler.common import meta as crawl_meta
from scrapy_cluster.crawler.common.funnel import FunnelCounter
from scrapy_cluster.crawler.common.resolution import cluster_settings, hostname
from scrapy_cluster.crawler.common.response_stats import NO_RESPONSE, ResponseStats
from scrapy_cluster.crawler.common.retry_after import RetryAfterPauser
from scrapy_cluster.crawler.common.telemetry import FetchTelemetry
from scrapy_cluster.crawler.funnel_hooks import funnel_for, refusal_reason
from scrapy_cluster.crawler.scheduler import DistributedScheduler
from scrapy_cluster.frontier.codec import DomainExtractor
from scrapy_cluster.frontier.pause import DomainPauses
from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.stats.node import NodeInfo


class RequeuedForRetry(IgnoreRequest):
    """The request went back to the frontier for another try; no item is produced now."""


class PageGivenBack(Exception):  # noqa: N818 - a signal, like Scrapy's IgnoreRequest
    """The page's links could not be queued (Redis unreachable): its lease was given back and
    the page will be crawled again, so it produces nothing now. ``LeaseFinishMiddleware``
    swallows it: no "Spider error", no traceback (the scheduler warned once per outage)."""


def retry_exceptions(settings: BaseSettings) -> tuple[type[BaseException], ...]:
    """Scrapy's RETRY_EXCEPTIONS as classes: the download failures worth another try."""
    return tuple(load_object(path) if isinstance(path, str) else path
                 for path in settings.getlist("RETRY_EXCEPTIONS"))


def cluster_scheduler(crawler: Crawler) -> DistributedScheduler | None:
    engine = crawler.engine
    scheduler = engine.scheduler if engine is not None else None
    return scheduler if isinstance(scheduler, DistributedScheduler) else None


class MetaPassthroughMiddleware:
    """Requests a callback yields inherit the crawl-API fields of the response that made them."""

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any],
                                          spider: Spider | None = None) -> AsyncIterator[Any]:
        async for output in result:
            if isinstance(output, Request):
                crawl_meta.inherit(response.meta, output.meta)
            yield output

    def process_spider_output(self, response: Response, result: Iterable[Any],
                              spider: Spider | None = None) -> Iterable[Any]:
        for output in result:
            if isinstance(output, Request):
                crawl_meta.inherit(response.meta, output.meta)
            yield output


class LeaseFinishMiddleware:
    """Outermost spider middleware: a page's lease finishes when its outputs are handled.

    Each item the page yields is counted; the lease finishes once the callback is exhausted
    and the item pipeline has finished every item (``item_scraped``/``item_dropped``/
    ``item_error``). The bus delivery is then confirmed before the batch is acknowledged.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseFinishMiddleware:
        middleware = cls(crawler)
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(middleware.item_handled, signal=signal)
        return middleware

    def item_handled(self, item: Any, response: Any = None, **kwargs: Any) -> None:
        scheduler = cluster_scheduler(self.crawler)
        if scheduler is not None:
            scheduler.item_done(getattr(response, "request", None))

    def _track(self, response: Response, output: Any) -> None:
        scheduler = cluster_scheduler(self.crawler)
        if scheduler is None or response.request is None or output is None:
            return
        if isinstance(output, Request):  # given back with its page if it cannot be queued
            output.meta.setdefault(crawl_meta.PARENT_LEASE_META_KEY,
                                   response.request.meta.get(crawl_meta.LEASE_META_KEY))
        else:
            scheduler.item_started(response.request)

    def _done(self, response: Response) -> None:
        scheduler = cluster_scheduler(self.crawler)
        if scheduler is not None and response.request is not None:
            scheduler.outputs_done(response.request)

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any],
                                          spider: Spider | None = None) -> AsyncIterator[Any]:
        try:
            async for output in result:
                self._track(response, output)
                yield output
        finally:
            self._done(response)

    def process_spider_output(self, response: Response, result: Iterable[Any],
                              spider: Spider | None = None) -> Iterable[Any]:
        try:
            for output in result:
                self._track(response, output)
                yield output
        finally:
            self._done(response)

    def process_spider_exception(self, response: Response, exception: Exception,
                                 spider: Spider | None = None) -> list[Any] | None:
        self._done(response)
        return [] if isinstance(exception, PageGivenBack) else None


class FrontierRetryMiddleware:
    """Replaces Scrapy's RetryMiddleware: a retry goes back to the frontier at lower priority
    (RETRY_PRIORITY_ADJUST), possibly to another crawler, up to RETRY_TIMES. After that the
    response reaches the spider (an item with its status) or the error reaches the errback."""

    def __init__(self, crawler: Crawler, *, max_retries: int, http_codes: set[int],
                 exceptions: tuple[type[BaseException], ...], priority_adjust: int) -> None:
        self.crawler, self.max_retries, self.http_codes = crawler, max_retries, http_codes
        self.exceptions, self.priority_adjust = exceptions, priority_adjust

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierRetryMiddleware:
        settings = crawler.settings
        if not settings.getbool("CLUSTER_RETRY_ENABLED", True):
            raise NotConfigured("CLUSTER_RETRY_ENABLED is off")
        return cls(crawler, max_retries=settings.getint("RETRY_TIMES"),
                   http_codes={int(c) for c in settings.getlist("RETRY_HTTP_CODES")},
                   exceptions=retry_exceptions(settings), priority_adjust=settings.getint("RETRY_PRIORITY_ADJUST"))

    def _requeue(self, request: Request) -> bool:
        if request.meta.get("dont_retry"):
            return False
        if int(request.meta.get("retry_times") or 0) >= self.max_retries:
            return False
        scheduler = cluster_scheduler(self.crawler)
        requeued = scheduler is not None and scheduler.requeue(
            request, priority_adjust=self.priority_adjust)
        if requeued:
            funnel_for(self.crawler).add(request.meta, "retried")
        return requeued

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Response:
        if response.status in self.http_codes and self._requeue(request):
            raise RequeuedForRetry(f"HTTP {response.status}: retry queued")
        return response

    def process_exception(self, request: Request, exception: Exception,
                          spider: Spider | None = None) -> None:
        if isinstance(exception, self.exceptions) and self._requeue(request):
            raise RequeuedForRetry(f"{type(exception).__name__}: retry queued") from exception


class RecrawlMiddleware:
    """Judges the response of a re-crawled URL (a request carrying a ``revisit.Refetch``): the
    ``Verdict`` goes to ``response.meta`` for the spider (``ClusterSpider.not_modified_output``)
    and its ``Revisit`` to the lease book. Its order (540) puts it just past
    ``FrontierRetryMiddleware`` (550) on the way to the spider, so a response retried or
    redirected is not judged. Other requests cost one ``meta`` lookup. No I/O."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlMiddleware:
        return cls(crawler)

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Response:
        refetch = request.meta.get(crawl_meta.RECRAWL_META_KEY)
        if refetch is None:
            return response
        headers = {_text(name): _text(response.headers[name]) for name in response.headers
                   if name.lower() in (b"etag", b"last-modified")}
        verdict = refetch.judge(depth=request.meta.get("curdepth"), status=response.status,
                                headers=headers, body=response.body, now_s=time.time())
        request.meta[crawl_meta.VERDICT_META_KEY] = verdict
        scheduler = cluster_scheduler(self.crawler)
        if scheduler is not None:
            scheduler.schedule_revisit(request, verdict.revisit)
        return response


class CrawlCookiesMiddleware:
    """Sends the request's own cookies (``cookies`` dict and the crawl's ``cookie`` string).

    Scrapy's cookie jar is off (COOKIES_ENABLED = False): a long-lived crawler must not carry
    cookies from one crawl into another.
    """

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        if b"Cookie" in request.headers:
            return
        parts = [str(request.meta["cookie"])] if request.meta.get("cookie") else []
        cookies = request.cookies if isinstance(request.cookies, dict) else {}
        parts += ["=".join(map(_text, pair)) for pair in cookies.items()]
        if parts:
            request.headers["Cookie"] = "; ".join(parts)


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


class ResponseStatsMiddleware:
    """Counts each crawl response's status per spider and domain; flushes every STATS_CYCLE.

    A download failure in RETRY_EXCEPTIONS (connection failure, timeout) counts as status 0
    (``NO_RESPONSE``). Its order (860) puts it nearer the downloader than
    ``FrontierRetryMiddleware`` (550), so it sees every response and failure before a retry
    is requeued. A 429/503 with ``Retry-After`` pauses the domain for the whole cluster at once.
    Each response and failure is also counted in the crawl's URL funnel (``fetched:<status>``,
    ``fetched:0`` for no response, ``filtered:robots``/``filtered:ssrf`` for a refusal) and in
    the download telemetry (enqueue-to-fetch latency, failures by exception, last error per
    domain); ``stats.flush`` writes the statuses and telemetry in its one round trip, the
    funnel counts go with the lease acknowledgements (``lease_book.py``).
    """

    def __init__(self, stats: ResponseStats, cycle_s: float, *,
                 no_response: tuple[type[BaseException], ...] = (),
                 retry_after: RetryAfterPauser | None = None,
                 funnel: FunnelCounter | None = None,
                 telemetry: FetchTelemetry | None = None) -> None:
        self.stats = stats
        self.no_response = no_response
        self.retry_after = retry_after
        self.funnel = funnel
        self.telemetry = telemetry
        self._domain = DomainExtractor()
        self._loop = task.LoopingCall(stats.flush)
        self._cycle_s = cycle_s

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ResponseStatsMiddleware:
        settings = cluster_settings(crawler)
        client = RedisConfig.from_settings(settings).sync_client()
        spider_name = crawler.spidercls.name
        funnel, telemetry = funnel_for(crawler), FetchTelemetry.from_settings(settings, client)
        stats = ResponseStats.from_settings(
            settings, client, hostname=hostname(), spiderid=spider_name,
            writers=(telemetry,), node_info=NodeInfo(engine="scrapy", spiders=[spider_name]))
        middleware = cls(stats, float(settings["STATS_CYCLE"]),
                         no_response=retry_exceptions(crawler.settings),
                         retry_after=RetryAfterPauser(DomainPauses(client),
                                                      max_s=float(settings["RETRY_AFTER_MAX_S"])),
                         funnel=funnel, telemetry=telemetry)
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    def spider_opened(self, spider: Spider) -> None:
        self._loop.start(self._cycle_s, now=True)

    def spider_closed(self, spider: Spider) -> None:
        if self._loop.running:
            self._loop.stop()
        self.stats.flush()
        self.stats.leave()  # a clean stop: no longer counted as a live crawler

    def domain_of(self, url: str) -> str:
        """The frontier's domain of ``url`` (its registered domain), so keys match the queue's."""
        try:
            return self._domain(url)
        except Exception:  # noqa: BLE001 - odd URL: count it under its raw netloc
            return url.split("/")[2] if "//" in url else "unknown"

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Response:
        if request.meta.get("crawlid") is not None:
            domain = self.domain_of(request.url)
            self.stats.record(domain, response.status)
            self._count_response(request, domain, response.status)
            if self.retry_after is not None:
                header = response.headers.get(b"Retry-After")
                wait_s = self.retry_after.wait_s(
                    response.status, _text(header) if header is not None else None, time.time())
                if wait_s > 0:
                    self.retry_after.apply(domain, wait_s)
        return response

    def process_exception(self, request: Request, exception: Exception,
                          spider: Spider | None = None) -> None:
        if request.meta.get("crawlid") is None:
            return
        if isinstance(exception, IgnoreRequest):  # refused, not failed: robots.txt, SSRF, ...
            reason = refusal_reason(exception)
            if reason is not None and self.funnel is not None:
                self.funnel.add(request.meta, f"filtered:{reason}")
            return
        domain = self.domain_of(request.url)
        if isinstance(exception, self.no_response):
            self.stats.record(domain, NO_RESPONSE)
        if self.funnel is not None:
            self.funnel.add(request.meta, f"fetched:{NO_RESPONSE}")
        if self.telemetry is not None:
            self.telemetry.failure(domain, request.url, exception)

    def _count_response(self, request: Request, domain: str, status: int) -> None:
        if self.funnel is not None:
            self.funnel.add(request.meta, f"fetched:{status}")
        if self.telemetry is not None:
            enqueued_at_s = request.meta.get(crawl_meta.ENQUEUED_META_KEY)
            waited_s = None if enqueued_at_s is None else time.monotonic() - enqueued_at_s
            self.telemetry.response(domain, request.url, status, waited_s)
