"""The original system's Redis values, read and turned into ours. Pure: no I/O.

What Scrapy Cluster 1.2/1.3 wrote (docs/migration.md has the whole table):

* ``<spiderid>:<domain>:queue`` — ZSET of JSON requests scored ``-priority``; the lowest score
  pops first and equal scores pop in member (byte) order. Two shapes: the Kafka Monitor wrote the
  API request itself (``url``, ``appid``, ``crawlid``, ``maxdepth`` ... at the top level); the
  crawlers wrote Scrapy's request dict (``url``, ``method``, ``headers``, ``body``, ``cookies``,
  ``meta`` holding the crawl fields and ``curdepth``, ``dont_filter``, ``callback`` ...).
  What becomes of each of their fields is in ``fields.py``.
* ``<spiderid>:dupefilter:<crawlid>`` — SET of 40-hex SHA1 request fingerprints (Scrapy 1.x
  ``request_fingerprint``: method, canonical URL, body). One-way: see ``legacy_fingerprint``.
* ``<spiderid>:blacklist`` — SET of ``<appid>||<crawlid>``.
* ``timeout:<spiderid>:<appid>:<crawlid>`` — STRING, expiry in epoch seconds.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from w3lib.url import canonicalize_url

from scrapy_cluster.migration.fields import FieldError, convert
from scrapy_cluster.text import as_text

BLACKLIST_SEPARATOR = "||"
QUEUE_SUFFIX = ":queue"
DUPEFILTER_PART = ":dupefilter:"
BLACKLIST_SUFFIX = ":blacklist"


LegacyItemError = FieldError
"""An original queue member that cannot become one of our requests (the message says why)."""


@dataclass(frozen=True)
class LegacyRequest:
    """One original queue member: our request dict, its crawl-API view (what our crawl schema
    validates), the original's fingerprint of it (40 hex) and the labels of its fields that
    were mapped or dropped (``fields.py``)."""

    request: dict[str, Any]
    api_view: dict[str, Any]
    fingerprint: str
    mapped: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


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

    ``LegacyItemError`` when it is not a JSON object with a url, appid and crawlid of the right
    types (see ``fields.convert`` for what becomes of each field)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise LegacyItemError(f"not JSON ({exc}); a 1.1 pickle queue must first be upgraded "
                              "with the original migrate.py") from exc
    if not isinstance(data, dict):
        raise LegacyItemError("not a JSON object")
    converted = convert(data)
    for name in ("url", "appid", "crawlid"):
        value = converted.request.get(name)
        if not isinstance(value, str) or not value:
            raise LegacyItemError(f"'{name}' missing or not a string")
    converted.request.setdefault("spiderid", key_spiderid)
    converted.api_view.setdefault("spiderid", converted.request["spiderid"])
    request = {**converted.request, "priority": -int(score)}
    fingerprint = legacy_fingerprint(request["url"], str(request.get("method") or "GET"),
                                     _body_bytes(request.get("body")))
    return LegacyRequest(request, converted.api_view, fingerprint, tuple(converted.mapped),
                         tuple(converted.dropped))


def blacklisted_crawlid(member: bytes | str) -> str:
    """The crawlid of an original blacklist member ``<appid>||<crawlid>`` (ours: the crawlid)."""
    text = as_text(member)
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


def timeout_expiry(raw: bytes | str | None) -> int | None:
    """Expiry in epoch seconds of a timeout key's value; None when it is not a number."""
    try:
        return int(float(raw or b""))
    except ValueError:
        return None
