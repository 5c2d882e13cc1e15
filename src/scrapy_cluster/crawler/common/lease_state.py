"""Which leased requests a crawler holds, and the plan of each flush (no I/O).

A request popped from the frontier is leased to this process. When its outputs are done the
lease is *finished*; every ``CRAWLER_ACK_FLUSH_MS`` the finished leases are acknowledged in one
frontier round trip, but only after the ``before_ack`` hook (the bus flush) says that
everything produced so far was delivered. When it was not, the batch is released back to the
queues instead, so the pages are crawled again rather than lost (at-least-once).

The acknowledgement also carries the crawler's URL funnel counts, written by the same script
call. The rule every engine must keep (completion detection relies on it): a page's lease is
finished only after the enqueue of its links has returned and every count of the page was
made; it is acknowledged together with those counts.

A lease of a re-crawled URL may carry a ``Revisit`` (``schedule``, see ``common/revisit.py``):
it is acknowledged with it, so the frontier queues the request again when due. A lease
released (given back, or its batch not confirmed by the bus) carries nothing; one left to the
reaper loses its revisit too (the reaper queues the request again with its old state).

A page whose links could not be queued (Redis unreachable) is *given back* instead: its lease
is released at the next flush, never acknowledged, so the page is crawled again and nothing
it found is lost. A release that fails is tried again at the following flush.

``LeaseState`` decides; each engine's lease book only executes the plan on its frontier client:
``crawler/lease_book.py`` (``LeaseBook``, the Scrapy engine, on the sync ``Frontier``) and
``crawler/fast/async_lease_book.py`` (``AsyncLeaseBook``, on ``AsyncFrontier``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from scrapy_cluster.frontier.model import Revisit

FunnelCounts = dict[tuple[str, str], dict[str, int]]


class FunnelSource(Protocol):
    def take(self) -> FunnelCounts: ...

    def restore(self, counts: Mapping[tuple[str, str], Mapping[str, int]]) -> None: ...


@dataclass(frozen=True)
class FlushPlan:
    """One flush, in order:

    1. ``release``: the given-back leases, released in ONE round trip (none when empty); when
       it fails, ``LeaseState.release_failed`` keeps them for the next flush;
    2. ``ack``: the finished leases. Nothing more happens when it is empty. Otherwise the
       engine runs ``before_ack``; when that fails, ``LeaseState.delivery_failed`` names the
       leases to release instead. Else the funnel counts are ``LeaseState.take_counts()``,
       taken only then (the confirmation itself counts ``delivered``), and ``ack`` is
       acknowledged with them in ONE round trip; when that fails, ``LeaseState.ack_failed``
       keeps the counts for the next flush and leaves the leases to the reaper.

    ``revisits``: lease id -> ``Revisit`` for the ``ack`` leases scheduled again (passed with
    the acknowledgement; empty when none is).
    """

    release: list[str]
    ack: list[str]
    revisits: dict[str, Revisit] = field(default_factory=dict)


class LeaseState:
    """What a crawler engine holds: leased request dicts by lease id, the finished leases
    awaiting acknowledgement and the given-back ones awaiting release; the funnel counts the
    acknowledgement carries (``funnel``). No I/O: the engines' lease books flush it."""

    def __init__(self, *, logger: logging.Logger, funnel: FunnelSource | None = None) -> None:
        self._held: dict[str, Mapping[str, Any]] = {}
        self._finished: list[str] = []
        self._given_back: list[str] = []
        self._revisits: dict[str, Revisit] = {}
        self._logger, self._funnel = logger, funnel

    def hold(self, lease_id: str, request: Mapping[str, Any]) -> None:
        self._held[lease_id] = request

    def request(self, lease_id: str) -> Mapping[str, Any] | None:
        """The stored request dict of a held lease (for retries), or None."""
        return self._held.get(lease_id)

    def schedule(self, lease_id: str | None, revisit: Revisit | None) -> None:
        """Acknowledge ``lease_id`` with ``revisit`` when it finishes (None: no revisit).
        Ignored for a lease not held."""
        if lease_id is None:
            return
        if revisit is None:
            self._revisits.pop(lease_id, None)
        elif lease_id in self._held:
            self._revisits[lease_id] = revisit

    def finish(self, lease_id: str | None) -> None:
        """Mark ``lease_id`` done; it is acknowledged at the next flush. Unknown ids are ignored."""
        if lease_id is not None and self._held.pop(lease_id, None) is not None:
            self._finished.append(lease_id)

    def give_back(self, lease_id: str | None) -> bool:
        """The page cannot finish (its links could not be queued): release its lease at the
        next flush instead of acknowledging it. False when the lease is not held."""
        if lease_id is None or self._held.pop(lease_id, None) is None:
            return False
        if self._revisits:
            self._revisits.pop(lease_id, None)
        self._given_back.append(lease_id)
        return True

    @property
    def held_count(self) -> int:
        return len(self._held)

    @property
    def pending_count(self) -> int:
        """Leases finished or given back but not yet acknowledged or released."""
        return len(self._finished) + len(self._given_back)

    def plan_flush(self) -> FlushPlan:
        """What the next flush releases and acknowledges (see ``FlushPlan``); both lists are
        taken from this state."""
        revisits: dict[str, Revisit] = {}
        if self._revisits:
            revisits = {lease_id: revisit for lease_id in self._finished
                        if (revisit := self._revisits.pop(lease_id, None)) is not None}
        plan = FlushPlan(release=self._given_back, ack=self._finished, revisits=revisits)
        self._given_back, self._finished = [], []
        return plan

    def release_failed(self, plan: FlushPlan) -> None:
        """Releasing ``plan.release`` failed (Redis still down): try them at the next flush."""
        self._given_back = plan.release + self._given_back

    def delivery_failed(self, plan: FlushPlan, error: BaseException) -> list[str]:
        """``before_ack`` failed: the leases to release instead of acknowledging them."""
        self._logger.error("results not confirmed by the bus; releasing %d requests",
                           len(plan.ack), extra={"error": repr(error)})
        return plan.ack

    def take_counts(self) -> FunnelCounts:
        """The funnel counts the acknowledgement carries (forgotten here until ``ack_failed``)."""
        return self._funnel.take() if self._funnel is not None else {}

    def ack_failed(self, plan: FlushPlan, counts: FunnelCounts, error: BaseException) -> None:
        """The acknowledgement failed (Redis down): the counts wait for the next flush, the
        leases for the reaper (they expire and are queued again)."""
        if self._funnel is not None:
            self._funnel.restore(counts)
        self.unreachable(plan.ack, error)

    def ack_postponed(self, plan: FlushPlan) -> None:
        """The flush was cancelled before its acknowledgement returned: a later flush
        acknowledges ``plan.ack`` (acknowledging a lease twice is harmless)."""
        self._finished = plan.ack + self._finished
        self._revisits.update(plan.revisits)

    def unreachable(self, lease_ids: list[str], error: BaseException) -> None:
        """A release or acknowledgement of ``lease_ids`` failed: the reaper returns them."""
        self._logger.warning("frontier unreachable; %d leases left to the reaper",
                             len(lease_ids), extra={"error": repr(error)})

    def take_all_held(self) -> list[str]:
        """Every held and given-back lease (graceful shutdown releases them)."""
        held = [*self._held, *self._given_back]
        self._held, self._given_back = {}, []
        for lease_id in held if self._revisits else ():
            self._revisits.pop(lease_id, None)
        return held
