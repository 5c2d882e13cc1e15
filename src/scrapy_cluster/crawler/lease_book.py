"""The Scrapy engine's lease book: ``common/lease_state.py``'s rules on the sync ``Frontier``.

A page's lease finishes once its outputs are handled (``item_started``/``item_done``/
``outputs_done``: the spider middleware and the item pipeline report them); ``flush`` executes
the state's ``FlushPlan`` synchronously, from the scheduler's ack loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from scrapy_cluster.crawler.common.lease_state import FunnelSource, LeaseState
from scrapy_cluster.frontier.model import Revisit


class LeaseFrontier(Protocol):
    def ack(self, lease_ids: list[str], *,
            funnel: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
            revisits: Mapping[str, Revisit] | None = None) -> int: ...

    def release(self, lease_ids: list[str], *, priority_delta: int = 0) -> int: ...


class LeaseBook(LeaseState):
    """``LeaseState`` for the Scrapy engine: a page's lease finishes once its outputs are
    handled (``item_started``/``item_done``/``outputs_done``); ``flush`` is synchronous."""

    def __init__(self, frontier: LeaseFrontier, *, logger: logging.Logger,
                 before_ack: Callable[[], None] | None = None,
                 funnel: FunnelSource | None = None) -> None:
        super().__init__(logger=logger, funnel=funnel)
        self._frontier = frontier
        self._open_items: dict[str, int] = {}
        self._closed: set[str] = set()
        self.before_ack = before_ack

    def item_started(self, lease_id: str | None) -> None:
        """A page output an item; its lease waits until the item pipeline is done with it."""
        if lease_id is not None:
            self._open_items[lease_id] = self._open_items.get(lease_id, 0) + 1

    def item_done(self, lease_id: str | None) -> None:
        """The item pipeline finished an item (sent, dropped or failed)."""
        if lease_id is None or lease_id not in self._open_items:
            return
        self._open_items[lease_id] -= 1
        self._maybe_finish(lease_id)

    def outputs_done(self, lease_id: str | None) -> None:
        """The page's callback or errback produced its last output."""
        if lease_id is not None:
            self._closed.add(lease_id)
            self._maybe_finish(lease_id)

    def _maybe_finish(self, lease_id: str) -> None:
        if lease_id in self._closed and self._open_items.get(lease_id, 0) <= 0:
            self._closed.discard(lease_id)
            self._open_items.pop(lease_id, None)
            self.finish(lease_id)

    def give_back(self, lease_id: str | None) -> bool:
        if not super().give_back(lease_id):
            return False
        assert lease_id is not None
        self._open_items.pop(lease_id, None)
        self._closed.discard(lease_id)
        return True

    def flush(self) -> int:
        """Execute the flush plan: release given-back leases (ONE round trip, only when there
        are any), then acknowledge finished leases with the funnel counts made so far: ONE
        round trip (plus the ``before_ack`` hook). Returns acked."""
        plan = self.plan_flush()
        if plan.release:
            try:
                self._frontier.release(plan.release)
            except Exception:  # noqa: BLE001 - Redis still down: try again at the next flush
                self.release_failed(plan)
        if not plan.ack:
            return 0
        try:
            if self.before_ack is not None:
                self.before_ack()
        except Exception as exc:  # noqa: BLE001 - any delivery failure: give the work back
            self._safe_release(self.delivery_failed(plan, exc))
            return 0
        counts = self.take_counts()
        try:
            if plan.revisits:  # re-crawled URLs: queued again when due, by the same call
                return self._frontier.ack(plan.ack, funnel=counts, revisits=plan.revisits)
            return self._frontier.ack(plan.ack, funnel=counts)
        except Exception as exc:  # noqa: BLE001 - Redis down: the reaper returns them later
            self.ack_failed(plan, counts, exc)
            return 0

    def release_all(self) -> int:
        """Give every held (unfinished) lease back to the frontier: ONE round trip."""
        held = self.take_all_held()
        return self._safe_release(held) if held else 0

    def _safe_release(self, lease_ids: list[str]) -> int:
        try:
            return self._frontier.release(lease_ids)
        except Exception as exc:  # noqa: BLE001 - Redis down: the reaper returns them later
            self.unreachable(lease_ids, exc)
            return 0
