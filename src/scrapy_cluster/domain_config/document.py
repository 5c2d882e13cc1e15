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

Domains are matched as the frontier keys its queues: by **registered domain** (tldextract, the
bundled public-suffix list). ``www.example.com``, ``http://example.com:8080/`` and
``shop.example.com`` all name ``example.com``; two entries that name the same domain are an
error. IP addresses and single-label hosts are their own domain.

A document is a value: it always replaces the whole configuration (a domain no longer listed
returns to the default throttle; one no longer blacklisted is crawled again).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

from scrapy_cluster.errors import DomainConfigError
from scrapy_cluster.frontier.codec import DomainExtractor
from scrapy_cluster.frontier.config import DomainThrottle

TOP_LEVEL_KEYS = frozenset({"blacklist", "domains"})
DOMAIN_KEYS = frozenset({"window", "hits", "scale", "moderated"})
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
    """Throttle overrides by domain and the blacklisted domains (already normalized)."""

    throttles: Mapping[str, DomainThrottle] = field(default_factory=dict)
    blacklist: frozenset[str] = frozenset()

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
        return cls(throttles=_throttles(data.get("domains"), normalize),
                   blacklist=_blacklist(data.get("blacklist"), normalize))

    def to_data(self) -> dict[str, Any]:
        """Plain data for YAML or JSON, domains sorted."""
        domains = {}
        for name in sorted(self.throttles):
            throttle = self.throttles[name]
            entry: dict[str, Any] = {"window": throttle.window_s, "hits": throttle.hits}
            if throttle.scale != 1.0:
                entry["scale"] = throttle.scale
            if throttle.moderated is not None:
                entry["moderated"] = throttle.moderated
            domains[name] = entry
        return {"blacklist": sorted(self.blacklist), "domains": domains}

    def to_yaml(self) -> str:
        text: str = yaml.safe_dump(self.to_data(), sort_keys=False, default_flow_style=False)
        return text

    def with_throttle(self, domain: str, throttle: DomainThrottle) -> DomainDocument:
        return DomainDocument({**self.throttles, domain: throttle}, self.blacklist)

    def without_throttle(self, domain: str) -> DomainDocument:
        return DomainDocument({k: v for k, v in self.throttles.items() if k != domain},
                              self.blacklist)

    def with_blacklisted(self, domain: str) -> DomainDocument:
        return DomainDocument(self.throttles, self.blacklist | {domain})

    def without_blacklisted(self, domain: str) -> DomainDocument:
        return DomainDocument(self.throttles, self.blacklist - {domain})

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
        return lines


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


def _throttles(raw: Any, normalize: Normalize) -> dict[str, DomainThrottle]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise DomainConfigError("domains: must be a mapping of domain name to "
                                "{window, hits, scale}")
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
        throttles[domain] = domain_throttle(name, entry)
    return throttles


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
