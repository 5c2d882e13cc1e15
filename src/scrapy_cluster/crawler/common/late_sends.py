"""Late sends: a domain's throttle counts a request from the moment it leaves the crawler.

The frontier records a throttle slot when it hands a request out (the pop) and every window
is THROTTLE_SEND_ALLOWANCE_MS longer than configured, so a request that leaves a few ms after
its dispatch still falls inside its window at the site. Some requests wait longer: the first
request of a host in a process waits for robots.txt, part of a burst waits for per-domain
concurrency, a busy crawler's buffer waits for the downloader, a busy event loop holds writes
back. Each engine tells ``LateSendBook`` the moment each request really goes out (the Scrapy
engine through ``crawler/send_clock.py``'s ``SendClockedDownloadHandler``, the fast engine
before its fetch); the book keeps the dispatch of every leased request and collects those
sent THROTTLE_LATE_SEND_MS or more after it. The engine hands them to ``Frontier.restamp`` in
one script call per CRAWLER_ACK_FLUSH_MS at most (at once for a send later than
THROTTLE_SEND_ALLOWANCE_MS), which moves their slots to the send: the site never sees more
requests in a window than the limit. ``take_fresh_slot`` is the rule both engines keep before
a very late request leaves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from scrapy_cluster.frontier.model import LateSend, LeasedRequest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Dispatch:
    domain: str
    dispatched_ms: int
    received_at_s: float


class LateSendBook:
    """Dispatch moments of leased requests not sent yet, and the late sends to report.

    A send ``late_ms`` or more after its dispatch is reported with the next batch; one
    ``urgent_ms`` or more late (typically the first request of a host, held back by robots.txt)
    should be reported at once, before another crawler's next dispatch of the domain.
    """

    def __init__(self, late_ms: int, urgent_ms: int | None = None) -> None:
        self.late_ms = late_ms
        self.urgent_ms = late_ms if urgent_ms is None else max(late_ms, urgent_ms)
        self._waiting: dict[str, _Dispatch] = {}
        self._late: list[LateSend] = []

    def dispatched(self, leased: LeasedRequest, received_at_s: float) -> None:
        """``leased`` came from a pop whose reply arrived at ``received_at_s`` (monotonic).
        A request of an unthrottled domain took no slot: nothing to track or restamp."""
        if leased.throttled:
            self._waiting[leased.lease_id] = _Dispatch(leased.domain, leased.dispatched_at_ms,
                                                       received_at_s)

    def sent(self, lease_id: str | None, now_s: float) -> LateSend | None:
        """The request of ``lease_id`` goes out now; returns the late send it made, if any."""
        dispatch = self._waiting.pop(lease_id, None) if lease_id else None
        if dispatch is None:
            return None
        late_ms = int((now_s - dispatch.received_at_s) * 1000)
        if late_ms < self.late_ms:
            return None
        send = LateSend(dispatch.domain, dispatch.dispatched_ms, dispatch.dispatched_ms + late_ms)
        self._late.append(send)
        return send

    def is_urgent(self, send: LateSend) -> bool:
        return send.sent_ms - send.dispatched_ms >= self.urgent_ms

    def stale(self, lease_id: str | None, now_s: float) -> tuple[str, int] | None:
        """``(domain, dispatch ms)`` of ``lease_id`` when its request, leaving now, is more
        than ``urgent_ms`` (the send allowance) past its dispatch: its slot is stale."""
        dispatch = self._waiting.get(lease_id) if lease_id else None
        if dispatch is None or int((now_s - dispatch.received_at_s) * 1000) <= self.urgent_ms:
            return None
        return dispatch.domain, dispatch.dispatched_ms

    def renewed(self, lease_id: str | None, now_s: float) -> None:
        """A fresh slot was taken for ``lease_id`` at ``now_s``: its send is measured from it."""
        dispatch = self._waiting.get(lease_id) if lease_id else None
        if dispatch is not None:
            self._waiting[lease_id] = replace(dispatch, received_at_s=now_s)  # type: ignore[index]

    def forget(self, lease_id: str | None) -> None:
        """The lease ended without its request being sent (filtered, dropped, released)."""
        if lease_id:
            self._waiting.pop(lease_id, None)

    def take(self) -> list[LateSend]:
        """The late sends collected since the last call."""
        late, self._late = self._late, []
        return late

    def __len__(self) -> int:
        return len(self._waiting)


FRESH_SLOT_MAX_ASKS = 50
"""A late request asks for a fresh slot at most this often, then goes (with a warning)."""
LateSlot = Callable[[str, int], Awaitable[int]]


async def take_fresh_slot(book: LateSendBook, lease_id: str | None, late_slot: LateSlot, *,
                          sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                          clock: Callable[[], float] = time.monotonic) -> int:
    """The rule both engines keep before a request leaves: one more than the send allowance
    past its dispatch does not go out on its stale slot. It takes a fresh one
    (``Frontier.late_slot``: ONE round trip, only for such late sends) or waits the time the
    frontier names and asks again. A request on time costs nothing. Returns the round trips
    made. Redis unreachable: the request goes on its stale slot (one warning)."""
    stale = book.stale(lease_id, clock())
    if stale is None:
        return 0
    domain, dispatched_ms = stale
    for asks in range(1, FRESH_SLOT_MAX_ASKS + 1):
        try:
            wait_ms = await late_slot(domain, dispatched_ms)
        except Exception as exc:  # noqa: BLE001 - Redis outage: better sent than lost
            logger.warning("late send of %s goes on its stale slot: %s", domain, exc,
                           extra={"event": "late_slot_failed", "domain": domain})
            return asks
        if wait_ms <= 0:
            book.renewed(lease_id, clock())
            return asks
        await sleep(wait_ms / 1000)
    logger.warning("late send of %s found no fresh slot after %d asks; sending", domain,
                   FRESH_SLOT_MAX_ASKS, extra={"event": "late_slot_gave_up", "domain": domain})
    return FRESH_SLOT_MAX_ASKS
