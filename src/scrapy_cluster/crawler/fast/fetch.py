"""The HTTP client seam of the fast engine, and its aiohttp implementation.

A ``Fetcher`` downloads one request without following redirects (they go back to the frontier,
like the Scrapy crawler's) and raises ``FetchError`` when no response could be read. Another
client (httpx, ...) only has to implement ``fetch`` and ``close``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
import yarl

from scrapy_cluster.crawler.common.address_guard import (
    AddressGuard,
    ForbiddenConnection,
    refusal_message,
)

CONNECTION_HEADERS = frozenset({
    "content-length", "connection", "keep-alive", "te", "trailers", "transfer-encoding",
    "upgrade", "proxy-connection"})
"""Connection-control headers Twisted (so the Scrapy crawler) keeps out of response headers."""
READ_CHUNK_BYTES = 64 * 1024
NO_TIME_LIMIT = aiohttp.ClientTimeout()


@dataclass(frozen=True)
class FetchRequest:
    """What to send: ``headers`` as ``(name, value)`` pairs in order."""

    url: str
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


@dataclass(frozen=True)
class FetchResponse:
    """What came back: ``headers`` as received ``(name, value)`` pairs (latin-1 text), the body
    decoded from its Content-Encoding (gzip, deflate, br, zstd), ``content_encodings`` the
    encodings that were decoded."""

    url: str
    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    content_encodings: tuple[str, ...] = field(default=())


class FetchError(Exception):
    """No response. ``error_type`` mirrors the Scrapy crawler's exception names
    (``DownloadTimeoutError``, ``DownloadConnectionRefusedError``, ``DownloadCancelledError``...),
    ``reason`` is ``items.failure_reason``'s (``timeout``, ``too_large``, ``download_failed``) and
    ``retryable`` says whether RETRY_TIMES applies (as Scrapy's RETRY_EXCEPTIONS)."""

    def __init__(self, message: str, *, error_type: str, reason: str = "download_failed",
                 retryable: bool = True) -> None:
        super().__init__(message)
        self.error_type, self.reason, self.retryable = error_type, reason, retryable


class Fetcher(Protocol):
    async def fetch(self, request: FetchRequest, *, timeout_s: float,
                    max_bytes: int) -> FetchResponse:
        """The response (any status, redirects not followed); ``FetchError`` when none was read
        within ``timeout_s`` or its body grew past ``max_bytes`` (0 = no limit)."""
        ...

    async def close(self) -> None: ...


def too_large(url: str, max_bytes: int, expected: int | None) -> FetchError:
    """DOWNLOAD_MAXSIZE, with the Scrapy HTTP/1.1 handler's words: at the headers when the
    length is announced, else once that much arrived. Not retried."""
    if expected is not None:
        message = (f"Expected to receive {expected} bytes which is larger than download max "
                   f"size ({max_bytes}) in request <GET {url}>.")
    else:
        message = (f"download cancelled: the body grew past DOWNLOAD_MAXSIZE ({max_bytes} "
                   f"bytes) with no Content-Length")
    return FetchError(message, error_type="DownloadCancelledError", reason="too_large",
                      retryable=False)


def too_large_decoded(url: str, status: int, max_bytes: int, decoded: int) -> FetchError:
    """DOWNLOAD_MAXSIZE passed while decompressing (Scrapy's HttpCompressionMiddleware)."""
    return FetchError(
        f"Ignored response <{status} {url}> because its body ({decoded} B decompressed so far) "
        f"exceeded DOWNLOAD_MAXSIZE ({max_bytes} B) during decompression.",
        error_type="IgnoreRequest", reason="too_large", retryable=False)


class AiohttpFetcher:
    """One ``aiohttp.ClientSession`` with a keep-alive connector of ``connections`` sockets.

    No cookie jar (each request carries its crawl's cookies), no DNS cache (like the Scrapy
    crawler's DNSCACHE_ENABLED = False), redirects not followed. ``verify_tls`` False (the
    default of CRAWLER_TLS_VERIFY) accepts any certificate, as Scrapy's default context
    factory does, so both engines fetch the same HTTPS sites. With a ``guard`` every socket
    is made by ``AddressGuard.socket_factory``: a connection to a refused address fails with
    a ``ForbiddenAddress`` error (not retried) before any byte is sent.
    """

    def __init__(self, *, connections: int, verify_tls: bool = False,
                 guard: AddressGuard | None = None) -> None:
        self.connections = connections
        self.verify_tls = verify_tls
        self.guard = guard
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self.connections, use_dns_cache=False, ssl=bool(self.verify_tls),
                socket_factory=None if self.guard is None else self.guard.socket_factory)
            self._session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"))
        return self._session

    async def fetch(self, request: FetchRequest, *, timeout_s: float,
                    max_bytes: int) -> FetchResponse:
        try:
            if timeout_s > 0:  # aiohttp's own timer: one timer per request, not two
                return await self._fetch(request, max_bytes, self._timeout(timeout_s))
            async with asyncio.timeout(timeout_s):
                return await self._fetch(request, max_bytes, NO_TIME_LIMIT)
        except TimeoutError as exc:
            raise FetchError(f"Getting {request.url} took longer than {float(timeout_s)} seconds.",
                             error_type="DownloadTimeoutError", reason="timeout") from exc
        except aiohttp.ClientConnectorDNSError as exc:
            raise FetchError(str(exc), error_type="CannotResolveHostError") from exc
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, ForbiddenConnection):
                forbidden = exc.os_error
                raise FetchError(
                    refusal_message(request.url, exc.host, forbidden.address, forbidden.reason)
                    + " (refused at connect time)", error_type="ForbiddenAddress",
                    reason="ssrf", retryable=False) from exc
            refused = isinstance(exc.os_error, ConnectionRefusedError)
            raise FetchError(str(exc), error_type="DownloadConnectionRefusedError" if refused
                             else "DownloadFailedError") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise FetchError(str(exc) or type(exc).__name__,
                             error_type="DownloadFailedError") from exc

    def _timeout(self, total_s: float) -> aiohttp.ClientTimeout:
        """The whole download's limit (connect, send, headers and body), one object per value."""
        timeout = self._timeouts.get(total_s)
        if timeout is None:
            timeout = self._timeouts[total_s] = aiohttp.ClientTimeout(total=total_s)
        return timeout

    async def _fetch(self, request: FetchRequest, max_bytes: int,
                     timeout: aiohttp.ClientTimeout) -> FetchResponse:
        # the URL goes out exactly as queued and named in the item (it was made safe by
        # build_request, as Scrapy's Request does): yarl must not re-quote it ('%zz', '%7E')
        async with self._client().request(
                request.method, yarl.URL(request.url, encoded=True),
                headers=list(request.headers), timeout=timeout,
                data=request.body or None, allow_redirects=False) as response:
            expected = response.content_length  # the bytes on the wire, as Scrapy checks
            if max_bytes and expected is not None and expected > max_bytes:
                raise too_large(request.url, max_bytes, expected)
            encodings = tuple(e.strip() for e in response.headers.getall("Content-Encoding", ())
                              if e.strip())
            body = bytearray()
            async for chunk in response.content.iter_chunked(READ_CHUNK_BYTES):
                body += chunk
                if max_bytes and len(body) > max_bytes:
                    if encodings:
                        raise too_large_decoded(request.url, response.status, max_bytes,
                                                len(body))
                    raise too_large(request.url, max_bytes, None)
            pairs = tuple((name.decode("latin-1"), value.decode("latin-1"))
                          for name, value in response.raw_headers)
            return FetchResponse(request.url, response.status, pairs, bytes(body), encodings)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
