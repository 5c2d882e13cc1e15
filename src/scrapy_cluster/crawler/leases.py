"""Which leased requests this process holds, and acknowledging them in batches.

A request popped from the frontier is leased to this process. When its outputs are done the
lease is *finished*; every ``CRAWLER_ACK_FLUSH_MS`` the finished leases are acknowledged in one
frontier round trip, but only after the ``before_ack`` hook (the bus pipeline's flush) says
that everything produced so far was delivered. When it was not, the batch is released back to
the queues instead, so the pages are crawled again rather than lost (at-least-once).

The acknowledgement also carries the crawler's URL funnel counts (``funnel``), written by the
same script call. The rule every engine must keep (completion detection relies on it): a
page's lease is finished only after the enqueue of its links has returned and every count of
the page was made; it is acknowledged together with those counts.

A page whose links could not be queued (Redis unreachable) is *given back* instead: its lease
is released at the next flush, never acknowledged, so the page is crawled again and nothing
it found is lost. A release that fails is tried again at the following flush.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class LeaseFrontier(Protocol):
    def ack(self, lease_ids: list[str], *,
            funnel: Mapping[tuple[str, str], Mapping[str, int]] | None = None) -> int: ...

    def release(self, lease_ids: list[str], *, priority_delta: int = 0) -> int: ...


class FunnelSource(Protocol):
    def take(self) -> dict[tuple[str, str], dict[str, int]]: ...

    def restore(self, counts: Mapping[tuple[str, str], Mapping[str, int]]) -> None: ...


class LeaseState:
    """What a crawler engine holds: leased request dicts by lease id, the finished leases
    awaiting acknowledgement and the given-back ones awaiting release. No I/O: ``LeaseBook``
    (Scrapy engine) and ``fast.leases.AsyncLeaseBook`` (asyncio engine) flush it."""

    def __init__(self) -> None:
        self._held: dict[str, Mapping[str, Any]] = {}
        self._finished: list[str] = []
        self._given_back: list[str] = []

    def hold(self, lease_id: str, request: Mapping[str, Any]) -> None:
        self._held[lease_id] = request

    def request(self, lease_id: str) -> Mapping[str, Any] | None:
        """The stored request dict of a held lease (for retries), or None."""
        return self._held.get(lease_id)

    def finish(self, lease_id: str | None) -> None:
        """Mark ``lease_id`` done; it is acknowledged at the next ``flush``. Unknown ids are ignored."""
        if lease_id is not None and self._held.pop(lease_id, None) is not None:
            self._finished.append(lease_id)

    def give_back(self, lease_id: str | None) -> bool:
        """The page cannot finish (its links could not be queued): release its lease at the
        next flush instead of acknowledging it. False when the lease is not held."""
        if lease_id is None or self._held.pop(lease_id, None) is None:
            return False
        self._given_back.append(lease_id)
        return True

    @property
    def held_count(self) -> int:
        return len(self._held)

    @property
    def pending_count(self) -> int:
        """Leases finished or given back but not yet acknowledged or released."""
        return len(self._finished) + len(self._given_back)

    def _take_given_back(self) -> list[str]:
        batch, self._given_back = self._given_back, []
        return batch

    def _keep_given_back(self, batch: list[str]) -> None:
        """A release failed: try ``batch`` again at the next flush."""
        self._given_back = batch + self._given_back

    def _take_finished(self) -> list[str]:
        batch, self._finished = self._finished, []
        return batch

    def _take_all_held(self) -> list[str]:
        """Every held and given-back lease (graceful shutdown releases them)."""
        held = [*self._held, *self._given_back]
        self._held, self._given_back = {}, []
        return held


class LeaseBook(LeaseState):
    """``LeaseState`` for the Scrapy engine: a page's lease finishes once its outputs are
    handled (``item_started``/``item_done``/``outputs_done``); ``flush`` is synchronous."""

    def __init__(self, frontier: LeaseFrontier, *, logger: logging.Logger,
                 before_ack: Callable[[], None] | None = None,
                 funnel: FunnelSource | None = None) -> None:
        super().__init__()
        self._frontier = frontier
        self._funnel = funnel
        self._logger = logger
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
        """Release given-back leases (ONE round trip, only when there are any), then acknowledge
        finished leases with the funnel counts made so far: ONE round trip (plus the
        ``before_ack`` hook). Returns acked. Counts that could not be written are kept for the
        next flush, and so are given-back leases whose release failed."""
        if given_back := self._take_given_back():
            try:
                self._frontier.release(given_back)
            except Exception:  # noqa: BLE001 - Redis still down: try again at the next flush
                self._keep_given_back(given_back)
        batch = self._take_finished()
        if not batch:
            return 0
        try:
            if self.before_ack is not None:
                self.before_ack()
        except Exception as exc:  # noqa: BLE001 - any delivery failure: give the work back
            self._logger.error("results not confirmed by the bus; releasing %d requests",
                               len(batch), extra={"error": repr(exc)})
            self._safe(self._frontier.release, batch)
            return 0
        counts = self._funnel.take() if self._funnel is not None else {}
        try:
            return self._frontier.ack(batch, funnel=counts)
        except Exception as exc:  # noqa: BLE001 - Redis down: the reaper returns them later
            if self._funnel is not None:
                self._funnel.restore(counts)
            self._logger.warning("frontier unreachable; %d leases left to the reaper",
                                 len(batch), extra={"error": repr(exc)})
            return 0

    def release_all(self) -> int:
        """Give every held (unfinished) lease back to the frontier: ONE round trip."""
        held = self._take_all_held()
        return self._safe(self._frontier.release, held) if held else 0

    def _safe(self, call: Callable[[list[str]], int], lease_ids: list[str]) -> int:
        try:
            return call(lease_ids)
        except Exception as exc:  # noqa: BLE001 - Redis down: the reaper returns them later
            self._logger.warning("frontier unreachable; %d leases left to the reaper",
                                 len(lease_ids), extra={"error": repr(exc)})
            return 0
