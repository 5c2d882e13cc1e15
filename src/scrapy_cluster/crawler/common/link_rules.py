"""The links of a page, and which of them a crawl follows: allowed domains, allow/deny
regexes, extensions, depth, expiry. Both engines: the Scrapy engine reads a response's tree
through ``crawler/page_links.py``, the fast engine parses with lxml itself.

``links_in_tree`` reads ``href`` of every ``<a>`` and ``<area>`` straight from the page's
parsed lxml tree, as Scrapy's ``LinkExtractor`` does (whitespace stripped, joined with the
page's ``<base>``, made safe with ``safe_url_string``), but skips joining and re-quoting an
href that is already an absolute http(s) URL of plain URL characters, and deduplicates by the
URL itself rather than its canonical form (the frontier deduplicates canonically anyway).
``links_in_tree`` stops after ``CRAWLER_MAX_LINKS_PER_PAGE`` distinct links and only counts the
hrefs past it (resolving 100,000 relative hrefs would block the crawler for seconds).
``deny_regex`` wins over ``allow_regex``; an absent ``deny_extensions`` means Scrapy's default
list (archives, images, documents, ...); ``maxdepth`` counts hops from the seed (seed = 0);
``expires`` (epoch seconds, 0 = never) stops all new work once passed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin

from lxml import etree
from scrapy.link import Link
from scrapy.linkextractors import IGNORED_EXTENSIONS
from scrapy.utils.misc import rel_has_nofollow
from w3lib.html import strip_html5_whitespace
from w3lib.url import safe_url_string

from scrapy_cluster.crawler.common.url_join import PlainJoin
from scrapy_cluster.frontier.urls import url_host

XHTML = "{http://www.w3.org/1999/xhtml}"
LINK_TAGS = ("a", "area", f"{XHTML}a", f"{XHTML}area")
# An absolute http(s) URL with a lower-case host, made only of characters safe_url_string
# leaves as they are ('%' excluded: an invalid escape would be re-quoted; '[]' are quoted in a
# path), not ending in a separator that urljoin would drop.
_PLAIN_ABSOLUTE_URL = re.compile(
    r"https?://[a-z0-9\-._~:@!$&'()*+,;=]+(?:/[A-Za-z0-9\-._~:/?#@!$&'()*+,;=]*[A-Za-z0-9\-._~/])?\Z")
_string_content = etree.XPath("string()")
_AUTHORITY_END = re.compile(r"[/?#]")
REFUSAL_MEMO = 2_000
"""URLs whose filter answer one set of crawl filters remembers (``LinkRules.refusal``): with
the 256 filter sets ``rules_for`` keeps, at most 512,000 answers per process."""


def host_in_domains(url: str, domains: Sequence[str]) -> bool:
    """True when the URL's host (port ignored) is one of ``domains`` or a subdomain of one.
    The host is read by ``url_host`` (one regex match for a plain http(s) URL)."""
    host = (url_host(url) or "").lower()
    exact, suffixes = _domain_forms(tuple(domains))
    return host in exact or host.endswith(suffixes)


@lru_cache(maxsize=256)
def _domain_forms(domains: tuple[str, ...]) -> tuple[frozenset[str], tuple[str, ...]]:
    """``domains`` lower-cased, and as ``.domain`` suffixes of their subdomains."""
    lowered = [domain.lower() for domain in domains]
    return frozenset(lowered), tuple(f".{domain}" for domain in lowered)


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
    _answers: dict[str, str | None] = field(default_factory=dict, compare=False, hash=False,
                                            repr=False)
    """``refusal`` per URL already asked (a site's menu links come on every page); at most
    REFUSAL_MEMO URLs, then started afresh. Only with allowed domains or regexes: the
    extension check alone costs less than asking the memo."""
    _remembers: bool = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_remembers", bool(self.allowed_domains or self.allow
                                                    or self.deny))

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
        return self.refusal(url) is None

    def refusal(self, url: str) -> str | None:
        """The first filter refusing ``url`` (``offsite``, ``deny_regex``, ``allow_regex``,
        ``deny_extensions``), or None when it passes them all."""
        if not self._remembers:
            return "deny_extensions" if has_extension(url, self.deny_extensions) else None
        answers = self._answers
        if url in answers:
            return answers[url]
        if len(answers) >= REFUSAL_MEMO:
            answers.clear()
        answers[url] = answer = self._refusal(url)
        return answer

    def _refusal(self, url: str) -> str | None:
        if self.allowed_domains and not host_in_domains(url, self.allowed_domains):
            return "offsite"
        if self.deny and any(pattern.search(url) for pattern in self.deny):
            return "deny_regex"
        if self.allow and not any(pattern.search(url) for pattern in self.allow):
            return "allow_regex"
        return "deny_extensions" if has_extension(url, self.deny_extensions) else None


def has_extension(url: str, extensions: frozenset[str]) -> bool:
    """True when the URL's path ends with one of ``extensions`` (each ``.ext``, lower case).

    Same answer as Scrapy's ``url_has_any_extension``, but one set lookup per dot in the
    path's last segment instead of one ``endswith`` per extension, and none when that segment
    has no dot (most links: a directory, a page without extension).
    """
    if not extensions or (url[-1:] == "/" and "?" not in url and "#" not in url):
        return False  # a directory
    segment = _dotted_last_segment(url)
    if not segment:
        return False
    segment = segment.lower().split(";", 1)[0]  # urlparse drops ;params
    dot = segment.find(".")
    while dot != -1:
        if segment[dot:] in extensions:
            return True
        dot = segment.find(".", dot + 1)
    return False


def _dotted_last_segment(url: str) -> str:
    """What follows the last ``/`` of the URL's path when it may have an extension; "" when
    the URL has no path or no dot there. A URL with neither query nor fragment ends with its
    path: its last ``/`` is the path's unless it belongs to the ``//`` of the authority (then
    there is no path), and without a dot after it the authority is not even looked for."""
    if "?" not in url and "#" not in url:
        slash = url.rfind("/")
        segment = url[slash + 1:]
        if "." not in segment:
            return ""
        authority = url.find("//")
        return segment if slash >= (authority + 2 if authority != -1 else 0) else ""
    authority = url.find("//")
    found = _AUTHORITY_END.search(url, authority + 2 if authority != -1 else 0)
    if found is None or found.group() != "/":
        return ""
    path = url[found.start():].split("#", 1)[0].split("?", 1)[0]
    return path[path.rfind("/") + 1:]


@lru_cache(maxsize=256)
def _cached_rules(allowed: tuple[str, ...], allow: tuple[str, ...], deny: tuple[str, ...],
                  extensions: tuple[str, ...] | None) -> LinkRules:
    denied = IGNORED_EXTENSIONS if extensions is None else extensions
    return LinkRules(allowed_domains=allowed, allow=_compile(allow), deny=_compile(deny),
                     deny_extensions=frozenset(f".{e.lstrip('.').lower()}" for e in denied))


def rules_for(meta: Mapping[str, Any]) -> LinkRules:
    """``LinkRules.from_meta``, built once per distinct set of crawl filters."""
    extensions = meta.get("deny_extensions")
    return _cached_rules(tuple(_as_list(meta.get("allowed_domains"))),
                         tuple(_as_list(meta.get("allow_regex"))),
                         tuple(_as_list(meta.get("deny_regex"))),
                         None if extensions is None else tuple(_as_list(extensions)))


def crawl_expired(meta: Mapping[str, Any], now_s: float) -> bool:
    """True once the crawl's ``expires`` (epoch seconds; 0/absent = never) has passed."""
    expires = float(meta.get("expires") or 0)
    return expires > 0 and now_s >= expires


def may_go_deeper(meta: Mapping[str, Any]) -> bool:
    """True when links of this page are within ``maxdepth`` (absent/0 = the seed page only)."""
    return int(meta.get("curdepth") or 0) < int(meta.get("maxdepth") or 0)


@dataclass(frozen=True)
class PageLinks:
    """The links read from a page, and how many hrefs past the limit were not read."""

    links: list[Link]
    dropped: int = 0


def links_in_tree(root: Any, *, base_url: str, page_url: str, encoding: str,
                  max_links: int) -> PageLinks:
    """The first ``max_links`` unique http(s) links of a parsed lxml tree (0: all of them):
    ``base_url`` is the page's ``<base>`` (or its URL), ``encoding`` the page's, used to quote
    non-ASCII hrefs.

    Past the limit the remaining ``<a>``/``<area>`` elements with an ``href`` are only counted
    (``dropped``), neither resolved nor deduplicated: a repeated or non-http href counts too.
    """
    seen: set[str] = set()
    links: list[Link] = []
    join = PlainJoin.for_page(base_url, page_url, encoding) or _no_plain_join
    elements = root.iter(*LINK_TAGS)
    for element in elements:
        href = element.get("href")
        url = None if href is None else join(href) or (
            None if _OTHER_SCHEME.match(href) else _absolute_url(href, base_url, page_url,
                                                                encoding))
        if url is None or url in seen or not url.startswith(("http://", "https://")):
            continue
        seen.add(url)
        # an element without children: its string value is its text, read without XPath
        text = (element.text or "") if not len(element) else (_string_content(element) or "")
        links.append(Link(url, text, nofollow=rel_has_nofollow(element.get("rel"))))
        if len(links) == max_links:
            break
    return PageLinks(links, sum(1 for element in elements if element.get("href") is not None))


_OTHER_SCHEME = re.compile(r"[ \t\n\f\r]*(?![Hh][Tt][Tt][Pp][Ss]?:)[A-Za-z][A-Za-z0-9+.\-]*:")
"""An href whose scheme is not http(s) (``javascript:``, ``mailto:``, ``tel:``...): ``urljoin``
keeps such an href as it is, so it never resolves to an http(s) link. Skipped without the
formula; anything less plain (a tab inside the scheme...) still goes through it."""


def _no_plain_join(href: str) -> None:
    """``PlainJoin`` of a page none of whose hrefs may skip ``_absolute_url``."""


def _absolute_url(href: str, base_url: str, page_url: str, encoding: str) -> str | None:
    """The absolute, safely quoted URL of ``href``; None for a bogus one. ``PlainJoin`` gives
    the same answer for the plain relative hrefs of most pages, without joining twice and
    quoting."""
    href = strip_html5_whitespace(href)
    if _PLAIN_ABSOLUTE_URL.match(href):
        return href
    try:
        return urljoin(page_url, safe_url_string(urljoin(base_url, href), encoding=encoding))
    except ValueError:
        return None


@dataclass(frozen=True)
class LinkSelection:
    """The links a crawl follows from a page, and how many it dropped for each reason."""

    follow: list[Link]
    filtered: Counter[str] = field(default_factory=Counter)


def select_links(links: Sequence[Link], meta: Mapping[str, Any], now_s: float, *,
                 dropped: int = 0) -> LinkSelection:
    """Split ``links`` of a page with ``meta``: followed, or dropped with the first reason that
    applies (``expired``, ``maxdepth``, then ``LinkRules.refusal``'s order). ``dropped``: hrefs
    past the page's link limit (``links_in_tree``), counted as ``max_links``."""
    if dropped:
        selection = select_links(links, meta, now_s)
        return LinkSelection(selection.follow, selection.filtered + Counter(max_links=dropped))
    if not links:
        return LinkSelection([])
    if crawl_expired(meta, now_s):
        return LinkSelection([], Counter({"expired": len(links)}))
    if not may_go_deeper(meta):
        return LinkSelection([], Counter({"maxdepth": len(links)}))
    return _split_links(links, rules_for(meta))


def _split_links(links: Sequence[Link], rules: LinkRules) -> LinkSelection:
    """``select_links`` by ``rules`` alone; the extension check asked directly (one call per
    link) when it is the only filter."""
    if not rules._remembers:
        extensions = rules.deny_extensions
        follow = [link for link in links if not has_extension(link.url, extensions)]
        refused = len(links) - len(follow)
        return LinkSelection(follow, Counter({"deny_extensions": refused} if refused else {}))
    follow = []
    filtered: Counter[str] = Counter()
    refusal = rules.refusal
    for link in links:
        reason = refusal(link.url)
        if reason is None:
            follow.append(link)
        else:
            filtered[reason] += 1
    return LinkSelection(follow, filtered)


def links_to_follow(links: Sequence[Link], meta: Mapping[str, Any], now_s: float) -> list[Link]:
    """The subset of ``links`` this crawl follows from a page with ``meta``."""
    return select_links(links, meta, now_s).follow
