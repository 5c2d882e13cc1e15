"""Which links of a page a crawl follows: allowed domains, allow/deny regexes, extensions, depth, expiry.

``deny_regex`` wins over ``allow_regex``; an absent ``deny_extensions`` means Scrapy's default
list (archives, images, documents, ...); ``maxdepth`` counts hops from the seed (seed = 0);
``expires`` (epoch seconds, 0 = never) stops all new work once passed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from scrapy.http import Response, TextResponse
from scrapy.link import Link
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor
from scrapy.utils.url import url_has_any_extension


def host_in_domains(url: str, domains: Sequence[str]) -> bool:
    """True when the URL's host (port ignored) is one of ``domains`` or a subdomain of one."""
    host = (urlsplit(url).hostname or "").lower()
    return any(host == d or host.endswith("." + d) for d in (d.lower() for d in domains))


def _as_list(value: Any) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


@lru_cache(maxsize=512)
def _compile(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


@dataclass(frozen=True)
class LinkRules:
    """The link filters of one crawl, read from a request's meta."""

    allowed_domains: tuple[str, ...] = ()
    allow: tuple[re.Pattern[str], ...] = ()
    deny: tuple[re.Pattern[str], ...] = ()
    deny_extensions: frozenset[str] = frozenset(f".{e}" for e in IGNORED_EXTENSIONS)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> LinkRules:
        extensions = meta.get("deny_extensions")
        denied = IGNORED_EXTENSIONS if extensions is None else _as_list(extensions)
        return cls(
            allowed_domains=tuple(_as_list(meta.get("allowed_domains"))),
            allow=_compile(tuple(_as_list(meta.get("allow_regex")))),
            deny=_compile(tuple(_as_list(meta.get("deny_regex")))),
            deny_extensions=frozenset(f".{e.lstrip('.').lower()}" for e in denied),
        )

    def allows(self, url: str) -> bool:
        """True when ``url`` passes every filter (deny wins over allow)."""
        if self.allowed_domains and not host_in_domains(url, self.allowed_domains):
            return False
        if any(pattern.search(url) for pattern in self.deny):
            return False
        if self.allow and not any(pattern.search(url) for pattern in self.allow):
            return False
        return not url_has_any_extension(url, self.deny_extensions)


def crawl_expired(meta: Mapping[str, Any], now_s: float) -> bool:
    """True once the crawl's ``expires`` (epoch seconds; 0/absent = never) has passed."""
    expires = float(meta.get("expires") or 0)
    return expires > 0 and now_s >= expires


def may_go_deeper(meta: Mapping[str, Any]) -> bool:
    """True when links of this page are within ``maxdepth`` (absent/0 = the seed page only)."""
    return int(meta.get("curdepth") or 0) < int(meta.get("maxdepth") or 0)


@lru_cache(maxsize=1)
def _extractor() -> LinkExtractor:
    return LinkExtractor(deny_extensions=[], unique=True)


def extract_links(response: Response) -> list[Link]:
    """Every unique http(s) link of an HTML response (none for other content)."""
    if not isinstance(response, TextResponse):
        return []
    try:
        links = _extractor().extract_links(response)
    except (AttributeError, ValueError, TypeError):
        return []
    return [link for link in links if link.url.startswith(("http://", "https://"))]


def links_to_follow(links: Sequence[Link], meta: Mapping[str, Any], now_s: float) -> list[Link]:
    """The subset of ``links`` this crawl follows from a page with ``meta``."""
    if crawl_expired(meta, now_s) or not may_go_deeper(meta):
        return []
    rules = LinkRules.from_meta(meta)
    return [link for link in links if rules.allows(link.url)]
