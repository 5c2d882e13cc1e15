"""Every field the original wrote into a queue member, and what becomes of it. Pure: no I/O.

The two writers of ``<spiderid>:<domain>:queue`` members (docs/migration.md, "Fields of the
original requests"):

* **The Kafka Monitor** wrote the crawl request flat: the fields the application sent, the
  crawl schema's defaults for the others (``null`` for the optional ones without a value) and
  ``ts``, the ``time.time()`` its plugin-stats hook stamped on every request it handled, with
  stats enabled or not. Its schema allowed no other field.
* **The crawlers** wrote Scrapy 1.x's ``request_to_dict``: ``url``, ``method``, ``headers``,
  ``body``, ``cookies``, ``callback``, ``errback``, ``dont_filter``, ``priority`` (Scrapy's
  ``Request.priority``), ``_encoding`` and, from Scrapy 1.5, ``flags``; ``meta`` holds the crawl
  fields, ``curdepth``, ``retry_times``, what the meta passthrough copied from the page that
  linked the request (the seed's ``ts``, and on 1.2 its ``url``) and Scrapy's runtime keys
  (``download_timeout``, ``download_slot``, ``download_latency``, a redirect's
  ``redirect_times``/``redirect_ttl``/``redirect_urls``).

Each field is **kept** (same name and value, or a value our default implies), **mapped**
(carried over in another form) or **dropped**; mapped and dropped fields are named in
``Converted`` so the run can count them. Only a member that cannot be a request is refused
(``FieldError``): the original wrote no such member.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

API_FIELDS = ("url", "appid", "crawlid", "spiderid", "maxdepth", "allowed_domains",
              "allow_regex", "deny_regex", "deny_extensions", "expires", "useragent", "cookie",
              "attrs", "domain_max_pages")
"""Crawl-API fields (our crawl schema's properties, ``priority`` aside: links and retries of the
original legitimately sit below the API's minimum)."""
REQUEST_FIELDS = ("method", "headers", "body", "cookies", "callback", "errback", "dont_filter")
"""Scrapy request fields of the crawlers' shape, kept as our request fields of the same name."""
IMPLIED_VALUES: dict[str, tuple[Any, ...]] = {
    "method": ("GET",), "headers": ({},), "body": ("",), "cookies": ({}, []),
    "callback": ("parse",), "dont_filter": (False,),
}
"""Request field values our request leaves out because they are its default."""
DEPTH_FIELDS = ("curdepth", "retry_times")
STAMP = "ts"
"""The Kafka Monitor's stats timestamp: no meaning for a crawl."""
SCRAPY_RUNTIME_META = frozenset({
    "depth", "download_latency", "download_slot", "download_timeout", "redirect_ttl",
    "redirect_urls", "redirect_reasons", "is_start_request", "handle_httpstatus_all",
})
"""Meta keys Scrapy sets on a request while fetching it; they describe that fetch only."""
PASSED_THROUGH_META = frozenset({STAMP, "url"})
"""Meta keys the passthrough copied from the seed: its stats stamp and, on 1.2, its URL."""
PRIORITY_FROM_SCORE = "→ queue score"
NULL_TO_UNSET = "null values → unset"
REDIRECT_TIMES = "redirect_times"


class FieldError(ValueError):
    """A member that cannot become one of our requests (the message says why)."""


@dataclass
class Converted:
    """Our request, its crawl-API view (what our crawl schema validates) and the labels of the
    original's fields that were mapped or dropped on the way (one label per field)."""

    request: dict[str, Any] = field(default_factory=dict)
    api_view: dict[str, Any] = field(default_factory=dict)
    mapped: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def put(self, name: str, value: Any, *, api: bool) -> None:
        """Keep ``name``; a ``null`` is our "unset" (counted as mapped)."""
        if value is None:
            self.mapped.append(NULL_TO_UNSET)
            return
        self.request[name] = value
        if api:
            self.api_view[name] = value


def convert(data: Mapping[str, Any]) -> Converted:
    """Our request (without its priority, which the queue score gives) for one decoded member."""
    meta = data.get("meta")
    if meta is None and "meta" not in data:
        return _from_flat(data)
    if not isinstance(meta, Mapping):
        raise FieldError("'meta' must be an object")
    return _from_scrapy_dict(data, meta)


def _from_flat(data: Mapping[str, Any]) -> Converted:
    converted = Converted()
    for name, value in data.items():
        if name == STAMP:
            converted.dropped.append(name)
        elif name == "priority":
            converted.mapped.append(f"priority {PRIORITY_FROM_SCORE}")
        elif name in DEPTH_FIELDS:
            converted.put(name, _count(name, value), api=False)
        elif name in API_FIELDS:
            converted.put(name, value, api=True)
        else:  # not the original's: our crawl schema refuses it, with its reason
            converted.request[name] = converted.api_view[name] = value
    return converted


def _from_scrapy_dict(data: Mapping[str, Any], meta: Mapping[str, Any]) -> Converted:
    converted = Converted()
    user_meta = _from_scrapy_meta(meta, converted)
    for name, value in data.items():
        if name == "url":
            converted.put(name, value, api=True)
        elif name in REQUEST_FIELDS:
            _check_request_field(name, value)
            if value is not None and value not in IMPLIED_VALUES.get(name, ()):
                converted.request[name] = value
            elif value is None:
                converted.mapped.append(NULL_TO_UNSET)
        elif name != "meta":  # Scrapy's Request.priority (the score, -meta.priority, ordered
            # the original), _encoding (our URLs are text), flags (logging), _class
            converted.dropped.append(name)
    if user_meta:
        converted.request["meta"] = user_meta
    return converted


def _from_scrapy_meta(meta: Mapping[str, Any], converted: Converted) -> dict[str, Any]:
    """Puts the crawl-API fields of a Scrapy request's ``meta`` into ``converted``; returns the
    user's own meta keys (Scrapy's runtime keys and private ones are dropped)."""
    user_meta: dict[str, Any] = {}
    for name, value in meta.items():
        key = str(name)
        if key in API_FIELDS and key != "url":
            converted.put(key, value, api=True)
        elif key in DEPTH_FIELDS:
            converted.put(key, _count(key, value), api=False)
        elif key == "priority":
            converted.mapped.append(f"meta.priority {PRIORITY_FROM_SCORE}")
        elif key == REDIRECT_TIMES:
            converted.mapped.append(f"meta.{key} → {key}")
            converted.put(key, _count(key, value), api=False)
        elif key in SCRAPY_RUNTIME_META or key in PASSED_THROUGH_META or key.startswith("_"):
            converted.dropped.append(f"meta.{key}")
        else:
            user_meta[key] = value
    return user_meta


_REQUEST_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "method": (str,), "headers": (dict,), "body": (str,), "cookies": (dict, list),
    "callback": (str, type(None)), "errback": (str, type(None)), "dont_filter": (bool,),
}
_TYPE_NAMES = {str: "a string", dict: "an object", list: "a list", bool: "a boolean",
               type(None): "null"}


def _count(name: str, value: Any) -> Any:
    """``value`` when it is a non-negative integer (or null), else ``FieldError``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise FieldError(f"'{name}' must be a non-negative integer, got {value!r}")
    return value


def _check_request_field(name: str, value: Any) -> None:
    allowed = _REQUEST_FIELD_TYPES[name]
    if not isinstance(value, allowed):
        expected = " or ".join(_TYPE_NAMES[kind] for kind in allowed)
        raise FieldError(f"'{name}' must be {expected}, got {type(value).__name__}")
    if isinstance(value, dict) and name == "headers":
        for header, values in value.items():
            if not isinstance(values, str | list) or \
                    not all(isinstance(item, str) for item in _as_list(values)):
                raise FieldError(f"header {header!r} must be a string or a list of strings")


def _as_list(values: str | list[Any]) -> list[Any]:
    return [values] if isinstance(values, str) else values
