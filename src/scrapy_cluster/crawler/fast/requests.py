"""A queued request dict to what the fast engine sends, with the Scrapy crawler's headers.

The Scrapy crawler sends: the request's stored headers, ``User-Agent`` from the crawl's
``useragent``, then (each only when absent) DEFAULT_REQUEST_HEADERS, USER_AGENT, the
``Accept-Encoding`` of the decoders available, and ``Cookie`` from the crawl's ``cookie`` and
the request's ``cookies`` (CrawlCookiesMiddleware). The same headers go out here, so the result
items' ``request_headers`` are equal. Header names are title-cased as Scrapy's ``Headers`` do.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from w3lib.url import safe_url_string

from scrapy_cluster.crawler.common.url_join import is_safe_url
from scrapy_cluster.crawler.fast.fetch import FetchRequest
from scrapy_cluster.crawler.fast.policy import PagePolicy


def header_dict(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """``{Name: [values]}`` from ``(name, value)`` pairs, names title-cased, first seen first."""
    result: dict[str, list[str]] = {}
    for name, value in pairs:
        result.setdefault(name.title(), []).append(value)
    return result


def last_header(pairs: Iterable[tuple[str, str]], name: str) -> str | None:
    """The last value of header ``name`` (as Scrapy's ``Headers.get``), or None."""
    wanted, found = name.lower(), None
    for key, value in pairs:
        if key.lower() == wanted:
            found = value
    return found


def stored_headers(stored: Mapping[str, Any]) -> dict[str, list[str]]:
    """The request's own headers and the crawl's ``useragent``: what the Scrapy crawler's
    request holds before its header middlewares (so in a robots.txt or SSRF refusal)."""
    headers: dict[str, list[str]] = {}
    for name, values in (stored.get("headers") or {}).items():
        listed = values if isinstance(values, list | tuple) else [values]
        headers.setdefault(str(name).title(), []).extend(str(v) for v in listed)
    if stored.get("useragent") and "User-Agent" not in headers:
        headers["User-Agent"] = [str(stored["useragent"])]
    return headers


def build_request(stored: Mapping[str, Any], policy: PagePolicy) -> FetchRequest:
    """The ``FetchRequest`` for a queued crawl-request dict (see module docstring)."""
    headers = stored_headers(stored)
    for name, value in policy.default_headers:
        headers.setdefault(name.title(), [value])
    headers.setdefault("User-Agent", [policy.user_agent])
    headers.setdefault("Accept-Encoding", [policy.accept_encoding])
    if "Cookie" not in headers:
        parts = [str(stored["cookie"])] if stored.get("cookie") else []
        parts += [f"{k}={v}" for k, v in dict(stored.get("cookies") or {}).items()]
        if parts:
            headers["Cookie"] = ["; ".join(parts)]
    queued = str(stored["url"])
    url = queued if is_safe_url(queued) else safe_url_string(queued, "utf-8")
    if "://" not in url:
        raise ValueError(f"Missing scheme in request url: {url}")
    return FetchRequest(url=url, method=str(stored.get("method") or "GET"),
                        headers=tuple((n, v) for n, values in headers.items() for v in values),
                        body=_body(stored))


def _body(stored: Mapping[str, Any]) -> bytes:
    if stored.get("body_b64"):
        return base64.b64decode(stored["body_b64"])
    body = stored.get("body") or ""
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)
