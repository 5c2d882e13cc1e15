"""The fast engine's lease book: ``common/lease_state.py``'s rules on ``AsyncFrontier``.

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

from scrapy_cluster.crawler.common.lease_state import FunnelSource, LeaseState
from scrapy_cluster.frontier.model import Revisit


class AsyncLeaseFrontier(Protocol):
    async def ack(self, lease_ids: list[str], *,
                  funnel: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
                  revisits: Mapping[str, Revisit] | None = None) -> int: ...

    async def release(self, lease_ids: list[str], *, priority_delta: int = 0) -> int: ...


class AsyncLeaseBook(LeaseState):
    """``LeaseState`` flushed on ``AsyncFrontier``: a page's lease is finished by the engine
    once its links are queued and its item produced."""

    def __init__(self, frontier: AsyncLeaseFrontier, *, logger: logging.Logger,
                 before_ack: Callable[[], Awaitable[None]] | None = None,
                 funnel: FunnelSource | None = None) -> None:
        super().__init__(logger=logger, funnel=funnel)
        self._frontier, self.before_ack = frontier, before_ack

    async def flush(self) -> int:
        """Execute the flush plan: release given-back leases (ONE round trip when any), then
        ``before_ack`` and ONE ack of the finished leases with the funnel counts. Returns acked."""
        plan = self.plan_flush()
        if plan.release:
            try:
                await self._frontier.release(plan.release)
            except Exception:  # noqa: BLE001 - Redis still down: try again at the next flush
                self.release_failed(plan)
        if not plan.ack:
            return 0
        try:
            if self.before_ack is not None:
                await self.before_ack()
        except asyncio.CancelledError:
            self.ack_postponed(plan)
            raise
        except Exception as exc:  # noqa: BLE001 - any delivery failure: give the work back
            await self._safe_release(self.delivery_failed(plan, exc))
            return 0
        counts = self.take_counts()
        try:
            if plan.revisits:  # re-crawled URLs: queued again when due, by the same call
                return await self._frontier.ack(plan.ack, funnel=counts, revisits=plan.revisits)
            return await self._frontier.ack(plan.ack, funnel=counts)
        except asyncio.CancelledError:
            # the counts are not restored, as the script may have written them (the engine
            # never cancels a flush; see engine._every)
            self.ack_postponed(plan)
            raise
        except Exception as exc:  # noqa: BLE001 - Redis down: the reaper returns them later
            self.ack_failed(plan, counts, exc)
            return 0

    async def release_all(self) -> int:
        """Give every held (unfinished) lease back: ONE round trip."""
        held = self.take_all_held()
        return await self._safe_release(held) if held else 0

    async def _safe_release(self, lease_ids: list[str]) -> int:
        try:
            return await self._frontier.release(lease_ids)
        except Exception as exc:  # noqa: BLE001 - Redis down: the reaper returns them later
            self.unreachable(lease_ids, exc)
            return 0
