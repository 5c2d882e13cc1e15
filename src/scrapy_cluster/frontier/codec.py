"""Crawl requests to compact queue items and back; fingerprints; registered domains.

A queued item is JSON with short keys. ``spiderid``, ``crawlid`` and
``priority`` are not stored in it (the sub-queue key holds them), values equal
to their default are omitted, and ``None`` values are dropped. Decoding
restores the defaults, so a decoded request always has ``url``, ``appid``,
``crawlid``, ``spiderid``, ``priority``, ``curdepth``, ``maxdepth``,
``expires``, ``method``, ``dont_filter`` and ``retry_times``.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlsplit

import orjson
import tldextract
from w3lib.url import canonicalize_url

from scrapy_cluster.errors import InvalidRequestError

PRIORITY_LIMIT = 16383
"""|priority| must not exceed this (sub-queue order scores must stay exact doubles)."""

REQUIRED = ("url", "appid", "crawlid", "spiderid")
IMPLIED = ("spiderid", "crawlid", "priority")
DEFAULTS: dict[str, Any] = {
    "priority": 1, "curdepth": 0, "maxdepth": 0, "expires": 0, "method": "GET",
    "dont_filter": False, "retry_times": 0,
}
SHORT_NAMES = {
    "url": "u", "appid": "a", "maxdepth": "md", "curdepth": "cd", "attrs": "at",
    "allowed_domains": "ad", "allow_regex": "ar", "deny_regex": "dr", "deny_extensions": "de",
    "expires": "e", "useragent": "ua", "cookie": "ck", "domain_max_pages": "dm",
    "method": "m", "headers": "h", "body": "b", "body_b64": "bb", "cookies": "cs",
    "meta": "mt", "callback": "cb", "errback": "eb", "dont_filter": "df", "retry_times": "rt",
}
LONG_NAMES = {short: long for long, short in SHORT_NAMES.items()}
EXTRA = "x"
"""Fields outside the crawl API and Scrapy's request fields travel under this key."""

FINGERPRINT_BYTES = 16
DUPE_BUCKET_BITS = 12
DUPE_RECORD = slice(2, 10)


class DomainExtractor:
    """Registered domain of a URL from tldextract's bundled public-suffix snapshot (no network)."""

    def __init__(self) -> None:
        self._extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    def __call__(self, url: str) -> str:
        """``http://news.bbc.co.uk/x`` -> ``bbc.co.uk``; IPs and bare hosts are their own domain."""
        host = urlsplit(url).hostname
        if not host:
            raise InvalidRequestError(f"url has no host: {url!r}")
        parts = self._extract.extract_str(host)
        return parts.top_domain_under_public_suffix or host


def validate(request: Any) -> None:
    """Raise ``InvalidRequestError`` saying what is wrong with ``request``."""
    if not isinstance(request, dict):
        raise InvalidRequestError(f"a crawl request must be a JSON object, got {type(request).__name__}")
    for name in REQUIRED:
        value = request.get(name)
        if not isinstance(value, str) or not value:
            raise InvalidRequestError(f"'{name}' must be a non-empty string")
    if any(ch in request["spiderid"] for ch in "\x00\x01\x02\x03\x04\x05\x06:\n"):
        raise InvalidRequestError("'spiderid' must not contain ':' or control characters")
    if any(ch in request["crawlid"] + request["appid"] for ch in "\x00\x01\x02\x03\x04\x05\x06"):
        raise InvalidRequestError("'crawlid' and 'appid' must not contain control characters")
    priority = request.get("priority", 1)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidRequestError(f"'priority' must be an integer, got {priority!r}")
    if abs(priority) > PRIORITY_LIMIT:
        raise InvalidRequestError(f"'priority' must be within +-{PRIORITY_LIMIT}, got {priority}")
    curdepth = request.get("curdepth", 0)
    if isinstance(curdepth, bool) or not isinstance(curdepth, int) or curdepth < 0:
        raise InvalidRequestError(f"'curdepth' must be a non-negative integer, got {curdepth!r}")


def encode_item(request: dict[str, Any]) -> bytes:
    """Compact JSON of ``request`` without the fields its key implies."""
    compact: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, value in request.items():
        if value is None or name in IMPLIED or DEFAULTS.get(name, ...) == value:
            continue
        short = SHORT_NAMES.get(name)
        if short is None:
            extra[name] = value
        else:
            compact[short] = value
    if extra:
        compact[EXTRA] = extra
    try:
        return orjson.dumps(compact)
    except TypeError as exc:
        raise InvalidRequestError(f"request is not JSON-serialisable: {exc}") from exc


def decode_item(data: bytes, *, spiderid: str, crawlid: str, priority: int) -> dict[str, Any]:
    """The request ``encode_item`` stored, with implied fields and defaults restored."""
    compact = orjson.loads(data)
    request: dict[str, Any] = {**DEFAULTS, "spiderid": spiderid, "crawlid": crawlid,
                               "priority": priority}
    for short, value in compact.items():
        if short == EXTRA:
            request.update(value)
        else:
            request[LONG_NAMES[short]] = value
    return request


def fingerprint(request: dict[str, Any]) -> bytes:
    """16-byte BLAKE2b of (method, canonical URL, body): equal for equivalent requests."""
    method = str(request.get("method") or "GET").upper().encode()
    url = canonicalize_url(request["url"]).encode()
    body = request.get("body_b64") or request.get("body") or ""
    digest = hashlib.blake2b(digest_size=FINGERPRINT_BYTES)
    for part in (method, url, body.encode() if isinstance(body, str) else bytes(body)):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.digest()


def dupe_slot(digest: bytes) -> tuple[bytes, bytes]:
    """(bucket field, 8-byte record) under which ``digest`` is stored in a dupefilter hash."""
    bucket = int.from_bytes(digest[:2], "big") >> (16 - DUPE_BUCKET_BITS)
    return f"{bucket:03x}".encode(), digest[DUPE_RECORD]
