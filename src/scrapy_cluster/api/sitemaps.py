"""The ``sitemaps`` and ``sitemap_any_host`` fields of a crawl request (docs/api.md,
"Sitemaps"): the checks JSON Schema cannot say, the validation of a ``sitemaps`` value that
does not arrive in a request (the operators' per-domain default), and the discovery requests
a crawl request with sitemaps adds to its seed.

``sitemaps`` is ``"off"`` (also when omitted), ``"robots"``, ``"paths"`` or an array of 1 to 100
absolute http(s) sitemap URLs; the schema (``schemas/scraper_schema.json``) says so.
``problem`` adds that every listed URL has a host and a valid port.

**Discovery requests.** The Kafka Monitor queues, next to the seed and in the same enqueue,
one request per place to look (``discovery_requests``): a copy of the seed (same crawl,
priority, depth, attrs, re-crawl ...) with another ``url`` and the field ``sitemap``
(``REQUEST_FIELD``) saying how the crawler reads its response:

- ``{"kind": "robots"}`` for ``<scheme>://<host>[:<port>]/robots.txt`` of the seed (modes
  ``robots`` and ``paths``): its ``Sitemap:`` lines are the sitemaps;
- ``{"kind": "sitemap", "depth": 0}`` for each of ``WELL_KNOWN_PATHS`` on the seed's origin (mode
  ``paths``) and for each listed URL (array mode); a listed sitemap is read with the usual host
  rules, judged from its own location;
- ``"any_host": true`` is added to each when ``sitemap_any_host`` is true.

Neither ``sitemaps`` nor ``sitemap_any_host`` is queued (``QUEUED_WITHOUT``): the seed and its
discovery requests carry what the crawler needs, and no page found later inherits them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import fastjsonschema
import orjson

from scrapy_cluster.api import SCHEMA_DIR

FIELD = "sitemaps"
"""The crawl request's field: a mode or the sitemap URLs."""
ANY_HOST_FIELD = "sitemap_any_host"
"""The crawl request's field relaxing the host rules for the crawl's sitemaps."""
REQUEST_FIELD = "sitemap"
"""The field of a queued discovery request: how the crawler reads its response."""
OFF, ROBOTS, PATHS = "off", "robots", "paths"
MODES = (OFF, ROBOTS, PATHS)
WELL_KNOWN_PATHS = ("/sitemap.xml", "/sitemap_index.xml", "/sitemap.xml.gz",
                    "/sitemap_index.xml.gz")
"""Where mode ``paths`` looks besides robots.txt, on the seed's origin."""
ROBOTS_PATH = "/robots.txt"
QUEUED_WITHOUT = (FIELD, ANY_HOST_FIELD)
"""Request fields read by the Kafka Monitor and not queued."""
URL_DESCRIPTION = "an absolute http(s) URL"


def problem(message: Mapping[str, Any], *, field: str = FIELD) -> str | None:
    """What is wrong with a schema-valid request's ``sitemaps``, or None: a listed URL without
    a host or with a bad port. No I/O."""
    return value_problem(message.get(field), field=field)


def value_problem(value: Any, *, field: str = FIELD) -> str | None:
    """``problem`` for the field's value alone."""
    if not isinstance(value, list):
        return None
    for index, url in enumerate(value):
        if not _has_origin(str(url)):
            return f"{field}[{index}] must be {URL_DESCRIPTION}"
    return None


def validated(value: Any, *, field: str = FIELD) -> str | list[str]:
    """``value`` checked against the schema's ``sitemaps`` and ``value_problem`` (a new list
    for an array). Raises ``ValueError`` naming the field:
    ``sitemaps must be one of ['off', 'robots', 'paths']``."""
    try:
        _compiled()(value)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise ValueError(_reason(exc, field)) from exc
    reason = value_problem(value, field=field)
    if reason:
        raise ValueError(reason)
    return list(value) if isinstance(value, list) else str(value)


def discovery_requests(seed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The discovery requests of a crawl request (see module docstring), none when its
    ``sitemaps`` is off or absent. ``seed`` is not modified; each request is a deep copy of it
    without ``QUEUED_WITHOUT``."""
    mode = seed.get(FIELD, OFF)
    if mode == OFF:
        return []
    places: list[tuple[str, dict[str, Any]]]
    if isinstance(mode, list):
        places = [(str(url), {"kind": "sitemap", "depth": 0}) for url in mode]
    else:
        origin = origin_of(str(seed["url"]))
        places = [(origin + ROBOTS_PATH, {"kind": "robots"})]
        if mode == PATHS:
            places += [(origin + path, {"kind": "sitemap", "depth": 0})
                       for path in WELL_KNOWN_PATHS]
    if seed.get(ANY_HOST_FIELD) is True:
        for _, spec in places:
            spec["any_host"] = True
    base = queued_form(seed)
    return [{**copy.deepcopy(base), "url": url, REQUEST_FIELD: spec} for url, spec in places]


def queued_form(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` without the fields the Kafka Monitor reads and does not queue (a copy)."""
    return {key: value for key, value in request.items() if key not in QUEUED_WITHOUT}


def origin_of(url: str) -> str:
    """``<scheme>://<host>[:<port>]`` of ``url`` as written, lower-cased, without credentials:
    ``HTTPS://u@Shop.Example.com:8443/a`` gives ``https://shop.example.com:8443``."""
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.rpartition('@')[2].lower()}"


def _has_origin(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def _reason(error: fastjsonschema.JsonSchemaValueException, field: str) -> str:
    where = field + (error.name or "data")[len("data"):]
    if error.rule in ("pattern", "minLength"):  # a listed URL (the request's check says the same)
        return f"{where} must be {URL_DESCRIPTION}"
    text = error.message
    return where + text[len(error.name or "data"):] if text.startswith("data") else \
        f"{field}: {text}"


@lru_cache(maxsize=1)
def _compiled() -> Callable[[Any], Any]:
    schema = orjson.loads((SCHEMA_DIR / "scraper_schema.json").read_bytes())
    definition = dict(schema["properties"][FIELD])
    definition["$schema"] = schema["$schema"]
    validate: Callable[[Any], Any] = fastjsonschema.compile(definition)
    return validate
