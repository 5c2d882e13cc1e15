"""Composition root of the fast engine: clients from settings, wiring, signals, close.

``run_fast_crawler(settings)`` runs until SIGTERM/SIGINT, then stops popping, lets in-flight
pages finish (bounded), flushes, acknowledges, releases every held lease and returns (exit 0).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from functools import cache
from typing import Any

import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from scrapy_cluster.bus import create_bus
from scrapy_cluster.crawler.common.address_guard import (
    AddressGuard,
    aiohttp_host,
    unreadable_host_message,
)
from scrapy_cluster.crawler.common.crawl_delay import CrawlDelay
from scrapy_cluster.crawler.common.funnel import FunnelCounter
from scrapy_cluster.crawler.common.late_sends import LateSendBook
from scrapy_cluster.crawler.common.process_logging import start_crawler_logging
from scrapy_cluster.crawler.common.public_ip import PublicIpRefresher
from scrapy_cluster.crawler.common.resolution import hostname
from scrapy_cluster.crawler.common.response_stats import NO_RESPONSE, ResponseStats
from scrapy_cluster.crawler.common.retry_after import RetryAfterPauser
from scrapy_cluster.crawler.common.telemetry import FetchTelemetry
from scrapy_cluster.crawler.fast.async_lease_book import AsyncLeaseBook
from scrapy_cluster.crawler.fast.domain_hooks import Politeness, RobotsCrawlDelay
from scrapy_cluster.crawler.fast.engine import EngineParts, EnginePolicy, FastEngine
from scrapy_cluster.crawler.fast.extract import LxmlExtractor
from scrapy_cluster.crawler.fast.fetch import AiohttpFetcher, FetchError, FetchRequest
from scrapy_cluster.crawler.fast.item_sender import ItemSender
from scrapy_cluster.crawler.fast.link_batch import LinkBatcher
from scrapy_cluster.crawler.fast.pages import PageParts, PageProcessor
from scrapy_cluster.crawler.fast.policy import PagePolicy
from scrapy_cluster.crawler.fast.requests import build_request
from scrapy_cluster.crawler.fast.robots import RobotsCache
from scrapy_cluster.crawler.fast.spiders import SPIDERS, fast_spider
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.frontier import AsyncFrontier, DispatchView
from scrapy_cluster.frontier.codec import DomainExtractor
from scrapy_cluster.frontier.pause import DomainPauses
from scrapy_cluster.log import HUMAN_FORMAT, configure_logging, parse_level
from scrapy_cluster.outage import OutageLog
from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.stats.node import NodeInfo

logger = logging.getLogger(__name__)


def check_spider(name: str) -> None:
    """The fast engine runs the ``link`` and ``wandering`` spiders' semantics
    (``fast/spiders.py``); another spider needs the Scrapy engine."""
    if name not in SPIDERS:
        raise SettingsError(f"the fast engine runs only the 'link' and 'wandering' spiders, not "
                            f"{name!r}; use --engine scrapy for it")


def ssrf_check(guard: AddressGuard) -> Any:
    """``async (url) -> message | None``: the guard's first step on the host aiohttp will
    connect to (its second step is the fetcher's socket factory)."""

    async def check(url: str) -> str | None:
        try:
            host = aiohttp_host(url)
        except ValueError as exc:
            return unreadable_host_message(url, exc)
        return await guard.check(url, host)

    return check


@cache
def _named_error(name: str) -> type[Exception]:
    return type(name, (Exception,), {})


class StatsObserver:
    """Per-download counts for ``ResponseStats`` and ``FetchTelemetry`` (no I/O)."""

    def __init__(self, stats: ResponseStats, telemetry: FetchTelemetry) -> None:
        self.stats, self.telemetry = stats, telemetry

    def response(self, domain: str, url: str, status: int, waited_s: float | None) -> None:
        self.stats.record(domain, status)
        self.telemetry.response(domain, url, status, waited_s)

    def failure(self, domain: str, url: str, error: FetchError) -> None:
        if error.retryable:
            self.stats.record(domain, NO_RESPONSE)
        self.telemetry.failure(domain, url, _named_error(error.error_type)(str(error)))


def build_politeness(settings: Mapping[str, Any], policy: PagePolicy, frontier: Any,
                     view: Any, sync_client: Any) -> Politeness:
    """Late sends, Retry-After and Crawl-delay with the Scrapy crawler's settings."""
    crawl_delay = None
    if policy.robots_obey:
        crawl_delay = RobotsCrawlDelay(
            CrawlDelay(sync_client, default_hits=int(settings["QUEUE_HITS"]),
                       default_window_s=float(settings["QUEUE_WINDOW"])).apply,
            user_agent=policy.robots_user_agent or policy.user_agent,
            domain_of=DomainExtractor())
    return Politeness(
        frontier, view, LateSendBook(int(settings["THROTTLE_LATE_SEND_MS"]),
                                     int(settings["THROTTLE_SEND_ALLOWANCE_MS"])),
        retry_after=RetryAfterPauser(DomainPauses(sync_client),
                                     max_s=float(settings["RETRY_AFTER_MAX_S"])),
        crawl_delay=crawl_delay)


def run_fast_crawler(settings: Mapping[str, Any]) -> None:
    """Run the fast engine until SIGTERM/SIGINT (see module docstring)."""
    check_spider(str(settings["CRAWLER_SPIDER"]))
    asyncio.run(_main(settings))


def robots_fetcher(fetcher: AiohttpFetcher, policy: PagePolicy, guard: Any) -> Any:
    """robots.txt downloads: the Scrapy crawler's default headers, the SSRF guard on every hop
    (a refused robots.txt allows everything, as in Scrapy)."""
    headers = build_request({"url": "http://robots/"}, policy).headers

    async def fetch_robots(request: FetchRequest) -> Any:
        refused = None if guard is None else await guard(request.url)
        if refused is not None:
            raise FetchError(refused, error_type="ForbiddenAddress", reason="ssrf",
                             retryable=False)
        return await fetcher.fetch(FetchRequest(request.url, headers=headers),
                                   timeout_s=policy.download_timeout_s,
                                   max_bytes=policy.download_maxsize)

    return fetch_robots


def response_stats(settings: Mapping[str, Any], sync_client: Any,
                   spider: str = "link") -> StatsObserver:
    """The Scrapy crawler's status stats, telemetry and heartbeat, described as ``fast``."""
    telemetry = FetchTelemetry.from_settings(settings, sync_client)
    stats = ResponseStats.from_settings(settings, sync_client, hostname=hostname(),
                                        spiderid=spider, writers=(telemetry,),
                                        node_info=NodeInfo(engine="fast", spiders=[spider]))
    return StatsObserver(stats, telemetry)


async def _main(settings: Mapping[str, Any]) -> None:
    configure_logging(settings, prefix="SC_")
    if not start_crawler_logging(settings):  # SC_LOG_JSON: every logger writes JSON lines
        # The engine's modules log like the Scrapy engine's (Scrapy's root handler and format).
        logging.basicConfig(level=parse_level(settings["SC_LOG_LEVEL"]), force=True,
                            format=HUMAN_FORMAT)
    policy = PagePolicy.from_settings(settings)
    spider = fast_spider(str(settings["CRAWLER_SPIDER"]), settings)
    redis_config = RedisConfig.from_settings(settings)
    # One retry on a connection error: after an outage the pool's old connections fail once
    # each ("Connection closed by server"); a new connection then answers. A retried script
    # is safe: enqueue deduplicates, ack/release are idempotent, a popped batch whose reply
    # was lost is reaped after LEASE_TIMEOUT.
    client = redis_config.async_client(
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError])
    sync_client = redis_config.sync_client()
    frontier = AsyncFrontier.from_settings(settings, client, seen_cache=True)
    bus = create_bus(settings)
    funnel = FunnelCounter()
    sender = ItemSender(bus.producer(), prefix=str(settings["KAFKA_TOPIC_PREFIX"]),
                        appid_topics=bool(settings["KAFKA_APPID_TOPICS"]),
                        max_bytes=policy.max_item_bytes, funnel=funnel)
    leases = AsyncLeaseBook(frontier, logger=logger, before_ack=sender.confirm, funnel=funnel)
    slots = int(settings["CRAWLER_CONCURRENCY"])
    address_guard = None if policy.allowed_networks is None else AddressGuard(
        policy.allowed_networks)
    fetcher = AiohttpFetcher(connections=slots, verify_tls=bool(settings["CRAWLER_TLS_VERIFY"]),
                             guard=address_guard)
    observer = response_stats(settings, sync_client, spider.name)
    ip = PublicIpRefresher.from_settings(settings, logger)
    ip_enabled = bool(settings["SCHEDULER_IP_ENABLED"])

    def view() -> DispatchView:
        return DispatchView(spider.name, ip.current() if ip_enabled else None)

    politeness = build_politeness(settings, policy, frontier, view, sync_client)
    guard = None if address_guard is None else ssrf_check(address_guard)
    given_back = OutageLog(logger)
    processor = PageProcessor(PageParts(
        fetcher=fetcher, extractor=LxmlExtractor(), leases=leases,
        frontier=LinkBatcher(frontier, funnel,
                             linger_s=int(settings["CRAWLER_LINK_BATCH_MS"]) / 1000),
        send=sender.send, funnel=funnel, ssrf=guard, observer=observer,
        robots=RobotsCache(robots_fetcher(fetcher, policy, guard),
                           user_agent=policy.robots_user_agent,
                           on_parsed=politeness.robots_parsed), politeness=politeness,
        on_give_back=lambda exc, url: given_back.failed(
            "queueing a page's links (the page will be crawled again)", exc, url=url),
        spider=spider), policy)

    async def flush_stats() -> None:
        await asyncio.to_thread(observer.stats.flush)

    engine = FastEngine(
        EngineParts(frontier, processor, leases, view=view, politeness=politeness),
        policy=EnginePolicy.from_settings(settings),
        periodic=((float(settings["STATS_CYCLE"]), flush_stats),))
    if ip_enabled:
        ip.start()
    try:
        await _serve(engine, flush_stats)
        await asyncio.to_thread(observer.stats.leave)  # a clean stop: no longer a live crawler
    finally:
        ip.stop()
        await fetcher.close()
        await asyncio.to_thread(sender.close)
        bus.close()
        await client.aclose()
        sync_client.close()


async def _serve(engine: FastEngine, flush_stats: Any) -> None:
    """Heartbeat at once, then run until SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, engine.stop)
    await flush_stats()
    logger.info("fast engine started", extra={"slots": engine.slots})
    await engine.run()
