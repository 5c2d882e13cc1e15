"""The result items of the Scrapy engine, read from Scrapy's responses and exceptions; the
item rules themselves are ``common/items.py``'s (shared with the fast engine)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scrapy.exceptions import DownloadCancelledError, DownloadTimeoutError, IgnoreRequest
from scrapy.http import Request, Response, TextResponse
from scrapy.link import Link

from scrapy_cluster.crawler.common import revisit as recrawl
from scrapy_cluster.crawler.common.items import (
    MAX_REDIRECTS_MESSAGE,
    failed_item,
    headers_to_dict,
    page_item,
)
from scrapy_cluster.crawler.funnel_hooks import refusal_reason


def response_item(response: Response, links: Sequence[Link], *, now_s: float,
                  base64_body: bool, links_dropped: int = 0) -> dict[str, Any]:
    """The item for a fetched page (any status); ``links_dropped``: links past the page limit."""
    request = response.request
    assert request is not None
    return page_item(url=request.url, response_url=response.url, status=response.status,
                     response_headers=headers_to_dict(response.headers),
                     request_headers=headers_to_dict(request.headers), body=response.body,
                     encoding=response.encoding if isinstance(response, TextResponse) else None,
                     links=links, meta=request.meta, now_s=now_s, base64_body=base64_body,
                     links_dropped=links_dropped)


def not_modified_item(response: Response, verdict: recrawl.Verdict, *,
                      now_s: float) -> dict[str, Any]:
    """The small item of a re-crawled page that did not change (a 304 or the same body): the
    page item without body and links, ``not_modified: true`` and ``recrawl_fetch``."""
    request = response.request
    assert request is not None
    return recrawl.not_modified_item(page_item(
        url=request.url, response_url=response.url, status=response.status,
        response_headers=headers_to_dict(response.headers),
        request_headers=headers_to_dict(request.headers), body=b"", encoding=None, links=(),
        meta=request.meta, now_s=now_s, base64_body=False), verdict)


def failure_reason(error: BaseException) -> str:
    """Why a request produced no page: ``ssrf``, ``robots``, ``too_large`` (DOWNLOAD_MAXSIZE,
    also after decompression), ``timeout`` (DOWNLOAD_TIMEOUT), ``too_many_redirects``
    (REDIRECT_MAX_TIMES) or ``download_failed`` (anything else: refused, reset, DNS...)."""
    refused = refusal_reason(error)
    if refused is not None:
        return refused
    message = str(error)
    if isinstance(error, DownloadCancelledError) or (
            isinstance(error, IgnoreRequest) and "DOWNLOAD_MAXSIZE" in message):
        return "too_large"
    if isinstance(error, DownloadTimeoutError):
        return "timeout"
    if isinstance(error, IgnoreRequest) and message == MAX_REDIRECTS_MESSAGE:
        return "too_many_redirects"
    return "download_failed"


def _error_message(error: BaseException, download_maxsize: int) -> str:
    if isinstance(error, DownloadCancelledError) and not str(error):
        # Scrapy's HTTP/1.1 handler cancels a body without Content-Length this way, silently
        return (f"download cancelled: the body grew past DOWNLOAD_MAXSIZE "
                f"({download_maxsize} bytes) with no Content-Length")
    return str(error) or type(error).__name__


def error_item(request: Request, error: BaseException, *, now_s: float,
               status: int | None = None, download_maxsize: int = 0) -> dict[str, Any]:
    """The item for a request that failed for good (after retries, refused, disallowed...)."""
    return failed_item(url=request.url, error_type=type(error).__name__,
                       message=_error_message(error, download_maxsize),
                       reason=failure_reason(error),
                       request_headers=headers_to_dict(request.headers), meta=request.meta,
                       now_s=now_s, status=status)
