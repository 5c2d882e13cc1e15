"""Crawl requests to compact queue items and back; fingerprints; registered domains.

A queued item is ``<seq>:<enqueue ms in base 36> <json>``; the JSON has short keys. ``spiderid``, ``crawlid`` and
``priority`` are not stored in it (the sub-queue key holds them), values equal
to their default are omitted, and ``None`` values are dropped. Decoding
restores the defaults, so a decoded request always has ``url``, ``appid``,
``crawlid``, ``spiderid``, ``priority``, ``curdepth``, ``maxdepth``,
``expires``, ``method``, ``dont_filter`` and ``retry_times``.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Any

import orjson
import tldextract

from scrapy_cluster.errors import InvalidRequestError
from scrapy_cluster.frontier.urls import ORIGIN_ENDS, canonical_url, plain_origin_host, url_host

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
    "depth_upgrade": "du", "recrawl": "rc",
}
LONG_NAMES = {short: long for long, short in SHORT_NAMES.items()}
EXTRA = "x"
"""Fields outside the crawl API and Scrapy's request fields travel under this key."""
_OMIT = object()
_ENCODING_PLAN: dict[str, tuple[str, Any]] = {
    **{name: (short, DEFAULTS.get(name, ...)) for name, short in SHORT_NAMES.items()},
    **{name: ("", _OMIT) for name in IMPLIED},
}
"""Per known field: (short name, default), or ("", _OMIT) for fields the key implies."""
_BAD_SPIDERID = re.compile("[\x00-\x06:\n]")
_BAD_ID = re.compile("[\x00-\x06]")
HOST_CACHE_SIZE = 100_000
"""Distinct hostnames whose registered domain ``DomainExtractor`` remembers."""

FINGERPRINT_BYTES = 16
DUPE_BUCKET_BITS = 12
DUPE_FINGERPRINT = slice(2, 9)
"""Fingerprint bytes kept in a dupefilter record (7 bytes + the 12 bucket bits: 68 bits); the
record's eighth byte holds the smallest depth at which the crawl saw the URL."""
MAX_DEPTH_RECORDED = 254
"""Depths above this are recorded as this (a record's depth is one byte)."""


class DomainExtractor:
    """Registered domain of a URL from tldextract's bundled public-suffix snapshot (no network).

    Remembers the origin of the last plain URL and its domain: the links of a page mostly
    share their origin, and a URL starting with it is answered by one ``startswith``."""

    def __init__(self, cache_size: int = HOST_CACHE_SIZE) -> None:
        self._extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
        self.domain_of_host = lru_cache(maxsize=cache_size)(self._domain_of_host)
        self._last = ("", "")
        """(origin, domain), replaced as one tuple so that threads never mix two."""

    def __call__(self, url: str) -> str:
        """``http://news.bbc.co.uk/x`` -> ``bbc.co.uk``; IPs and bare hosts are their own domain."""
        origin, domain = self._last
        if origin and url.startswith(origin) and url[len(origin):len(origin) + 1] in ORIGIN_ENDS:
            return domain
        plain = plain_origin_host(url)
        if plain is None:
            host = url_host(url)
            if not host:
                raise InvalidRequestError(f"url has no host: {url!r}")
            return self.domain_of_host(host)
        domain = self.domain_of_host(plain[1])
        self._last = (plain[0], domain)
        return domain

    def _domain_of_host(self, host: str) -> str:
        parts = self._extract.extract_str(host)
        return parts.top_domain_under_public_suffix or host


VALID_IDS_MEMO = 1024
"""Distinct (spiderid, crawlid, appid) triples ``validate`` remembers as checked."""
_valid_ids: set[tuple[str, str, str]] = set()


def validate(request: Any) -> None:
    """Raise ``InvalidRequestError`` saying what is wrong with ``request``.

    The links of a page share their crawl's identity: once a (spiderid, crawlid, appid)
    passed, a request carrying it, a non-empty str url, and an int priority and depth in
    range is valid without the regex checks (about 3x faster)."""
    if type(request) is dict:
        url, priority, curdepth = request.get("url"), request.get("priority", 1), \
            request.get("curdepth", 0)
        ids = (request.get("spiderid"), request.get("crawlid"), request.get("appid"))
        if (type(url) is str and url and type(priority) is int and type(curdepth) is int
                and -PRIORITY_LIMIT <= priority <= PRIORITY_LIMIT and curdepth >= 0
                and type(ids[0]) is str and type(ids[1]) is str and type(ids[2]) is str
                and ids in _valid_ids):
            return
    _validate(request)
    if len(_valid_ids) >= VALID_IDS_MEMO:
        _valid_ids.clear()
    _valid_ids.add((request["spiderid"], request["crawlid"], request["appid"]))


def _validate(request: Any) -> None:
    if not isinstance(request, dict):
        raise InvalidRequestError(f"a crawl request must be a JSON object, got {type(request).__name__}")
    for name in REQUIRED:
        value = request.get(name)
        if not isinstance(value, str) or not value:
            raise InvalidRequestError(f"'{name}' must be a non-empty string")
    if _BAD_SPIDERID.search(request["spiderid"]):
        raise InvalidRequestError("'spiderid' must not contain ':' or control characters")
    if _BAD_ID.search(request["crawlid"]) or _BAD_ID.search(request["appid"]):
        raise InvalidRequestError("'crawlid' and 'appid' must not contain control characters")
    priority = request.get("priority", 1)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidRequestError(f"'priority' must be an integer, got {priority!r}")
    if abs(priority) > PRIORITY_LIMIT:
        raise InvalidRequestError(f"'priority' must be within +-{PRIORITY_LIMIT}, got {priority}")
    curdepth = request.get("curdepth", 0)
    if isinstance(curdepth, bool) or not isinstance(curdepth, int) or curdepth < 0:
        raise InvalidRequestError(f"'curdepth' must be a non-negative integer, got {curdepth!r}")


ITEM_HEAD = b'{"u":'
"""How every encoded item starts: the url comes first."""


def encode_item(request: dict[str, Any]) -> bytes:
    """Compact JSON of ``request`` without the fields its key implies; the url comes first
    (``{"u":"...",``), where the enqueue script reads it to find a queued copy.

    So the item of a request is ``ITEM_HEAD + orjson.dumps(url) + tail``, the tail a function
    of its other fields alone: ``item_tail`` cuts it, ``item_with_tail`` splices a url in."""
    compact: dict[str, Any] = {"u": request["url"]}
    extra: dict[str, Any] = {}
    plan = _ENCODING_PLAN
    for name, value in request.items():
        if value is None:
            continue
        known = plan.get(name)
        if known is None:
            extra[name] = value
        elif known[1] is not _OMIT and known[1] != value:
            compact[known[0]] = value
    if extra:
        compact[EXTRA] = extra
    try:
        return orjson.dumps(compact)
    except TypeError as exc:
        raise InvalidRequestError(f"request is not JSON-serialisable: {exc}") from exc


def item_tail(item: bytes, url: str) -> bytes:
    """What follows the url in ``item``, the ``encode_item`` of a request whose url is the
    ``str`` ``url``: ``b"}"`` or ``b',"a":...}'``."""
    return item[len(ITEM_HEAD) + len(orjson.dumps(url)):]


def item_with_tail(url: str, tail: bytes) -> bytes:
    """``encode_item`` of a request with the ``str`` ``url`` whose other fields gave ``tail``
    (``item_tail``): about 5x cheaper than encoding it whole. Raises ``orjson.JSONEncodeError``
    for a url orjson refuses (a lone surrogate), where ``encode_item`` raises
    ``InvalidRequestError``."""
    return b"".join((ITEM_HEAD, orjson.dumps(url), tail))


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


def item_enqueued_ms(head: bytes) -> int | None:
    """The enqueue time (epoch ms, frontier clock) in a queued item's head ``<seq>:<base 36
    ms>`` (``<seq>:<base 36 due ms>:<state>`` for a re-crawl: its due time); None for an item
    queued before items carried it (head ``<seq>``)."""
    _, colon, stamp = head.partition(b":")
    if b":" in stamp:
        stamp = stamp.partition(b":")[0]
    return int(stamp, 36) if colon and stamp else None


def item_revisit(head: bytes) -> str | None:
    """The re-crawl state a queued item's head ``<seq>:<ms>:<state>`` carries (the crawler's
    ``Revisit.state`` from the URL's previous fetch); None for a first fetch."""
    if head.count(b":") < 2:
        return None
    return head.split(b":", 2)[2].decode("ascii", "replace") or None


def is_plain_get(request: dict[str, Any]) -> bool:
    """True for a GET without a body, as links are: its fingerprint is
    ``plain_get_fingerprint(url)``, a function of the url alone."""
    method = request.get("method")
    return (method is None or method == "GET") and not request.get("body_b64") \
        and not request.get("body")


def plain_get_fingerprint(url: str) -> bytes:
    """``fingerprint`` of a plain GET of ``url`` (``is_plain_get``): one join, one hash."""
    canonical = canonical_url(url).encode()
    return _blake2b(b"".join((_GET_HEAD, len(canonical).to_bytes(8, "big"), canonical, _NO_BODY)),
                    digest_size=FINGERPRINT_BYTES).digest()


def fingerprint(request: dict[str, Any]) -> bytes:
    """16-byte BLAKE2b of (method, canonical URL, body): equal for equivalent requests."""
    method = request.get("method")
    if (method is None or method == "GET") and not request.get("body_b64") \
            and not request.get("body"):  # is_plain_get, inlined: links are plain GETs
        return plain_get_fingerprint(request["url"])
    method = method or "GET"
    head = _GET_HEAD if method == "GET" else _length_prefixed(str(method).upper().encode())
    url = canonical_url(request["url"]).encode()
    body = request.get("body_b64") or request.get("body") or b""
    body_bytes = body.encode() if isinstance(body, str) else bytes(body)
    data = b"".join((head, len(url).to_bytes(8, "big"), url,
                     len(body_bytes).to_bytes(8, "big"), body_bytes))
    return hashlib.blake2b(data, digest_size=FINGERPRINT_BYTES).digest()


def _length_prefixed(part: bytes) -> bytes:
    return len(part).to_bytes(8, "big") + part


_GET_HEAD = _length_prefixed(b"GET")
_NO_BODY = _length_prefixed(b"")
_blake2b = hashlib.blake2b
_BUCKET_FIELDS = tuple(f"{bucket:03x}".encode() for bucket in range(1 << DUPE_BUCKET_BITS))


def dupe_slot(digest: bytes) -> tuple[bytes, bytes]:
    """(bucket field, 7-byte fingerprint) under which ``digest`` is stored in a dupefilter hash;
    the enqueue script appends the depth byte to make the 8-byte record."""
    bucket = ((digest[0] << 8) | digest[1]) >> (16 - DUPE_BUCKET_BITS)
    return _BUCKET_FIELDS[bucket], digest[DUPE_FINGERPRINT]

