"""The operators' domain configuration: one YAML document for the whole cluster.

::

    blacklist:
      - spam.example
    domains:
      example.com:
        window: 60        # seconds, > 0
        hits: 30          # integer >= 0 (0 pauses the domain)
        scale: 0.5        # optional, from 0 to 1; floor(hits * scale) = 0 pauses it
        moderated: false  # optional (our extension): bursts or even spacing, else QUEUE_MODERATED
      news.example:
        recrawl:          # optional: the re-crawl schedule of crawls seeded on this domain
          interval: 3600  #   (the crawl request's ``recrawl`` object, docs/api.md)
        sitemaps: paths   # optional: the crawl request's ``sitemaps`` (off, robots, paths,
                          #   or a list of sitemap URLs)

A domain entry carries a throttle (``window`` and ``hits``), request defaults (``recrawl``,
``sitemaps``), or both. A default is given to a crawl request whose seed URL is on the domain
and which has no such field of its own, when the Kafka Monitor accepts it; a later change of the
default does not change crawls already submitted. Each is validated as the request's field is,
except that a ``recrawl`` whose ``until`` already passed is kept (the document stays readable;
such a default is no longer given), and that ``sitemaps: off`` (which YAML reads as false) is
``"off"``.

Domains are matched as the frontier keys its queues: by **registered domain** (tldextract, the
bundled public-suffix list). ``www.example.com``, ``http://example.com:8080/`` and
``shop.example.com`` all name ``example.com``; two entries that name the same domain are an
error. IP addresses and single-label hosts are their own domain.

A document is a value: it always replaces the whole configuration (a domain no longer listed
returns to the default throttle and has no re-crawl default; one no longer blacklisted is
crawled again).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson
import yaml

from scrapy_cluster.api import recrawl as recrawl_api
from scrapy_cluster.api import sitemaps as sitemaps_api
from scrapy_cluster.errors import DomainConfigError
from scrapy_cluster.frontier.codec import DomainExtractor
from scrapy_cluster.frontier.config import DomainThrottle

TOP_LEVEL_KEYS = frozenset({"blacklist", "domains"})
DOMAIN_KEYS = frozenset({"window", "hits", "scale", "moderated"})
RECRAWL_KEY = "recrawl"
SITEMAPS_KEY = "sitemaps"
DEFAULT_KEYS = (RECRAWL_KEY, SITEMAPS_KEY)
"""A domain entry's crawl-request defaults (fields of the crawl request of the same name)."""
ENTRY_FIELDS = "window, hits, scale, moderated, recrawl, sitemaps"
Normalize = Callable[[str], str]


def frontier_domain(extractor: DomainExtractor | None = None) -> Normalize:
    """A function naming a configured domain as the frontier keys it (see module docstring)."""
    extract = extractor or DomainExtractor()

    def normalize(name: str) -> str:
        text = name.strip().lower()
        host = urlsplit(text if "://" in text else f"//{text}").hostname or ""
        host = host.rstrip(".")
        if not host:
            raise DomainConfigError(f"domain {name!r}: not a host name")
        return extract.domain_of_host(host)

    return normalize


@dataclass(frozen=True)
class DomainDocument:
    """Throttle overrides by domain, the blacklisted domains, the re-crawl defaults by domain
    (``recrawl`` objects, defaults filled in) and the sitemaps defaults by domain (a mode or a
    list of URLs), all by normalized domain."""

    throttles: Mapping[str, DomainThrottle] = field(default_factory=dict)
    blacklist: frozenset[str] = frozenset()
    recrawls: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sitemaps: Mapping[str, str | list[str]] = field(default_factory=dict)

    @classmethod
    def from_yaml(cls, text: str, normalize: Normalize) -> DomainDocument:
        """Parse and validate; ``DomainConfigError`` names what is wrong."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise DomainConfigError(f"not valid YAML: {exc}") from exc
        return cls.from_data(data, normalize)

    @classmethod
    def from_data(cls, data: Any, normalize: Normalize) -> DomainDocument:
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise DomainConfigError("the document must be a mapping with 'domains' and/or "
                                    "'blacklist'")
        unknown = sorted(str(key) for key in data if key not in TOP_LEVEL_KEYS)
        if unknown:
            raise DomainConfigError(f"unknown top-level key(s): {', '.join(unknown)} "
                                    "(allowed: blacklist, domains)")
        throttles, defaults = _domains(data.get("domains"), normalize)
        return cls(throttles=throttles, blacklist=_blacklist(data.get("blacklist"), normalize),
                   recrawls=defaults[RECRAWL_KEY], sitemaps=defaults[SITEMAPS_KEY])

    def defaults(self, key: str) -> Mapping[str, Any]:
        """The defaults by domain of one crawl-request field (one of ``DEFAULT_KEYS``)."""
        return {RECRAWL_KEY: self.recrawls, SITEMAPS_KEY: self.sitemaps}[key]

    def to_data(self) -> dict[str, Any]:
        """Plain data for YAML or JSON, domains sorted."""
        domains = {}
        for name in sorted(set(self.throttles) | set(self.recrawls) | set(self.sitemaps)):
            entry: dict[str, Any] = {}
            throttle = self.throttles.get(name)
            if throttle is not None:
                entry.update({"window": throttle.window_s, "hits": throttle.hits})
                if throttle.scale != 1.0:
                    entry["scale"] = throttle.scale
                if throttle.moderated is not None:
                    entry["moderated"] = throttle.moderated
            for key in DEFAULT_KEYS:
                if name in self.defaults(key):
                    entry[key] = _plain(self.defaults(key)[name])
            domains[name] = entry
        return {"blacklist": sorted(self.blacklist), "domains": domains}

    def to_yaml(self) -> str:
        text: str = yaml.safe_dump(self.to_data(), sort_keys=False, default_flow_style=False)
        return text

    def with_throttle(self, domain: str, throttle: DomainThrottle) -> DomainDocument:
        return dataclasses.replace(self, throttles={**self.throttles, domain: throttle})

    def without_throttle(self, domain: str) -> DomainDocument:
        """The domain's throttle removed (its request defaults, if any, stay)."""
        return dataclasses.replace(self, throttles={k: v for k, v in self.throttles.items()
                                                    if k != domain})

    def with_blacklisted(self, domain: str) -> DomainDocument:
        return dataclasses.replace(self, blacklist=self.blacklist | {domain})

    def without_blacklisted(self, domain: str) -> DomainDocument:
        return dataclasses.replace(self, blacklist=self.blacklist - {domain})

    def with_recrawl(self, domain: str, recrawl: Any) -> DomainDocument:
        """The domain's re-crawl default set (validated; ``DomainConfigError`` if wrong)."""
        return dataclasses.replace(self, recrawls={**self.recrawls,
                                                   domain: domain_recrawl(domain, recrawl)})

    def without_recrawl(self, domain: str) -> DomainDocument:
        return dataclasses.replace(self, recrawls={k: v for k, v in self.recrawls.items()
                                                   if k != domain})

    def diff(self, newer: DomainDocument) -> list[str]:
        """What changes from this document to ``newer``, one line per change, sorted."""
        lines = [f"+ blacklist {name}" for name in sorted(newer.blacklist - self.blacklist)]
        lines += [f"- blacklist {name}" for name in sorted(self.blacklist - newer.blacklist)]
        for name in sorted(set(self.throttles) | set(newer.throttles)):
            old, new = self.throttles.get(name), newer.throttles.get(name)
            if old == new:
                continue
            if old is None:
                lines.append(f"+ domain {name}: {_describe(new)}")
            elif new is None:
                lines.append(f"- domain {name}: {_describe(old)} (back to the default)")
            else:
                lines.append(f"~ domain {name}: {_describe(old)} -> {_describe(new)}")
        for key in DEFAULT_KEYS:
            lines += self._defaults_diff(key, newer)
        return lines

    def _defaults_diff(self, key: str, newer: DomainDocument) -> list[str]:
        """``+ recrawl a.com: {...}``, ``~ sitemaps a.com: "robots" -> "paths"``, ..."""
        ours, theirs = self.defaults(key), newer.defaults(key)
        lines = []
        for name in sorted(set(ours) | set(theirs)):
            old, new = ours.get(name), theirs.get(name)
            if old == new:
                continue
            if old is None:
                lines.append(f"+ {key} {name}: {_describe_default(new)}")
            elif new is None:
                lines.append(f"- {key} {name}: {_describe_default(old)}")
            else:
                lines.append(f"~ {key} {name}: {_describe_default(old)} -> "
                             f"{_describe_default(new)}")
        return lines


def _describe_default(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _plain(value: Any) -> Any:
    """Plain dicts for YAML (``safe_dump`` refuses other mappings)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _describe(throttle: DomainThrottle | None) -> str:
    if throttle is None:
        return "default"
    text = f"{throttle.hits} per {throttle.window_s:g}s"
    if throttle.scale != 1.0:
        text += f" x {throttle.scale:g} = {throttle.limit}"
    if throttle.moderated is not None:
        text += ", moderated" if throttle.moderated else ", bursts"
    return text


def _blacklist(raw: Any, normalize: Normalize) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
        raise DomainConfigError("blacklist: must be a list of domain names")
    return frozenset(normalize(name) for name in raw)


def _domains(raw: Any, normalize: Normalize) -> tuple[dict[str, DomainThrottle],
                                                      dict[str, dict[str, Any]]]:
    """The ``domains`` section: throttles by normalized domain, and the defaults of each of
    ``DEFAULT_KEYS`` by normalized domain."""
    defaults: dict[str, dict[str, Any]] = {key: {} for key in DEFAULT_KEYS}
    if raw is None:
        return {}, defaults
    if not isinstance(raw, Mapping):
        raise DomainConfigError(f"domains: must be a mapping of domain name to "
                                f"{{{ENTRY_FIELDS}}}")
    throttles: dict[str, DomainThrottle] = {}
    named_by: dict[str, str] = {}
    for name, entry in raw.items():
        if not isinstance(name, str):
            raise DomainConfigError(f"domains: key {name!r} is not a domain name")
        domain = normalize(name)
        if domain in named_by:
            raise DomainConfigError(f"domains: {named_by[domain]!r} and {name!r} both name "
                                    f"{domain!r} (domains are matched by registered domain)")
        named_by[domain] = name
        throttle_entry, given = _split_entry(name, entry)
        if throttle_entry is not None:
            throttles[domain] = domain_throttle(name, throttle_entry)
        if RECRAWL_KEY in given:
            defaults[RECRAWL_KEY][domain] = domain_recrawl(name, given[RECRAWL_KEY])
        if SITEMAPS_KEY in given:
            defaults[SITEMAPS_KEY][domain] = domain_sitemaps(name, given[SITEMAPS_KEY])
    return throttles, defaults


def _split_entry(name: str, entry: Any) -> tuple[Any, dict[str, Any]]:
    """A domain entry's throttle part (None when it names no throttle field and has a
    default) and its defaults (``DEFAULT_KEYS`` present)."""
    if not isinstance(entry, Mapping):
        return entry, {}
    unknown = sorted(str(key) for key in entry if key not in DOMAIN_KEYS | set(DEFAULT_KEYS))
    if unknown:
        raise DomainConfigError(f"domain {name!r}: unknown field(s) {', '.join(unknown)} "
                                f"(allowed: {ENTRY_FIELDS})")
    given = {key: entry[key] for key in DEFAULT_KEYS if key in entry}
    if not given:
        return entry, given
    throttle = {key: value for key, value in entry.items() if key not in given}
    return (throttle or None), given


def domain_recrawl(name: str, recrawl: Any) -> dict[str, Any]:
    """One domain's re-crawl default validated as a crawl request's ``recrawl`` (docs/api.md),
    defaults filled in; ``until`` may be past (see module docstring)."""
    try:
        return recrawl_api.validated(recrawl)
    except ValueError as exc:
        raise DomainConfigError(f"domain {name!r}: {exc}") from exc


def domain_sitemaps(name: str, sitemaps: Any) -> str | list[str]:
    """One domain's sitemaps default validated as a crawl request's ``sitemaps``
    (docs/api.md, "Sitemaps"); YAML's false (how it reads ``off``) is ``"off"``."""
    try:
        return sitemaps_api.validated(sitemaps_api.OFF if sitemaps is False else sitemaps)
    except ValueError as exc:
        raise DomainConfigError(f"domain {name!r}: {exc}") from exc


def domain_throttle(name: str, entry: Any) -> DomainThrottle:
    """One domain's entry validated: window > 0, hits an integer >= 0, scale from 0 to 1
    (floor(hits x scale) = 0 pauses the domain), moderated a boolean; unknown fields refused.
    (The API's domain-update clamps an out-of-range scale, as the original did; a document is
    an operator's file, where scale: 5 is a typo.)"""
    if not isinstance(entry, Mapping):
        raise DomainConfigError(f"domain {name!r}: must be a mapping with window and hits")
    unknown = sorted(str(key) for key in entry if key not in DOMAIN_KEYS)
    if unknown:
        raise DomainConfigError(f"domain {name!r}: unknown field(s) {', '.join(unknown)} "
                                "(allowed: window, hits, scale, moderated)")
    for required in ("window", "hits"):
        if required not in entry:
            raise DomainConfigError(f"domain {name!r}: '{required}' is required")
    window, hits = entry["window"], entry["hits"]
    if not _is_number(window) or not math.isfinite(window) or window <= 0:
        raise DomainConfigError(f"domain {name!r}: window must be a number of seconds > 0, "
                                f"got {window!r}")
    if isinstance(hits, bool) or not isinstance(hits, int) or hits < 0:
        raise DomainConfigError(f"domain {name!r}: hits must be an integer >= 0, got {hits!r}")
    scale = entry.get("scale", 1.0)
    if not _is_number(scale) or not math.isfinite(scale) or not 0 <= scale <= 1:
        raise DomainConfigError(f"domain {name!r}: scale must be a number from 0 to 1, "
                                f"got {scale!r}")
    moderated = entry.get("moderated")
    if moderated is not None and not isinstance(moderated, bool):
        raise DomainConfigError(f"domain {name!r}: moderated must be true or false, "
                                f"got {moderated!r}")
    return DomainThrottle(window_s=float(window), hits=hits, scale=float(scale),
                          moderated=moderated)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
