"""The original system's Redis values, read and turned into ours. Pure: no I/O.

What Scrapy Cluster 1.2/1.3 wrote (docs/migration.md has the whole table):

* ``<spiderid>:<domain>:queue`` — ZSET of JSON requests scored ``-priority``; the lowest score
  pops first and equal scores pop in member (byte) order. Two shapes: the Kafka Monitor wrote the
  API request itself (``url``, ``appid``, ``crawlid``, ``maxdepth`` ... at the top level); the
  crawlers wrote Scrapy's request dict (``url``, ``method``, ``headers``, ``body``, ``cookies``,
  ``meta`` holding the crawl fields and ``curdepth``, ``dont_filter``, ``callback`` ...).
* ``<spiderid>:dupefilter:<crawlid>`` — SET of 40-hex SHA1 request fingerprints (Scrapy 1.x
  ``request_fingerprint``: method, canonical URL, body). One-way: see ``legacy_fingerprint``.
* ``<spiderid>:blacklist`` — SET of ``<appid>||<crawlid>``.
* ``timeout:<spiderid>:<appid>:<crawlid>`` — STRING, expiry in epoch seconds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from w3lib.url import canonicalize_url

API_FIELDS = ("url", "appid", "crawlid", "spiderid", "maxdepth", "allowed_domains",
              "allow_regex", "deny_regex", "deny_extensions", "expires", "useragent", "cookie",
              "attrs", "domain_max_pages")
"""Crawl-API fields (our crawl schema's properties, ``priority`` aside: links and retries of the
original legitimately sit below the API's minimum)."""
REQUEST_FIELDS = ("method", "headers", "body", "cookies", "callback", "errback", "dont_filter")
"""Scrapy request fields of the crawlers' shape, kept as our request fields of the same name."""
SCRAPY_RUNTIME_META = frozenset({
    "depth", "download_latency", "download_slot", "download_timeout", "redirect_times",
    "redirect_ttl", "redirect_urls", "redirect_reasons", "retry_times", "is_start_request",
    "handle_httpstatus_all", "priority", "curdepth", "url", "_encoding",
})
BLACKLIST_SEPARATOR = "||"
QUEUE_SUFFIX = ":queue"
DUPEFILTER_PART = ":dupefilter:"
BLACKLIST_SUFFIX = ":blacklist"
TIMEOUT_PREFIX = "timeout:"


class LegacyItemError(ValueError):
    """An original queue member that cannot become one of our requests (the message says why)."""


@dataclass(frozen=True)
class LegacyRequest:
    """One original queue member: our request dict, its crawl-API view (what our crawl schema
    validates) and the original's fingerprint of it (40 hex)."""

    request: dict[str, Any]
    api_view: dict[str, Any]
    fingerprint: str


def legacy_fingerprint(url: str, method: str = "GET", body: bytes = b"") -> str:
    """Scrapy 1.x ``request_fingerprint`` without headers: SHA1 over the method, the canonical
    URL (w3lib ``canonicalize_url``, fragment dropped) and the body, as 40 hex digits."""
    digest = hashlib.sha1(method.upper().encode())  # noqa: S324 - the original's function
    digest.update(canonicalize_url(url).encode())
    digest.update(body)
    return digest.hexdigest()


def is_legacy_queue_member(member: bytes | str) -> bool:
    """True for an original queue member (a JSON object); ours are ``<priority>|<crawlid>``."""
    return (member.encode() if isinstance(member, str) else member)[:1] == b"{"


def _body_bytes(body: Any) -> bytes:
    if body is None:
        return b""
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


def convert_item(raw: bytes, score: float, key_spiderid: str) -> LegacyRequest:
    """Our request for one original queue member; its priority is ``-score`` (what ordered it).

    ``LegacyItemError`` when it is not a JSON object with a url, appid and crawlid."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise LegacyItemError(f"not JSON ({exc}); a 1.1 pickle queue must first be upgraded "
                              "with the original migrate.py") from exc
    if not isinstance(data, dict):
        raise LegacyItemError("not a JSON object")
    meta = data.get("meta")
    if isinstance(meta, Mapping):
        fields = {**{k: v for k, v in meta.items() if k in API_FIELDS}, "url": data.get("url")}
        extra = {"curdepth": meta.get("curdepth", 0), "retry_times": meta.get("retry_times", 0),
                 **{name: data[name] for name in REQUEST_FIELDS if data.get(name) not in (None, {}, "")}}
        user_meta = {k: v for k, v in meta.items()
                     if k not in API_FIELDS and k not in SCRAPY_RUNTIME_META
                     and not str(k).startswith("_")}
        if user_meta:
            extra["meta"] = user_meta
    else:
        fields = {k: v for k, v in data.items() if k != "priority"}
        extra = {"curdepth": data.get("curdepth", 0)} if "curdepth" in data else {}
        fields.pop("curdepth", None)
    fields.setdefault("spiderid", key_spiderid)
    for name in ("url", "appid", "crawlid"):
        if not isinstance(fields.get(name), str) or not fields[name]:
            raise LegacyItemError(f"'{name}' missing or not a string")
    if extra.get("method") == "GET":
        del extra["method"]
    if extra.get("callback") == "parse":  # Scrapy's default: leave it implied
        del extra["callback"]
    request = {**{k: v for k, v in fields.items() if v is not None}, **extra,
               "priority": -int(score)}
    fingerprint = legacy_fingerprint(fields["url"], str(extra.get("method") or "GET"),
                                     _body_bytes(extra.get("body")))
    return LegacyRequest(request, {k: v for k, v in fields.items() if v is not None}, fingerprint)


def blacklisted_crawlid(member: bytes | str) -> str:
    """The crawlid of an original blacklist member ``<appid>||<crawlid>`` (ours: the crawlid)."""
    text = member.decode("utf-8", errors="replace") if isinstance(member, bytes) else member
    _, separator, crawlid = text.partition(BLACKLIST_SEPARATOR)
    return crawlid if separator else text


def queue_spiderid(key: str) -> str | None:
    """``link`` for ``link:example.com:queue``; None when ``key`` is not shaped like a queue."""
    if not key.endswith(QUEUE_SUFFIX) or key.count(":") < 2:
        return None
    return key.split(":", 1)[0]


def dupefilter_crawl(key: str) -> tuple[str, str] | None:
    """``(spiderid, crawlid)`` of ``<spiderid>:dupefilter:<crawlid>``, else None."""
    spiderid, separator, crawlid = key.partition(DUPEFILTER_PART)
    if not separator or not spiderid or not crawlid or ":" in spiderid:
        return None
    return spiderid, crawlid


def blacklist_spiderid(key: str, *, reserved: frozenset[str]) -> str | None:
    """``link`` for ``link:blacklist`` (not for ``reserved`` keys such as the domain blacklist)."""
    if key in reserved or not key.endswith(BLACKLIST_SUFFIX):
        return None
    spiderid = key[: -len(BLACKLIST_SUFFIX)]
    return spiderid if spiderid and ":" not in spiderid else None


def timeout_parts(key: str) -> tuple[str, str, str] | None:
    """``(spiderid, appid, crawlid)`` of ``timeout:<spiderid>:<appid>:<crawlid>``, else None."""
    if not key.startswith(TIMEOUT_PREFIX):
        return None
    parts = key[len(TIMEOUT_PREFIX):].split(":", 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def timeout_expiry(raw: bytes | str | None) -> int | None:
    """Expiry in epoch seconds of a timeout key's value; None when it is not a number."""
    try:
        return int(float(raw or b""))
    except ValueError:
        return None
