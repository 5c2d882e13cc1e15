"""Late sends: a domain's throttle counts a request from the moment it leaves this crawler.

The frontier records a throttle slot when it hands a request out (the pop) and every window
is THROTTLE_SEND_ALLOWANCE_MS longer than configured, so a request that leaves a few ms after
its dispatch still falls inside its window at the site. Some requests wait longer: the first
request of a host in a process waits for robots.txt, part of a burst waits for Scrapy's
per-domain concurrency, a busy crawler's buffer waits for the downloader.
``SendClockedDownloadHandler`` (Scrapy's HTTP/1.1 handler, plus one call) tells the scheduler
the moment each request really goes out; ``LateSendBook`` keeps the dispatch of every leased
request and collects those sent THROTTLE_LATE_SEND_MS or more after it. The scheduler hands
them to ``Frontier.restamp`` in one script call per CRAWLER_ACK_FLUSH_MS at most, which moves
their slots to the send: the site never sees more requests in a window than the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from scrapy import Request
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.crawler import Crawler
from scrapy.http import Response

from scrapy_cluster.crawler.meta import LEASE_META_KEY
from scrapy_cluster.frontier.model import LateSend, LeasedRequest


@dataclass(frozen=True)
class _Dispatch:
    domain: str
    dispatched_ms: int
    received_at_s: float


class LateSendBook:
    """Dispatch moments of leased requests not sent yet, and the late sends to report."""

    def __init__(self, late_ms: int) -> None:
        self.late_ms = late_ms
        self._waiting: dict[str, _Dispatch] = {}
        self._late: list[LateSend] = []

    def dispatched(self, leased: LeasedRequest, received_at_s: float) -> None:
        """``leased`` came from a pop whose reply arrived at ``received_at_s`` (monotonic)."""
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


class SendClockedDownloadHandler(HTTP11DownloadHandler):
    """Scrapy's HTTP/1.1 handler that tells the cluster scheduler when a request goes out.

    Set for ``http`` and ``https`` in ``DOWNLOAD_HANDLERS`` by the crawler settings; with
    another handler the late-send correction is off and only the send allowance applies.
    """

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._cluster_crawler = crawler

    async def download_request(self, request: Request) -> Response:
        scheduler = getattr(self._cluster_crawler.engine, "scheduler", None)
        on_sent = getattr(scheduler, "request_sent", None)  # DistributedScheduler only
        if on_sent is not None and request.meta.get(LEASE_META_KEY):
            on_sent(request)
        return await super().download_request(request)
