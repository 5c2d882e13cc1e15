"""Late sends in the Scrapy engine: ``SendClockedDownloadHandler`` tells the scheduler the moment
each request really goes out (Scrapy's HTTP/1.1 handler, watching its connections' writes); the
scheduler keeps the rule in ``common/late_sends.py`` (``LateSendBook``, ``take_fresh_slot``).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from scrapy import Request
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.crawler import Crawler
from scrapy.exceptions import CannotResolveHostError
from scrapy.http import Response
from scrapy.utils.asyncio import call_later
from scrapy.utils.httpobj import urlparse_cached

from scrapy_cluster.crawler.common.meta import LEASE_META_KEY
from scrapy_cluster.crawler.ssrf import connect_refusal


class SendClockedDownloadHandler(HTTP11DownloadHandler):
    """Scrapy's HTTP/1.1 handler that tells the cluster scheduler when a request goes out.

    The moment is taken when the request is written to its connection (after connecting, for
    a new one), in the event-loop turn that sends the bytes: a zero-delay call scheduled then
    runs in the same turn as the socket write, after every callback that was already due (a
    busy crawler's loop can hold a write back by tens of ms). Requests are paired with their
    writes per host, in order. A request that completes without a write seen (a failed
    connection) is reported when it completes. Set for ``http`` and ``https`` in
    ``DOWNLOAD_HANDLERS`` by the crawler settings; with another handler the late-send
    correction is off and only the send allowance applies.
    """

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._cluster_crawler = crawler
        self._unwritten: dict[bytes, deque[Request]] = defaultdict(deque)
        get_connection = self._pool.getConnection

        def clocked_get_connection(key: Any, endpoint: Any) -> Any:
            return get_connection(key, endpoint).addCallback(self._clock_writes)

        self._pool.getConnection = clocked_get_connection  # type: ignore[method-assign]

    def _on_sent(self) -> Callable[[Request], None] | None:
        scheduler = getattr(self._cluster_crawler.engine, "scheduler", None)
        return getattr(scheduler, "request_sent", None)  # DistributedScheduler only

    def _clock_writes(self, protocol: Any) -> Any:
        if getattr(protocol, "_cluster_clocked", False):
            return protocol
        write_request = protocol.request

        def clocked_request(twisted_request: Any) -> Any:
            result = write_request(twisted_request)
            host = getattr(getattr(twisted_request, "_parsedURI", None), "host", b"")
            self._written(host.lower())
            return result

        protocol.request = clocked_request
        protocol._cluster_clocked = True
        return protocol

    def _written(self, host: bytes) -> None:
        waiting = self._unwritten.get(host)
        on_sent = self._on_sent()
        if not waiting or on_sent is None:
            return
        request = waiting.popleft()
        if not waiting:
            del self._unwritten[host]
        call_later(0, on_sent, request)

    async def download_request(self, request: Request) -> Response:
        before_send = getattr(getattr(self._cluster_crawler.engine, "scheduler", None),
                              "before_send", None)  # DistributedScheduler only
        if before_send is not None:
            await before_send(request)
        try:
            return await self._clocked_download(request)
        except CannotResolveHostError as exc:  # Twisted's DNSLookupError, as Scrapy names it
            refusal = connect_refusal(request.url)
            if refusal is not None:
                raise refusal from exc
            raise

    async def _clocked_download(self, request: Request) -> Response:
        on_sent = self._on_sent()
        if on_sent is None or not request.meta.get(LEASE_META_KEY):
            return await super().download_request(request)
        host = (urlparse_cached(request).hostname or "").lower().encode("idna")
        self._unwritten[host].append(request)
        try:
            return await super().download_request(request)
        finally:
            waiting = self._unwritten.get(host)
            if waiting is not None and request in waiting:
                waiting.remove(request)
                if not waiting:
                    del self._unwritten[host]
                on_sent(request)
