"""The Scrapy scheduler on the distributed frontier.

``enqueue_request`` sends a request to the frontier (deduplicated per crawl unless
``dont_filter``; ONE round trip). A redirect (Scrapy's RedirectMiddleware) goes to the frontier
too, so its target is throttled like any request: not deduplicated, carrying its
``redirect_times`` so REDIRECT_MAX_TIMES still ends a loop, and the lease of the request it
replaces is finished once it is queued. ``next_request`` serves from a small local buffer that one
``pop(SCHEDULER_BUFFER_SIZE)`` refills (ONE round trip per buffer, none while the frontier said
nothing is dispatchable yet). While the buffer is empty a background thread waits in
``frontier.wait_for_work`` until the earliest throttled domain may dispatch (the short pop's
``ready_at_s``) or new work is announced, and then wakes the engine: throttled domains are
crawled at their configured rate, and an idle crawler picks up a new crawl at once, instead
of at Scrapy's 5 s heartbeat. Leases are acknowledged in
batches (see ``lease_book.py``). The spider never closes when idle. On close (SIGTERM/SIGINT:
Scrapy first lets in-flight requests finish) finished leases are acknowledged and everything
still buffered is released back to the queues: nothing is lost.

A popped request with a ``recrawl`` policy (``common/revisit.py``) gets the conditional
headers of its previous fetch and lets a 304 through to its callback
(``handle_httpstatus_list``); ``RecrawlMiddleware`` judges its response and
``schedule_revisit`` hands the verdict's ``Revisit`` to the lease book, acknowledged with it.

A popped request carrying ``sitemap`` (a robots.txt or a sitemap, ``common/sitemap_flow.py``)
is given the spider's ``parse_sitemap_response`` as its callback (a ``ClusterSpider``'s: it
queues what the response lists and yields no item); a redirect of it keeps ``sitemap`` and the
callback it was queued with.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.asyncio import call_later
from twisted.internet import task

from scrapy_cluster.crawler.common import revisit as recrawl
from scrapy_cluster.crawler.common.funnel import FunnelCounter
from scrapy_cluster.crawler.common.late_sends import LateSendBook, take_fresh_slot
from scrapy_cluster.crawler.common.meta import (
    ENQUEUED_META_KEY,
    LEASE_META_KEY,
    PARENT_LEASE_META_KEY,
    RECRAWL_META_KEY,
)
from scrapy_cluster.crawler.common.public_ip import PublicIpRefresher
from scrapy_cluster.crawler.common.resolution import cluster_settings
from scrapy_cluster.crawler.common.sitemap_flow import SITEMAP_FIELD
from scrapy_cluster.crawler.funnel_hooks import funnel_for
from scrapy_cluster.crawler.lease_book import LeaseBook
from scrapy_cluster.crawler.serialization import request_from_dict, request_to_dict
from scrapy_cluster.errors import RequestSerializationError
from scrapy_cluster.frontier import DispatchView, Frontier
from scrapy_cluster.frontier.model import EnqueueResult, Revisit
from scrapy_cluster.outage import OutageLog, is_redis_outage
from scrapy_cluster.redis_conn import RedisConfig

IDLE_RECHECK_S = 5.0
ERROR_BACKOFF_S = 1.0
MIN_WAKE_INTERVAL_S = 0.01
REAP_INTERVAL_S = 5.0
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchedulerPolicy:
    """The scheduler's settings: ``buffer_size`` (SCHEDULER_BUFFER_SIZE), ``ack_flush_s``
    (CRAWLER_ACK_FLUSH_MS), ``ip_enabled`` (SCHEDULER_IP_ENABLED), ``reap_interval_s`` (at most
    half of LEASE_TIMEOUT), ``late_send_ms`` (THROTTLE_LATE_SEND_MS) and
    ``urgent_late_send_ms`` (THROTTLE_SEND_ALLOWANCE_MS)."""

    buffer_size: int
    ack_flush_s: float
    ip_enabled: bool
    reap_interval_s: float = REAP_INTERVAL_S
    late_send_ms: int = 20
    urgent_late_send_ms: int = 100

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> SchedulerPolicy:
        return cls(buffer_size=int(settings["SCHEDULER_BUFFER_SIZE"]),
                   ack_flush_s=int(settings["CRAWLER_ACK_FLUSH_MS"]) / 1000,
                   ip_enabled=bool(settings["SCHEDULER_IP_ENABLED"]),
                   reap_interval_s=min(REAP_INTERVAL_S, float(settings["LEASE_TIMEOUT"]) / 2),
                   late_send_ms=int(settings["THROTTLE_LATE_SEND_MS"]),
                   urgent_late_send_ms=int(settings["THROTTLE_SEND_ALLOWANCE_MS"]))


class DistributedScheduler(BaseScheduler):
    """Scrapy ``SCHEDULER`` backed by ``scrapy_cluster.frontier`` (see module docstring)."""

    def __init__(self, frontier: Frontier, ip: PublicIpRefresher, policy: SchedulerPolicy, *,
                 view_type: Any = None, funnel: FunnelCounter | None = None) -> None:
        self.frontier, self.ip = frontier, ip
        self.buffer_size, self.ack_flush_s = policy.buffer_size, policy.ack_flush_s
        self.ip_enabled = policy.ip_enabled
        self.leases = LeaseBook(frontier, logger=logger, funnel=funnel)
        self.late_sends = LateSendBook(policy.late_send_ms, policy.urgent_late_send_ms)
        self._restamp_scheduled = False
        self._view_type = view_type
        self._buffer: deque[Any] = deque()
        self._enqueued_at_s: dict[str, float] = {}
        self.funnel = funnel
        self._next_pop_at = 0.0
        self._idle = threading.Event()
        self._stopping = threading.Event()
        self._wake_engine: Callable[[], None] = lambda: None
        self._ack_loop: task.LoopingCall | None = None
        self._reap_loop = task.LoopingCall(self._reap)
        self.reap_interval_s = policy.reap_interval_s
        self.spider: Spider | None = None
        self._outage = OutageLog(logger)  # pop, wait and reap: one warning per outage
        self._given_back = OutageLog(logger)  # pages given back: one warning per outage

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DistributedScheduler:
        settings = cluster_settings(crawler)
        client = RedisConfig.from_settings(settings).sync_client()
        scheduler = cls(Frontier.from_settings(settings, client, seen_cache=True),
                        PublicIpRefresher.from_settings(settings, logger),
                        SchedulerPolicy.from_settings(settings),
                        view_type=DispatchView, funnel=funnel_for(crawler))
        crawler.signals.connect(scheduler._keep_alive, signal=signals.spider_idle)
        if not settings["SCHEDULER_PERSIST"]:
            logger.warning("SCHEDULER_PERSIST = False is not supported and is ignored: the "
                           "queues are shared by every crawler of the spider; remove a crawl "
                           "with a stop request instead")
        scheduler._wake_engine = lambda: _schedule_engine(crawler)
        return scheduler

    # --- Scrapy's scheduler interface --------------------------------------------------------

    def open(self, spider: Spider) -> None:
        self.spider = spider
        if self.ip_enabled:
            self.ip.start()
        threading.Thread(target=self._wait_for_work, name="frontier-wait", daemon=True).start()
        self._ack_loop = task.LoopingCall(self._flush)
        self._ack_loop.start(self.ack_flush_s, now=False)
        self._reap_loop.start(self.reap_interval_s, now=False)

    def close(self, reason: str) -> None:
        self._stopping.set()
        self._idle.set()
        self.ip.stop()
        for loop in (self._ack_loop, self._reap_loop):
            if loop is not None and loop.running:
                loop.stop()
        for leased in self._buffer:
            self.leases.hold(leased.lease_id, leased.request)
        self._buffer.clear()
        self._enqueued_at_s.clear()
        self._restamp_late_sends()
        acked = self.leases.flush()
        released = self.leases.release_all()
        logger.info("scheduler closed", extra={"reason": reason, "acked": acked,
                                               "released": released})

    def has_pending_requests(self) -> bool:
        return bool(self._buffer)

    def enqueue_request(self, request: Request) -> bool:
        """Send one request to the frontier: ONE round trip. False when refused or a duplicate.

        A request a callback yielded that cannot be queued because Redis is unreachable gives
        back the lease of the page that yielded it (``give_back``): the page is crawled again
        and yields it again, so nothing is lost and nothing is logged per request."""
        assert self.spider is not None
        try:
            data = request_to_dict(request, self.spider)
        except RequestSerializationError as exc:
            logger.error("request cannot be queued: %s", exc, extra={"url": request.url})
            return False
        if not self._is_redirect(request):
            try:
                return self.enqueue_dicts([data], dedupe=not request.dont_filter).queued == 1
            except Exception as exc:
                parent = request.meta.get(PARENT_LEASE_META_KEY)
                if parent is None or not is_redis_outage(exc):
                    raise
                self.give_back(parent, exc, url=request.url)
                return True  # not dropped: it comes again with its page
        data["redirect_times"] = int(request.meta["redirect_times"])
        stored = self.leases.request(request.meta[LEASE_META_KEY]) or {}
        if SITEMAP_FIELD in stored:  # still a sitemap, with the callback it was queued with
            data[SITEMAP_FIELD] = stored[SITEMAP_FIELD]
            data.pop("callback", None)
            if stored.get("callback"):
                data["callback"] = stored["callback"]
        refetch = request.meta.get(RECRAWL_META_KEY)
        if refetch is not None:
            _forget_refetch(data, refetch)
        queued = self.enqueue_dicts([data], dedupe=False).queued == 1
        self.finish(request)  # the request it replaces is done: its target is queued
        return queued

    def _is_redirect(self, request: Request) -> bool:
        """True for a redirect of a request this process holds: Scrapy's RedirectMiddleware
        copies the meta (our lease id included) and counts ``redirect_times``."""
        lease_id = request.meta.get(LEASE_META_KEY)
        return bool(request.meta.get("redirect_times")) and lease_id is not None \
            and self.leases.request(lease_id) is not None

    def enqueue_dicts(self, requests: Sequence[dict[str, Any]], *, dedupe: bool = True,
                      funnel: bool = True) -> EnqueueResult:
        """Queue crawl-request dicts in ONE round trip (how spiders send a page's links); the
        same call counts them in their crawls' URL funnels unless ``funnel`` is False."""
        result = self.frontier.enqueue_many(list(requests), dedupe=dedupe, funnel=funnel)
        self._given_back.succeeded()
        if funnel and self.funnel is not None and getattr(result, "cached_by_crawl", None):
            self.funnel.add_cached(result.cached_by_crawl)  # known duplicates, never sent
        return result

    def next_request(self) -> Request | None:
        """A buffered request; refills with ONE pop when empty and the frontier may have work."""
        if not self._buffer:
            self._refill()
        while self._buffer:
            leased = self._buffer.popleft()
            request = self._to_request(leased)
            if request is not None:
                return request
        return None

    # --- internals ---------------------------------------------------------------------------

    def _to_request(self, leased: Any) -> Request | None:
        assert self.spider is not None
        self.leases.hold(leased.lease_id, leased.request)
        enqueued_at_s = self._enqueued_at_s.pop(leased.lease_id, None)
        try:
            request = request_from_dict(leased.request, self.spider, lease_id=leased.lease_id)
        except (RequestSerializationError, KeyError, TypeError, ValueError) as exc:
            reason = leased.request.get("undecodable") or exc  # set by the frontier's pop
            logger.error("dropping a malformed queued request: %s", reason,
                         extra={"request": repr(leased.request)[:500]})
            self.late_sends.forget(leased.lease_id)
            self.leases.finish(leased.lease_id)
            if self.funnel is not None:
                self.funnel.add(leased.request, "dropped")
            return None
        if enqueued_at_s is not None:
            request.meta[ENQUEUED_META_KEY] = enqueued_at_s
        if recrawl.RECRAWL_FIELD in leased.request:
            _conditional(request, leased)
        if SITEMAP_FIELD in leased.request:  # a robots.txt or a sitemap: read as one
            callback = getattr(self.spider, "parse_sitemap_response", None)
            if callback is not None:
                request.callback = callback
        return request

    def _view(self) -> Any:
        assert self.spider is not None
        return self._view_type(self.spider.name, self.ip.current() if self.ip_enabled else None)

    def _refill(self) -> None:
        """Pop when the frontier may have work; otherwise let the wait thread wake the engine.

        A pop that returned fewer requests than asked told us when its earliest throttled
        domain may dispatch (``ready_at_s``): until then (or a wake token) no pop is sent.
        """
        now = time.monotonic()  # the frontier's ready_at_s is on this clock
        if self._stopping.is_set():
            return
        if now < self._next_pop_at:
            self._idle.set()
            return
        try:
            result = self.frontier.pop(self._view(), self.buffer_size)
        except Exception as exc:  # noqa: BLE001 - Redis outage: keep running, retry shortly
            self._outage.failed("frontier pop", exc)
            self._next_pop_at = now + ERROR_BACKOFF_S
            self._idle.set()
            return
        self._outage.succeeded()
        self._buffer.extend(result.requests)
        for leased in result.requests:
            self.late_sends.dispatched(leased, result.received_at_s)
            if leased.enqueued_at_ms is not None:  # the enqueue moment on time.monotonic()
                waited_s = (leased.dispatched_at_ms - leased.enqueued_at_ms) / 1000
                self._enqueued_at_s[leased.lease_id] = result.received_at_s - waited_s
        if len(result.requests) < self.buffer_size:
            ready_at = result.ready_at_s
            self._next_pop_at = now + IDLE_RECHECK_S if ready_at is None else ready_at
            if not result.requests:
                self._idle.set()

    def _wait_for_work(self) -> None:
        """Background thread: while the buffer is empty, block until the earliest throttled
        domain may dispatch or new work is announced, then wake the engine."""
        # Imported here, not at the top: importing the reactor installs Twisted's default one,
        # and Scrapy must install the configured reactor first.
        from twisted.internet import reactor

        while not self._stopping.is_set():
            self._idle.wait()
            if self._stopping.is_set():
                return
            try:
                self.frontier.wait_for_work(self._view(), self._next_pop_at)
                self._outage.succeeded()
            except Exception as exc:  # noqa: BLE001 - Redis outage: try again after a pause
                self._outage.failed("waiting for work", exc)
                self._stopping.wait(ERROR_BACKOFF_S)
            self._idle.clear()
            reactor.callFromThread(self._on_work)
            self._stopping.wait(MIN_WAKE_INTERVAL_S)

    def _on_work(self) -> None:
        self._next_pop_at = 0.0
        self._wake_engine()

    def give_back(self, lease_id: str | None, exc: BaseException, *, url: str) -> None:
        """Redis failed while a page's links were queued: release the page's lease at the next
        flush instead of acknowledging it (``LeaseBook.give_back``); one warning per outage."""
        if self.leases.give_back(lease_id):
            self.late_sends.forget(lease_id)
            self._given_back.failed("queueing a page's links (the page will be crawled again)",
                                    exc, url=url)

    def finish(self, request: Request) -> None:
        """The request is done (nothing to wait for): its lease is acknowledged at the next batch."""
        lease_id = request.meta.get(LEASE_META_KEY)
        self.late_sends.forget(lease_id)
        self.leases.finish(lease_id)

    async def before_send(self, request: Request) -> None:
        """The download handler is about to send ``request``: a request later than the send
        allowance takes a fresh throttle slot first, or waits for one (``take_fresh_slot``)."""
        await take_fresh_slot(self.late_sends, request.meta.get(LEASE_META_KEY), self._late_slot)

    async def _late_slot(self, domain: str, dispatched_ms: int) -> int:
        return self.frontier.late_slot(self._view(), domain, dispatched_ms)

    def request_sent(self, request: Request) -> None:
        """The download handler sends ``request`` now (see ``send_clock``). A very late send
        is restamped in the next event-loop turn (ONE round trip), others with the ack batch."""
        late = self.late_sends.sent(request.meta.get(LEASE_META_KEY), time.monotonic())
        if late is not None and self.late_sends.is_urgent(late) and not self._restamp_scheduled:
            self._restamp_scheduled = True
            call_later(0, self._restamp_late_sends)

    def _flush(self) -> None:
        """Every CRAWLER_ACK_FLUSH_MS: late sends (ONE round trip when any), then acks."""
        self._restamp_late_sends()
        self.leases.flush()

    def _restamp_late_sends(self) -> None:
        self._restamp_scheduled = False
        late = self.late_sends.take()
        if not late:
            return
        try:
            self.frontier.restamp(self._view(), late)
        except Exception as exc:  # noqa: BLE001 - Redis outage: the slots stay at dispatch time
            logger.warning("late sends could not be restamped: %s", exc,
                           extra={"late_sends": len(late)})

    def item_started(self, request: Request) -> None:
        self.leases.item_started(request.meta.get(LEASE_META_KEY))

    def item_done(self, request: Request | None) -> None:
        if request is not None:
            self.leases.item_done(request.meta.get(LEASE_META_KEY))

    def outputs_done(self, request: Request) -> None:
        """The callback/errback yielded its last output; the lease finishes with its last item."""
        self.leases.outputs_done(request.meta.get(LEASE_META_KEY))

    def requeue(self, request: Request, *, priority_adjust: int) -> bool:
        """Put a retry of ``request`` back on the frontier (ONE round trip) and finish its lease."""
        stored = self.leases.request(request.meta.get(LEASE_META_KEY) or "")
        if stored is None:
            return False
        retry = {**stored, "retry_times": int(stored.get("retry_times") or 0) + 1,
                 "priority": int(stored.get("priority") or 0) + priority_adjust,
                 "dont_filter": True}
        refetch = request.meta.get(RECRAWL_META_KEY)
        if refetch is not None:
            retry.update(refetch.retry_fields())
        try:
            self.enqueue_dicts([retry], dedupe=False, funnel=False)  # counted as retried
        except Exception as exc:  # noqa: BLE001 - Redis down: the lease reaper retries it later
            logger.warning("retry could not be queued: %s", exc, extra={"url": request.url})
            return False
        self.finish(request)
        return True

    def schedule_revisit(self, request: Request, revisit: Revisit | None) -> None:
        """Acknowledge the lease of ``request`` with ``revisit`` (a re-crawled URL's next fetch;
        None: its schedule ends). No I/O."""
        self.leases.schedule(request.meta.get(LEASE_META_KEY), revisit)

    def _reap(self) -> None:
        """Return expired leases of dead crawlers to their queues: ONE round trip per interval."""
        try:
            if self.frontier.reap():
                self._on_work()
            self._outage.succeeded()
        except Exception as exc:  # noqa: BLE001 - Redis outage: try at the next interval
            self._outage.failed("lease reaping", exc)

    def _keep_alive(self, spider: Spider) -> None:
        raise DontCloseSpider("cluster crawlers wait for new crawls")


def _conditional(request: Request, leased: Any) -> None:
    """A popped request of a re-crawled URL: the conditional headers of its previous fetch
    (those it does not send itself), a 304 let through to the callback, its ``Refetch`` in
    ``meta``."""
    refetch = recrawl.refetch_of(leased.request, leased.revisit,
                                 (name.decode("latin-1") for name in request.headers))
    if refetch is None:
        return
    for name, value in refetch.headers.items():
        request.headers[name] = value
    request.meta[RECRAWL_META_KEY] = refetch
    statuses = list(request.meta.get("handle_httpstatus_list") or ())
    if recrawl.NOT_MODIFIED not in statuses:
        request.meta["handle_httpstatus_list"] = [*statuses, recrawl.NOT_MODIFIED]


def _forget_refetch(data: dict[str, Any], refetch: recrawl.Refetch) -> None:
    """A redirect of a re-crawled URL: its target starts its own schedule, without the
    validators and the 304 pass the source request was given."""
    headers = data.get("headers") or {}
    for name in refetch.headers:
        headers.pop(name, None)
    meta = data.get("meta") or {}
    statuses = [s for s in meta.get("handle_httpstatus_list") or () if s != recrawl.NOT_MODIFIED]
    if statuses:
        meta["handle_httpstatus_list"] = statuses
    else:
        meta.pop("handle_httpstatus_list", None)
    if not meta:
        data.pop("meta", None)
    if not headers:
        data.pop("headers", None)


def _schedule_engine(crawler: Crawler) -> None:
    """Ask the engine to look for requests now.

    Scrapy has no public call for this; without it the engine would only ask the scheduler
    again at its 5 s heartbeat. ``_slot.nextcall`` is the engine's own "run soon" hook.
    """
    engine = crawler.engine
    slot = getattr(engine, "_slot", None) if engine is not None else None
    if slot is not None:
        slot.nextcall.schedule()
