"""The fast engine's lease book: ``crawler/leases.py``'s ``LeaseBook`` rules on ``AsyncFrontier``.

A popped request is held until its page is through (links queued, item produced); then it is
*finished*, and every CRAWLER_ACK_FLUSH_MS the finished leases are acknowledged in ONE script
call carrying the funnel counts, after ``before_ack`` (the bus flush) confirmed delivery. If the
flush fails the batch is released instead; a page whose links could not be queued (Redis
unreachable) is *given back*: released at the next flush, never acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from scrapy_cluster.crawler.leases import FunnelSource, LeaseState


class AsyncLeaseFrontier(Protocol):
    async def ack(self, lease_ids: list[str], *,
                  funnel: Mapping[tuple[str, str], Mapping[str, int]] | None = None) -> int: ...

    async def release(self, lease_ids: list[str], *, priority_delta: int = 0) -> int: ...


class AsyncLeaseBook(LeaseState):
    """``LeaseState`` flushed on ``AsyncFrontier``: a page's lease is finished by the engine
    once its links are queued and its item produced."""

    def __init__(self, frontier: AsyncLeaseFrontier, *, logger: logging.Logger,
                 before_ack: Callable[[], Awaitable[None]] | None = None,
                 funnel: FunnelSource | None = None) -> None:
        super().__init__()
        self._frontier, self._logger = frontier, logger
        self.before_ack, self._funnel = before_ack, funnel

    async def flush(self) -> int:
        """Release given-back leases (ONE round trip when any), then ``before_ack`` and ONE ack
        of the finished leases with the funnel counts. Returns acked."""
        if given_back := self._take_given_back():
            try:
                await self._frontier.release(given_back)
            except Exception:  # noqa: BLE001 - Redis still down: try again at the next flush
                self._keep_given_back(given_back)
        batch = self._take_finished()
        if not batch:
            return 0
        try:
            if self.before_ack is not None:
                await self.before_ack()
        except asyncio.CancelledError:
            self._finished = batch + self._finished  # acknowledged by a later flush
            raise
        except Exception as exc:  # noqa: BLE001 - any delivery failure: give the work back
            self._logger.error("results not confirmed by the bus; releasing %d requests",
                               len(batch), extra={"error": repr(exc)})
            await self._safe_release(batch)
            return 0
        counts = self._funnel.take() if self._funnel is not None else {}
        try:
            return await self._frontier.ack(batch, funnel=counts)
        except asyncio.CancelledError:
            # acking a lease twice is harmless; the counts are not restored, as the script
            # may have written them (the engine never cancels a flush; see engine._every)
            self._finished = batch + self._finished
            raise
        except Exception as exc:  # noqa: BLE001 - Redis down: the reaper returns them later
            if self._funnel is not None:
                self._funnel.restore(counts)
            self._logger.warning("frontier unreachable; %d leases left to the reaper",
                                 len(batch), extra={"error": repr(exc)})
            return 0

    async def release_all(self) -> int:
        """Give every held (unfinished) lease back: ONE round trip."""
        held = self._take_all_held()
        return await self._safe_release(held) if held else 0

    async def _safe_release(self, lease_ids: list[str]) -> int:
        try:
            return await self._frontier.release(lease_ids)
        except Exception as exc:  # noqa: BLE001 - Redis down: the reaper returns them later
            self._logger.warning("frontier unreachable; %d leases left to the reaper",
                                 len(lease_ids), extra={"error": repr(exc)})
            return 0
