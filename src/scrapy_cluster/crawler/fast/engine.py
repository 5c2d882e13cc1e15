"""The fast engine's loop: slots, fair per-domain dispatch, pops, acks, reaps.

* **Pops.** ONE ``pop(view, n)`` with ``n`` = free slots (CRAWLER_CONCURRENCY minus requests
  fetching or waiting for their domain; a page frees its slot when its download is over, and
  at most 3 x CRAWLER_CONCURRENCY pages may be past it, parsing or queueing links:
  ``PAGES_IN_HAND_PER_SLOT``). A full pop waits for a slot to free; a short pop
  awaits ``frontier.wait_for_work(view, result)`` (the frontier's ready time or a wake token),
  so nothing polls.
* **Fairness.** A domain fetches at most ``min(CRAWLER_PER_DOMAIN_CONCURRENCY, max(1, slots //
  active domains))`` requests at once (active: with requests fetching or waiting here); its
  other popped requests wait locally, leased, for a slot of their domain.
* **Acks.** Every CRAWLER_ACK_FLUSH_MS ``leases.flush()``: the bus flush, then ONE ack with the
  funnel counts (``fast/async_lease_book.py``). Every ``reap_interval_s`` ONE ``reap``.
* **Stop.** ``stop()``: no more pops; requests not started are released, in-flight pages get
  ``grace_s`` to finish, then a last flush and every held lease released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scrapy_cluster.crawler.fast.async_lease_book import AsyncLeaseBook
from scrapy_cluster.crawler.fast.domain_hooks import Politeness
from scrapy_cluster.crawler.fast.pages import PageProcessor
from scrapy_cluster.frontier.model import DispatchView, LeasedRequest, PopResult
from scrapy_cluster.outage import OutageLog, is_redis_outage

ERROR_BACKOFF_S = 1.0
REAP_INTERVAL_S = 5.0
SHUTDOWN_GRACE_S = 10.0
PAGES_IN_HAND_PER_SLOT = 4
"""Pages in memory per slot: downloading or past their download (parsing, waiting for their
links' enqueue, sending). With 2, a link batch's round trip (a few ms of Lua on a site whose
links are mostly new) held up the pops, and the engine stayed at 0.83 of a core."""
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnginePolicy:
    """The loop's settings: ``slots`` (CRAWLER_CONCURRENCY), ``per_domain``
    (CRAWLER_PER_DOMAIN_CONCURRENCY), ``ack_flush_s`` (CRAWLER_ACK_FLUSH_MS), ``reap_interval_s``
    (at most half of LEASE_TIMEOUT) and ``grace_s`` (in-flight pages' time to finish at stop)."""

    slots: int
    per_domain: int
    ack_flush_s: float
    reap_interval_s: float
    grace_s: float = SHUTDOWN_GRACE_S

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> EnginePolicy:
        return cls(slots=int(settings["CRAWLER_CONCURRENCY"]),
                   per_domain=int(settings["CRAWLER_PER_DOMAIN_CONCURRENCY"]),
                   ack_flush_s=int(settings["CRAWLER_ACK_FLUSH_MS"]) / 1000,
                   reap_interval_s=min(REAP_INTERVAL_S, float(settings["LEASE_TIMEOUT"]) / 2))


@dataclass(frozen=True)
class EngineParts:
    """What the loop drives: the asyncio ``frontier``, the page ``processor``, the ``leases``
    held, the dispatch ``view`` of this crawler, and the ``politeness`` hooks (late sends)."""

    frontier: Any
    processor: PageProcessor
    leases: AsyncLeaseBook
    view: Callable[[], DispatchView]
    politeness: Politeness | None = None


class FastEngine:
    """Runs ``processor`` on requests popped from ``frontier`` (see module docstring)."""

    def __init__(self, parts: EngineParts, *, policy: EnginePolicy,
                 periodic: tuple[tuple[float, Callable[[], Awaitable[None]]], ...] = ()) -> None:
        self.frontier, self.processor = parts.frontier, parts.processor
        self.leases, self.view = parts.leases, parts.view
        self.slots, self.per_domain = policy.slots, policy.per_domain
        self.ack_flush_s, self.reap_interval_s = policy.ack_flush_s, policy.reap_interval_s
        self.grace_s = policy.grace_s
        self.periodic, self.politeness = periodic, parts.politeness
        self._waiting: defaultdict[str, deque[tuple[LeasedRequest, float | None]]] = \
            defaultdict(deque)
        self._fetching: defaultdict[str, int] = defaultdict(int)
        self._finishing = 0  # pages past their download: parsing, queueing links, sending
        self._tasks: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._outage = OutageLog(logger)

    # --- public ------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    @property
    def busy(self) -> int:
        """Requests fetching or waiting for their domain."""
        return sum(self._fetching.values()) + sum(len(q) for q in self._waiting.values())

    @property
    def free(self) -> int:
        """Requests a pop may ask for: the slots not downloading or waiting, while pages past
        their download (parsing, waiting for their links' enqueue) stay under another
        ``(PAGES_IN_HAND_PER_SLOT - 1) x slots``, so at most ``PAGES_IN_HAND_PER_SLOT x slots``
        pages are in memory."""
        busy = self.busy
        return min(self.slots - busy,
                   PAGES_IN_HAND_PER_SLOT * self.slots - busy - self._finishing)

    def domain_cap(self) -> int:
        active = len({*self._waiting, *(d for d, n in self._fetching.items() if n)})
        return max(1, min(self.per_domain, self.slots // max(1, active)))

    async def run(self) -> None:
        """Pop and crawl until ``stop()``; then drain (see module docstring)."""
        background = [asyncio.create_task(self._every(self.ack_flush_s, self._flush)),
                      asyncio.create_task(self._every(self.reap_interval_s, self._reap))]
        background += [asyncio.create_task(self._every(s, call)) for s, call in self.periodic]
        try:
            while not self._stopping.is_set():
                await self._step()
        finally:
            self._stopping.set()  # the periodic tasks end after their current call
            await asyncio.gather(*background, return_exceptions=True)
            await self._drain()

    # --- the loop ----------------------------------------------------------------------------

    async def _step(self) -> None:
        free = self.free
        if free <= 0:
            await self._until(self._slot_freed.wait())
            self._slot_freed.clear()
            return
        try:
            result = await self.frontier.pop(self.view(), free)
            self._outage.succeeded()
        except Exception as exc:  # noqa: BLE001 - Redis outage: keep running, retry shortly
            self._outage.failed("frontier pop", exc)
            await self._until(asyncio.sleep(ERROR_BACKOFF_S))
            return
        self._accept(result)
        if len(result.requests) < free:
            await self._until(self._wait_for_work(result))

    async def _wait_for_work(self, result: PopResult) -> None:
        try:
            await self.frontier.wait_for_work(self.view(), result)
        except Exception as exc:  # noqa: BLE001 - Redis outage: pop again after a pause
            self._outage.failed("waiting for work", exc)
            await asyncio.sleep(ERROR_BACKOFF_S)

    async def _until(self, awaitable: Awaitable[Any]) -> None:
        """Await ``awaitable`` unless ``stop()`` comes first (then it is cancelled)."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.create_task(self._stopping.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        for pending in (task, stop):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending

    def _accept(self, result: PopResult) -> None:
        for leased in result.requests:
            self.leases.hold(leased.lease_id, leased.request)
            enqueued_at_s = None
            if leased.enqueued_at_ms is not None:  # the enqueue moment on time.monotonic()
                waited_s = (leased.dispatched_at_ms - leased.enqueued_at_ms) / 1000
                enqueued_at_s = result.received_at_s - waited_s
            self._waiting[leased.domain].append((leased, enqueued_at_s))
            if self.politeness is not None:
                self.politeness.dispatched(leased, result.received_at_s)
        self._dispatch()

    def _dispatch(self) -> None:
        """Start waiting requests of every domain below its cap."""
        if self._stopping.is_set():
            return
        cap = self.domain_cap()
        for domain in list(self._waiting):
            queue = self._waiting[domain]
            while queue and self._fetching[domain] < cap:
                leased, enqueued_at_s = queue.popleft()
                self._fetching[domain] += 1
                task = asyncio.create_task(self._run_page(leased, enqueued_at_s))
                self._tasks.add(task)
            if not queue:
                del self._waiting[domain]

    async def _run_page(self, leased: LeasedRequest, enqueued_at_s: float | None) -> None:
        downloaded = False

        def fetched() -> None:
            """The download is over: its slot (and its domain's) frees for the next request
            while this page is parsed and its links queued."""
            nonlocal downloaded
            if downloaded:
                return
            downloaded = True
            self._finishing += 1
            self._fetch_over(leased.domain)

        try:
            await self.processor.process(leased, enqueued_at_s=enqueued_at_s, fetched=fetched)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a page's bug must not stop the crawler
            logger.exception("page failed", extra={"url": leased.request.get("url")})
            if is_redis_outage(exc):
                self.leases.give_back(leased.lease_id)  # crawled again once Redis is back
            else:
                self._fail(leased, exc)
        finally:
            self._tasks.discard(asyncio.current_task())
            if self.politeness is not None:
                self.politeness.forget(leased.lease_id)
            if downloaded:
                self._finishing -= 1
                self._slot_freed.set()
            else:
                self._fetch_over(leased.domain)

    def _fetch_over(self, domain: str) -> None:
        self._fetching[domain] -= 1
        if not self._fetching[domain]:
            del self._fetching[domain]
        self._slot_freed.set()
        self._dispatch()

    def _fail(self, leased: LeasedRequest, exc: BaseException) -> None:
        """A page that raised gets an error item instead of a retry loop (see
        ``PageProcessor.failed``); if even that fails, it is given back."""
        try:
            self.processor.failed(leased, exc)
        except Exception:  # noqa: BLE001
            logger.exception("page failed twice", extra={"url": leased.request.get("url")})
            self.leases.give_back(leased.lease_id)

    async def _flush(self) -> int:
        """Every CRAWLER_ACK_FLUSH_MS: late sends (ONE round trip when any), then the acks."""
        if self.politeness is not None:
            await self.politeness.restamp()
        return await self.leases.flush()

    async def _reap(self) -> None:
        """Expired leases of dead crawlers back to their queues: ONE round trip."""
        try:
            await self.frontier.reap()
            self._outage.succeeded()
        except Exception as exc:  # noqa: BLE001 - Redis outage: try at the next interval
            self._outage.failed("lease reaping", exc)

    async def _every(self, interval_s: float, call: Callable[[], Awaitable[Any]]) -> None:
        """Call every ``interval_s`` until ``stop()``; a call is never cut in the middle (an ack
        batch taken and not written would be lost to the reaper)."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval_s)
                return
            try:
                await call()
            except Exception:  # noqa: BLE001 - logged; the loop goes on
                logger.exception("periodic task failed")

    async def _drain(self) -> None:
        """Release what never started, give in-flight pages ``grace_s``, flush, release."""
        for queue in self._waiting.values():
            for leased, _ in queue:
                self.leases.give_back(leased.lease_id)
        self._waiting.clear()
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=self.grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        acked = await self._flush()
        released = await self.leases.release_all()
        for _, call in self.periodic:
            with contextlib.suppress(Exception):
                await call()
        logger.info("fast engine stopped: acked %d, released %d", acked, released, extra={"acked": acked, "released": released,
                                                   "at": time.time()})
