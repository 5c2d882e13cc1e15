"""Group commit of the links of many pages into one enqueue script call.

Each call of the enqueue script has a fixed cost in Redis (about 20 µs of Lua set-up plus a
dozen commands: view pruning, the sequence counter, crawl state, dupefilter and funnel TTLs,
the wake token) whatever it carries. With the seen cache most pages offer one or two new
links, so that fixed cost was most of the frontier's Redis time per page. ``LinkBatcher``
lets every page that finishes within ``linger_s`` of the first one (or while a call is in
flight) share ONE call.

Semantics are the same as one call per page: every page awaits the call that carried its
links, so its lease is still finished only after its links are queued, and a Redis outage
fails every page of the batch (each gives its lease back). Duplicates the seen cache knew are
counted in the funnel once per call (``FunnelCounter.add_cached``), before any of the pages'
leases can be acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from scrapy_cluster.crawler.common.funnel import FunnelCounter


class LinkFrontier(Protocol):
    async def enqueue_many(self, requests: Sequence[dict[str, Any]], *, dedupe: bool = False,
                           funnel: bool = True) -> Any: ...


class LinkBatcher:
    """``await enqueue(links)`` returns once a call carrying them succeeded (or raises its error).

    Round trips: one per batch (none when the seen cache knew every link), a batch being the
    links offered within ``linger_s`` of the first, or while the previous call was in flight,
    up to ``max_requests`` requests.
    """

    def __init__(self, frontier: LinkFrontier, funnel: FunnelCounter | None, *,
                 linger_s: float = 0.002, max_requests: int = 2000) -> None:
        self.frontier, self.funnel = frontier, funnel
        self.linger_s, self.max_requests = linger_s, max_requests
        self._pending: list[tuple[list[dict[str, Any]], asyncio.Future[Any]]] = []
        self._count = 0
        self._full = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self.calls = 0
        self.pages = 0

    async def enqueue_many(self, requests: Sequence[dict[str, Any]], *, dedupe: bool = False,
                           funnel: bool = True) -> Any:
        """The frontier's ``enqueue_many``: a page's links (dedupe, counted in the funnel) are
        batched and their result's ``cached_by_crawl`` is empty (counted here); anything else
        (a retry) is one call of its own."""
        if not (dedupe and funnel):
            return await self.frontier.enqueue_many(requests, dedupe=dedupe, funnel=funnel)
        return await self.enqueue(list(requests))

    async def enqueue(self, requests: list[dict[str, Any]]) -> Any:
        """Queue one page's links (with dedupe, counted in the funnel)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((requests, future))
        self._count += len(requests)
        if self._count >= self.max_requests:
            self._full.set()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_all())
        return await future

    async def _flush_all(self) -> None:
        while self._pending:
            if self.linger_s > 0 and self._count < self.max_requests:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.linger_s)
            batch, self._pending, self._count = self._pending, [], 0
            self._full.clear()
            await self._send(batch)

    async def _send(self, batch: list[tuple[list[dict[str, Any]], asyncio.Future[Any]]]) -> None:
        requests = [request for links, _ in batch for request in links]
        try:
            result = await self.frontier.enqueue_many(requests, dedupe=True)
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self.calls += 1
        self.pages += len(batch)
        cached = getattr(result, "cached_by_crawl", None)
        if cached:
            if self.funnel is not None:
                self.funnel.add_cached(cached)  # known duplicates, never sent: counted once
            result = dataclasses.replace(result, cached_by_crawl={})
        for _, future in batch:
            if not future.done():
                future.set_result(result)
