"""``ClusterSpider``: the base of spiders that run cluster-wide (the original ``RedisSpider``).

A subclass looks like any Scrapy spider (``name``, ``parse``). Crawls come from the crawl API
through the frontier, so ``start_urls`` is not used; the spider never closes when idle. It
gets a cluster logger (``self._logger``), ``reconstruct_headers``, an ``errback`` that turns a
failed request into an error item, and ``enqueue_links`` which sends a page's links to the
frontier in ONE round trip without building a Scrapy ``Request`` per link.

A re-crawled URL (a ``recrawl`` policy, ``common/revisit.py``) whose page did not change (a 304
or the same body) should produce ``not_modified_output(response)`` instead of reading its
links; the shipped spiders do. Its page item carries ``recrawl_fetch``.

A popped robots.txt or sitemap request (``sitemap``, ``common/sitemap_flow.py``) is answered by
``parse_sitemap_response`` (the scheduler makes it the callback): it queues what the response
lists, in batches, and yields no item.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast

from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.link import Link
from twisted.python.failure import Failure

from scrapy_cluster.crawler import response_items
from scrapy_cluster.crawler.common import meta as crawl_meta
from scrapy_cluster.crawler.common import revisit as recrawl
from scrapy_cluster.crawler.common.items import headers_to_dict
from scrapy_cluster.crawler.common.link_rules import PageLinks
from scrapy_cluster.crawler.common.resolution import cluster_settings
from scrapy_cluster.crawler.common.sitemap_flow import (
    SitemapFlow,
    limits_from_settings,
    previous_fetch_s,
)
from scrapy_cluster.crawler.common.sitemaps import DEFAULT_LIMITS, SitemapLimits
from scrapy_cluster.crawler.funnel_hooks import funnel_for, refusal_reason
from scrapy_cluster.crawler.middlewares import PageGivenBack, RequeuedForRetry, cluster_scheduler
from scrapy_cluster.crawler.page_links import page_links
from scrapy_cluster.log import configure_logging, request_fields
from scrapy_cluster.outage import is_redis_outage

logger = logging.getLogger(__name__)


class ClusterSpider(Spider):
    """Base spider for the cluster (see module docstring)."""

    _logger: logging.Logger
    base64_bodies: bool = False
    max_links_per_page: int = 0
    sitemap_limits: SitemapLimits = DEFAULT_LIMITS

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> ClusterSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        settings = cluster_settings(crawler)
        spider._logger = configure_logging(settings, prefix="SC_")
        spider.base64_bodies = bool(settings["KAFKA_BASE_64_ENCODE"])
        spider.max_links_per_page = int(settings["CRAWLER_MAX_LINKS_PER_PAGE"])
        spider.sitemap_limits = limits_from_settings(settings)
        return spider

    async def start(self) -> AsyncIterator[Any]:
        """No start requests: work arrives through the frontier."""
        return
        yield  # pragma: no cover - makes this an async generator

    def now_s(self) -> float:
        return time.time()

    def reconstruct_headers(self, response: Response) -> dict[str, list[str]]:
        """Response headers as ``{name: [values]}``: every repeated value kept, JSON-safe."""
        return headers_to_dict(response.headers)

    def _increment_status_code_stat(self, response: Response) -> None:
        """Kept for spiders written for the original API; ResponseStatsMiddleware counts now."""

    def read_links(self, response: Response) -> PageLinks:
        """The page's links, at most ``CRAWLER_MAX_LINKS_PER_PAGE`` (``links.page_links``)."""
        return page_links(response, max_links=self.max_links_per_page)

    def page_item(self, response: Response, links: Sequence[Link], *,
                  links_dropped: int = 0) -> dict[str, Any]:
        """The result item for ``response`` (see ``response_items.response_item``); with
        ``recrawl_fetch`` for a re-crawled URL."""
        item = response_items.response_item(response, links, now_s=self.now_s(),
                                             base64_body=self.base64_bodies,
                                             links_dropped=links_dropped)
        verdict = response.meta.get(crawl_meta.VERDICT_META_KEY)
        return item if verdict is None else recrawl.mark_item(item, verdict)

    def not_modified_output(self, response: Response) -> list[dict[str, Any]] | None:
        """None unless ``response`` is a re-crawled page that did not change; then what it
        produces instead of its page: the small ``not_modified`` item, or nothing when the
        crawl's ``recrawl.not_modified`` is ``none``. No link is read or queued."""
        verdict = response.meta.get(crawl_meta.VERDICT_META_KEY)
        if verdict is None or not verdict.not_modified:
            return None
        refetch = response.meta.get(crawl_meta.RECRAWL_META_KEY)
        if refetch is not None and not refetch.policy.not_modified_item:
            return []
        return [response_items.not_modified_item(response, verdict, now_s=self.now_s())]

    def enqueue_links(self, response: Response, links: Sequence[Link], *,
                      spiderid: str | None = None, filtered: Mapping[str, int] | None = None) -> int:
        """Queue ``links`` as children of ``response`` (priority -10, depth +1): ONE round trip.

        ``spiderid`` hands them to another spider. ``filtered``: links of the page the crawl's
        rules dropped, per reason (``links.select_links``), counted in the crawl's URL funnel
        (no I/O). Returns how many were new to the crawl.

        When Redis is unreachable the page's lease is given back (released at the next flush,
        never acknowledged) and ``PageGivenBack`` ends the callback quietly: the page is
        crawled again once Redis is back, so neither it nor its links are lost.
        """
        base = crawl_meta.inherit(response.meta, {"spiderid": spiderid} if spiderid else {})
        if links:
            base["priority"] = crawl_meta.child_priority(response.meta)
            scheduler = cluster_scheduler(self.crawler)
            if scheduler is None:
                raise RuntimeError("enqueue_links needs the cluster scheduler (SCHEDULER setting)")
            try:
                queued = int(scheduler.enqueue_dicts(
                    [{**base, "url": link.url} for link in links], dedupe=True).queued)
            except Exception as exc:
                if not is_redis_outage(exc):
                    raise
                scheduler.give_back(response.meta.get(crawl_meta.LEASE_META_KEY), exc,
                                    url=response.url)
                raise PageGivenBack(response.url) from exc
        else:
            queued = 0
        if filtered:  # counted once the page is through (not again when it is given back)
            funnel_for(self.crawler).add_filtered(base, filtered)
        return queued

    def parse_sitemap_response(self, response: Response) -> Iterator[dict[str, Any]]:
        """The callback of a robots.txt or sitemap request: what it lists is queued, no item.
        An unchanged sitemap of a re-crawl is not read again."""
        if self.not_modified_output(response) is None:
            self.enqueue_sitemap(response)
        yield from ()

    def enqueue_sitemap(self, response: Response) -> None:
        """Queue the requests a robots.txt or sitemap response makes (``SitemapFlow``): one
        round trip per batch, dedupe on; refusals and a parser stop are counted in the crawl's
        URL funnel once every batch is queued. When Redis is unreachable the lease is given
        back, as in ``enqueue_links``."""
        scheduler = cluster_scheduler(self.crawler)
        if scheduler is None:
            raise RuntimeError("enqueue_sitemap needs the cluster scheduler (SCHEDULER setting)")
        lease_id = response.meta.get(crawl_meta.LEASE_META_KEY)
        stored = scheduler.leases.request(lease_id) if lease_id is not None else None
        if stored is None:  # not a popped request of this process: nothing to copy
            logger.warning("sitemap response without its queued request", extra={
                "url": response.url})
            return
        content_type = response.headers.get(b"Content-Type")
        flow = SitemapFlow(stored, status=response.status, body=response.body,
                           limits=self.sitemap_limits,
                           previous_fetch_s=previous_fetch_s(
                               response.meta.get(crawl_meta.RECRAWL_META_KEY), self.now_s()),
                           content_type=None if content_type is None
                           else content_type.decode("latin-1"))
        for batch in flow:
            try:
                scheduler.enqueue_dicts(batch, dedupe=True)
            except Exception as exc:
                if not is_redis_outage(exc):
                    raise
                scheduler.give_back(lease_id, exc, url=response.url)
                raise PageGivenBack(response.url) from exc
        funnel = funnel_for(self.crawler)
        for name, count in flow.funnel.items():
            funnel.add(stored, name, count)
        for line in flow.logs:
            logger.log(line.level, line.message, extra=line.fields)

    def errback(self, failure: Failure) -> Iterator[dict[str, Any]]:
        """A request failed for good: produce an error item (unless it was queued for retry)."""
        if failure.check(RequeuedForRetry):
            return
        request = failure.request  # type: ignore[attr-defined]
        error = cast(BaseException, failure.value)  # a Failure always carries its exception
        self._logger.info("request failed", extra={**request_fields([request.meta]),
                                                   "url": request.url,
                                                   "error": repr(error)})
        if refusal_reason(error) is None:  # robots/ssrf are counted as filtered
            funnel_for(self.crawler).add(request.meta, "dropped")
        scheduler = cluster_scheduler(self.crawler)
        refetch = request.meta.get(crawl_meta.RECRAWL_META_KEY)
        if refetch is not None and scheduler is not None and refusal_reason(error) is None:
            # failed for good: judged as an error, so the URL stays scheduled
            scheduler.schedule_revisit(request, refetch.judge(
                depth=request.meta.get("curdepth"), status=None, headers={}, body=b"",
                now_s=self.now_s()).revisit)
        try:
            if scheduler is not None:
                scheduler.item_started(request)
            maxsize = int(request.meta.get("download_maxsize")
                          or self.crawler.settings.getint("DOWNLOAD_MAXSIZE"))
            yield response_items.error_item(request, error, now_s=self.now_s(),
                                   download_maxsize=maxsize)
        finally:
            if scheduler is not None:
                scheduler.outputs_done(request)
