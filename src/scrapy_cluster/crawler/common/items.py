"""The result items the crawler sends to the bus: one per fetched page, one per failed request.

Body rules (also in docs/crawler.md):

* ``body`` is the raw response body. It is sent as text when it is valid UTF-8 and
  ``KAFKA_BASE_64_ENCODE`` is off; otherwise base64 with ``encoding_base64: true``. Nothing is
  re-decoded, so no byte is lost; ``encoding`` names the page's own encoding for readers.
* An item whose encoded size exceeds the bus limit is sent with the body cut to fit
  (``body_truncated: true``, ``body_length`` = original byte count); if even an empty body does
  not fit, links are dropped too (``links_truncated: true``).
* ``links_dropped`` (only when > 0): links of the page past ``CRAWLER_MAX_LINKS_PER_PAGE``.

An error item's ``error.reason`` names the cause for programs (``response_items.failure_reason``
for the Scrapy engine). These builders take plain values (both engines); the Scrapy engine's
``crawler/response_items.py`` reads them from Scrapy's responses and exceptions.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import orjson
from scrapy.http.headers import Headers
from scrapy.link import Link

BODY_FIELDS = ("body", "encoding_base64")
_ITEM_MARGIN_BYTES = 256
MAX_REDIRECTS_MESSAGE = "max redirections reached"
"""What Scrapy's RedirectMiddleware says past REDIRECT_MAX_TIMES."""


def headers_to_dict(headers: Headers | Mapping[Any, Any]) -> dict[str, list[str]]:
    """Every header value, in order, decoded as latin-1 (lossless for any byte)."""
    result: dict[str, list[str]] = {}
    items = headers.items() if not isinstance(headers, Headers) else \
        ((key, headers.getlist(key)) for key in headers)
    for key, values in items:
        name = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        values = values if isinstance(values, list | tuple) else [values]
        result[name] = [v.decode("latin-1") if isinstance(v, bytes) else str(v) for v in values]
    return result


def status_message(status: int | None) -> str | None:
    """The standard reason phrase of ``status`` ("Not Found"); None when there is no status."""
    if status is None:
        return None
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown Status"


def timestamp(now_s: float) -> str:
    return datetime.fromtimestamp(now_s, UTC).isoformat()


def _identity(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Who asked for the page; plus ``depth_upgrade: true`` when the URL was fetched before in
    this crawl and comes again because it was found at a smaller depth (see docs/crawler.md),
    and ``sitemap_lastmod`` when a sitemap listed it with a ``<lastmod>``."""
    identity = {"appid": meta.get("appid"), "crawlid": meta.get("crawlid"),
                "spiderid": meta.get("spiderid"), "attrs": meta.get("attrs")}
    if meta.get("depth_upgrade"):
        identity["depth_upgrade"] = True
    nested = meta.get("meta")
    lastmod = meta.get("sitemap_lastmod", nested.get("sitemap_lastmod")
                       if isinstance(nested, Mapping) else None)
    if lastmod is not None:  # the page came from a sitemap entry with a <lastmod> (epoch s)
        identity["sitemap_lastmod"] = lastmod
    return identity


def encode_body(body: bytes, *, force_base64: bool) -> dict[str, Any]:
    """``{"body": ..., "encoding_base64": bool}`` following the body rules above."""
    if not force_base64:
        try:
            return {"body": body.decode("utf-8"), "encoding_base64": False}
        except UnicodeDecodeError:
            pass
    return {"body": base64.b64encode(body).decode("ascii"), "encoding_base64": True}


def page_item(*, url: str, response_url: str, status: int,
              response_headers: dict[str, list[str]], request_headers: dict[str, list[str]],
              body: bytes, encoding: str | None, links: Sequence[Link], meta: Mapping[str, Any],
              now_s: float, base64_body: bool, links_dropped: int = 0) -> dict[str, Any]:
    """The item for a fetched page (any status), from plain values.
    ``links``: anything with ``url`` and ``text``; ``meta``: the request's crawl fields."""
    dropped = {"links_dropped": links_dropped} if links_dropped else {}
    return {
        "url": url, "response_url": response_url,
        "status_code": status, "status_msg": status_message(status),
        "response_headers": response_headers, "request_headers": request_headers,
        **encode_body(body, force_base64=base64_body),
        "body_length": len(body), "body_truncated": False,
        "links": [{"url": link.url, "text": link.text} for link in links], **dropped,
        **_identity(meta), "timestamp": timestamp(now_s), "encoding": encoding,
    }


def failed_item(*, url: str, error_type: str, message: str, reason: str,
                request_headers: dict[str, list[str]], meta: Mapping[str, Any], now_s: float,
                status: int | None = None) -> dict[str, Any]:
    """The item for a request that failed for good, from plain values.
    ``reason``: one of ``failure_reason``'s answers; ``meta``: the request's crawl fields and
    its ``retry_times``."""
    return {
        "url": url, "response_url": None, "status_code": status,
        "status_msg": status_message(status),
        "error": {"type": error_type, "message": message, "reason": reason},
        "retry_times": int(meta.get("retry_times") or 0),
        "request_headers": request_headers, "links": [],
        **_identity(meta), "timestamp": timestamp(now_s),
    }


def fit_to_limit(item: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """``item`` itself when it encodes within ``max_bytes``, else a copy with the body cut to fit."""
    return fit_encoded(item, max_bytes)[0]


def fit_encoded(item: dict[str, Any], max_bytes: int) -> tuple[dict[str, Any], bytes]:
    """``fit_to_limit(item, max_bytes)`` and its JSON (``orjson.dumps``): an item that fits is
    encoded once, and its encoding is what goes on the bus (``orjson.Fragment``)."""
    raw = orjson.dumps(item)
    if len(raw) <= max_bytes:
        return item, raw
    return _cut_to_fit(item, max_bytes, len(raw))


def _cut_to_fit(item: dict[str, Any], max_bytes: int,
                size: int) -> tuple[dict[str, Any], bytes]:
    """A copy of ``item`` (``size`` bytes encoded) with the body cut, then the links dropped,
    to fit ``max_bytes``; and its JSON."""
    fitted = {**item, "body_truncated": True}
    body = fitted.get("body") or ""
    overhead = size - len(orjson.dumps(body))
    budget = max_bytes - overhead - _ITEM_MARGIN_BYTES
    fitted["body"] = _cut(body, budget, is_base64=bool(item.get("encoding_base64")))
    raw = orjson.dumps(fitted)
    if len(raw) > max_bytes:
        fitted["body"] = ""
        fitted["links"], fitted["links_truncated"] = [], True
        raw = orjson.dumps(fitted)
    return fitted, raw


def _cut(body: str, budget_bytes: int, *, is_base64: bool) -> str:
    """Cut ``body`` so its JSON encoding takes at most about ``budget_bytes``."""
    if budget_bytes <= 0:
        return ""
    if is_base64:
        return body[: budget_bytes // 4 * 4]
    encoded = body.encode("utf-8")[:budget_bytes]
    text = encoded.decode("utf-8", errors="ignore")
    while len(orjson.dumps(text)) > budget_bytes and text:
        text = text[: len(text) * 3 // 4]
    return text
