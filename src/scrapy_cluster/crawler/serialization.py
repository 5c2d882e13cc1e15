"""Scrapy ``Request`` <-> crawl-request dict, so a request survives a trip through Redis as JSON.

What survives: url, method, headers (``{name: [values]}``, latin-1 text so any byte survives),
body (``body`` when UTF-8, else ``body_b64``), cookies (a dict), callback/errback (names of
spider methods), priority, dont_filter, retry_times, the crawl-API fields (top level) and the
spider's own JSON-serialisable meta keys (``meta``). Scrapy runtime meta does not, except a
redirect's ``redirect_times`` (set by the scheduler, restored here) so REDIRECT_MAX_TIMES holds
across the frontier.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import orjson
from scrapy import Request, Spider

from scrapy_cluster.crawler.common.items import headers_to_dict
from scrapy_cluster.crawler.common.meta import (
    CLUSTER_FIELDS,
    LEASE_META_KEY,
    cluster_fields,
    user_meta,
)
from scrapy_cluster.errors import RequestSerializationError


def _method_name(spider: Spider, function: Any, role: str) -> str | None:
    if function is None:
        return None
    name = getattr(function, "__name__", None)
    if name is None or getattr(spider, name, None) != function:
        raise RequestSerializationError(
            f"{role} {function!r} is not a method of spider {spider.name!r}; only spider "
            f"methods can travel through the frontier")
    return str(name)


def _json_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    kept = user_meta(meta)
    try:
        orjson.dumps(kept)
    except TypeError as exc:
        raise RequestSerializationError(f"request meta is not JSON-serialisable: {exc}") from exc
    return kept


def _cookies(request: Request) -> dict[str, str]:
    cookies = request.cookies
    if isinstance(cookies, dict):
        return {str(k): str(v) for k, v in cookies.items()}
    return {str(c["name"]): str(c["value"]) for c in cookies}


def request_to_dict(request: Request, spider: Spider) -> dict[str, Any]:
    """The crawl-request dict for ``request``; raises RequestSerializationError if it cannot travel."""
    data: dict[str, Any] = {"url": request.url, "spiderid": spider.name,
                            **cluster_fields(request.meta), "priority": request.priority}
    if request.method != "GET":
        data["method"] = request.method
    if request.headers:
        data["headers"] = headers_to_dict(request.headers)
    if request.body:
        try:
            data["body"] = request.body.decode("utf-8")
        except UnicodeDecodeError:
            data["body_b64"] = base64.b64encode(request.body).decode("ascii")
    cookies = _cookies(request)
    if cookies:
        data["cookies"] = cookies
    meta = _json_meta(request.meta)
    if meta:
        data["meta"] = meta
    for role, function in (("callback", request.callback), ("errback", request.errback)):
        name = _method_name(spider, function, role)
        if name:
            data[role] = name
    if request.dont_filter:
        data["dont_filter"] = True
    data["retry_times"] = int(request.meta.get("retry_times") or data.get("retry_times") or 0)
    return data


def _body(data: Mapping[str, Any]) -> bytes:
    if data.get("body_b64"):
        return base64.b64decode(data["body_b64"])
    body = data.get("body") or ""
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


def _spider_method(spider: Spider, name: str | None, default: Any) -> Any:
    """The spider's public method ``name`` (a name read from Redis never reaches a dunder or
    private attribute)."""
    if not name:
        return default
    if str(name).startswith("_"):
        raise RequestSerializationError(f"spider {spider.name!r}: {name!r} is not a public method")
    method = getattr(spider, str(name), None)
    if not callable(method):
        raise RequestSerializationError(f"spider {spider.name!r} has no method {name!r}")
    return method


def request_from_dict(data: Mapping[str, Any], spider: Spider, *,
                      lease_id: str | None = None) -> Request:
    """Rebuild the Scrapy request; crawl-API fields go to ``meta``, the lease id too."""
    meta: dict[str, Any] = dict(data.get("meta") or {})
    meta.update({name: data[name] for name in CLUSTER_FIELDS if data.get(name) is not None})
    meta["retry_times"] = int(data.get("retry_times") or 0)
    if data.get("redirect_times"):
        meta["redirect_times"] = int(data["redirect_times"])
    if lease_id is not None:
        meta[LEASE_META_KEY] = lease_id
    headers = dict(data.get("headers") or {})
    if data.get("useragent") and not any(k.lower() == "user-agent" for k in headers):
        headers["User-Agent"] = [data["useragent"]]
    default_errback = getattr(spider, "errback", None)
    return Request(
        url=str(data["url"]), method=str(data.get("method") or "GET"), headers=headers,
        body=_body(data), cookies=dict(data.get("cookies") or {}), meta=meta,
        priority=int(data.get("priority") or 0), dont_filter=bool(data.get("dont_filter")),
        callback=_spider_method(spider, data.get("callback"), None),
        errback=_spider_method(spider, data.get("errback"), default_errback),
    )
