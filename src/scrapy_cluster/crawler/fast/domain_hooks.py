"""The Scrapy crawler's politeness hooks for the fast engine (docs/crawler.md, "Politeness").

* **Late sends**: a request handed to the HTTP client THROTTLE_LATE_SEND_MS or more after its
  dispatch has its throttle slot moved to that moment (``common/late_sends.py``'s
  ``LateSendBook``): restamped with the ack batch (ONE round trip for all), or at once when
  later than the send allowance.
* **Retry-After**: a 429/503 with ``Retry-After`` pauses its domain cluster-wide at once
  (``common/retry_after.py``'s ``RetryAfterPauser``, ONE round trip in a worker thread).
* **Crawl-delay**: a robots.txt ``Crawl-delay`` slows the domain cluster-wide, never faster
  (``common/crawl_delay.py``'s ``CrawlDelay.apply``, ONE round trip per robots.txt, in a thread).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protego import Protego

from scrapy_cluster.crawler.common.late_sends import LateSendBook, take_fresh_slot
from scrapy_cluster.crawler.common.retry_after import RetryAfterPauser
from scrapy_cluster.frontier.model import DispatchView, LeasedRequest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RobotsCrawlDelay:
    """How a robots.txt ``Crawl-delay`` is obeyed: ``apply`` is ``CrawlDelay.apply(domain,
    delay_s)``, the delay is the one for ``user_agent``, ``domain_of`` is the frontier's
    registered domain of a URL."""

    apply: Callable[[str, float], Any]
    user_agent: str = ""
    domain_of: Callable[[str], str] = str


class Politeness:
    """Late sends, Retry-After and Crawl-delay (see module docstring); no ``crawl_delay``:
    robots.txt delays are not obeyed."""

    def __init__(self, frontier: Any, view: Callable[[], DispatchView], late_sends: LateSendBook,
                 *, retry_after: RetryAfterPauser | None = None,
                 crawl_delay: RobotsCrawlDelay | None = None) -> None:
        self.frontier, self.view, self.late_sends = frontier, view, late_sends
        self.retry_after, self.crawl_delay = retry_after, crawl_delay

    def dispatched(self, leased: LeasedRequest, received_at_s: float) -> None:
        self.late_sends.dispatched(leased, received_at_s)

    def forget(self, lease_id: str) -> None:
        self.late_sends.forget(lease_id)

    async def sending(self, leased: LeasedRequest) -> None:
        """The request goes to the HTTP client now. One later than the send allowance first
        takes a fresh throttle slot or waits for one (``take_fresh_slot``); a late one is
        restamped (at once when very late)."""
        await take_fresh_slot(self.late_sends, leased.lease_id, self._late_slot)
        late = self.late_sends.sent(leased.lease_id, time.monotonic())
        if late is not None and self.late_sends.is_urgent(late):
            await self.restamp()

    async def _late_slot(self, domain: str, dispatched_ms: int) -> int:
        return int(await self.frontier.late_slot(self.view(), domain, dispatched_ms))

    async def restamp(self) -> None:
        """The late sends so far: ONE round trip when any."""
        late = self.late_sends.take()
        if not late:
            return
        try:
            await self.frontier.restamp(self.view(), late)
        except Exception as exc:  # noqa: BLE001 - Redis outage: the slots stay at dispatch
            logger.warning("late sends could not be restamped: %s", exc,
                           extra={"late_sends": len(late)})

    async def response(self, domain: str, status: int, retry_after: str | None) -> None:
        if self.retry_after is None:
            return
        wait_s = self.retry_after.wait_s(status, retry_after, time.time())
        if wait_s > 0:
            await asyncio.to_thread(self.retry_after.apply, domain, wait_s)

    async def robots_parsed(self, url: str, parser: Protego) -> None:
        obey = self.crawl_delay
        if obey is None:
            return
        delay_s = parser.crawl_delay(obey.user_agent)
        if delay_s and delay_s > 0:
            await asyncio.to_thread(obey.apply, obey.domain_of(url), float(delay_s))
