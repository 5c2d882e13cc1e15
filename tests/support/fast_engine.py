"""The fast engine's page logic in a test, with our ``Fetcher`` seam in place of HTTP.

``Rig(redis_url, answers)`` is a ``PageProcessor`` on a real ``AsyncFrontier``, fetching from
``SiteFetcher`` (a dict: url -> response or error) and collecting its items in a list;
``POLICY`` is the page policy the tests run it with, and ``scrapy_request`` the request the
Scrapy crawler sends for a stored request (to compare the engines' requests and items).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import redis
import redis.asyncio
from scrapy.downloadermiddlewares.defaultheaders import DefaultHeadersMiddleware
from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.downloadermiddlewares.useragent import UserAgentMiddleware
from scrapy.http import Request
from scrapy.utils.test import get_crawler

from scrapy_cluster.crawler.common.funnel import FunnelCounter
from scrapy_cluster.crawler.fast.async_lease_book import AsyncLeaseBook
from scrapy_cluster.crawler.fast.extract import LxmlExtractor
from scrapy_cluster.crawler.fast.fetch import FetchError, FetchRequest, FetchResponse
from scrapy_cluster.crawler.fast.pages import PageParts, PageProcessor
from scrapy_cluster.crawler.fast.policy import PagePolicy
from scrapy_cluster.crawler.fast.robots import RobotsCache
from scrapy_cluster.crawler.middlewares import CrawlCookiesMiddleware
from scrapy_cluster.crawler.serialization import request_from_dict
from scrapy_cluster.crawler.spiders.link import LinkSpider
from scrapy_cluster.frontier import AsyncFrontier, DispatchView
from scrapy_cluster.frontier.model import LeasedRequest
from scrapy_cluster.settings import load_settings
from tests.support.services import free_port

POLICY = PagePolicy.from_settings(load_settings("crawler", environ={}, overrides={
    "CRAWLER_ALLOW_PRIVATE_NETWORKS": True, "RETRY_TIMES": 2, "REDIRECT_MAX_TIMES": 3}))
VIEW = DispatchView("link")  # what a Rig pops by default
# the crawl fields of the requests ``Rig.seed`` queues
CRAWL = {"appid": "app", "crawlid": "c1", "spiderid": "link", "attrs": {"k": 1},
         "priority": 5, "maxdepth": 2, "curdepth": 0, "useragent": "ua/1", "cookie": "s=1"}


def scrapy_request(stored: Mapping[str, Any]) -> Request:
    """The request the Scrapy crawler sends for ``stored``, through its header middlewares."""
    request = request_from_dict(stored, LinkSpider())
    DefaultHeadersMiddleware(POLICY.default_headers).process_request(request)
    UserAgentMiddleware(POLICY.user_agent).process_request(request)
    HttpCompressionMiddleware.from_crawler(get_crawler()).process_request(request)
    CrawlCookiesMiddleware().process_request(request)
    return request


class SiteFetcher:
    """Our ``Fetcher`` seam answering from a dict: url -> response or error."""

    def __init__(self, answers: Mapping[str, FetchResponse | FetchError]) -> None:
        self.answers = answers
        self.fetched: list[str] = []

    async def fetch(self, request: FetchRequest, *, timeout_s: float,
                    max_bytes: int) -> FetchResponse:
        self.fetched.append(request.url)
        answer = self.answers.get(request.url, FetchResponse(request.url, 404, (), b"missing"))
        if isinstance(answer, FetchError):
            raise answer
        return answer

    async def close(self) -> None:
        return None


class Rig:
    """A processor on a real AsyncFrontier; items collected in a list (our ``send`` seam)."""

    def __init__(self, redis_url: str, answers: Mapping[str, FetchResponse | FetchError], *,
                 policy: PagePolicy = POLICY, robots: RobotsCache | None = None,
                 fetcher: Any = None, spider: Any = None, view: DispatchView = VIEW) -> None:
        self.client = redis.asyncio.Redis.from_url(redis_url)
        self.settings = load_settings("crawler", environ={}, overrides={"QUEUE_WINDOW": 0})
        self.frontier = AsyncFrontier.from_settings(self.settings, self.client)
        self.funnel = FunnelCounter()
        self.leases = AsyncLeaseBook(self.frontier, logger=logging.getLogger(),
                                     funnel=self.funnel)
        self.items: list[dict[str, Any]] = []
        self.fetcher = SiteFetcher(answers) if fetcher is None else fetcher
        self.view = view
        self.processor = PageProcessor(PageParts(
            fetcher=self.fetcher, extractor=LxmlExtractor(), frontier=self.frontier,
            leases=self.leases, send=self.items.append, funnel=self.funnel,
            robots=robots, spider=spider), policy)

    async def seed(self, url: str, **fields: Any) -> None:
        await self.frontier.enqueue_many([{**CRAWL, "url": url, **fields}], dedupe=True)

    async def pop(self, n: int = 100) -> list[LeasedRequest]:
        result = await self.frontier.pop(self.view, n)
        for leased in result.requests:
            self.leases.hold(leased.lease_id, leased.request)
        return result.requests

    async def process_with_redis_down(self, leased: LeasedRequest) -> None:
        """Process ``leased`` with its links' enqueue going to an unreachable Redis, then
        flush the lease book."""
        down = redis.asyncio.Redis(port=free_port(), socket_connect_timeout=0.5)
        self.processor.frontier = AsyncFrontier(down, self.frontier.calls)
        await self.processor.process(leased)
        await down.aclose()
        await self.leases.flush()

    async def crawl_one(self) -> list[LeasedRequest]:
        """Pop one request, process it, ack: the requests it left queued, popped."""
        (leased,) = await self.pop(1)
        await self.processor.process(leased)
        await self.leases.flush()
        return await self.pop()

    async def close(self) -> None:
        await self.client.aclose()
