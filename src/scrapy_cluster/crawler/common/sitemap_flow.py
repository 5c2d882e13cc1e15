"""What a sitemap or robots.txt response queues (issue 27; docs/crawler.md, "Sitemaps").
Engine-neutral and pure: given the popped request dict and the response's status, Content-Type
and body, it yields the requests to queue, in batches, and then holds the URL-funnel counts and
the log lines; each engine does the I/O where it would queue a page's links.

A popped request carrying ``sitemap`` (``SITEMAP_FIELD``) is fetched like any request, but its
response is read here instead of as a page (no item):

- ``{"kind": "robots"}``: the body is a robots.txt (its first ``ROBOTS_MAX_BYTES``); each
  ``Sitemap:`` line (any case) on the robots.txt's own host becomes a sitemap request
  ``{"kind": "sitemap", "depth": 0, "announced_by": <the robots.txt's host[:port]>}``. A
  sitemap on another host counts only when that host's robots.txt announces it too
  (cross-submission): those of one host become ONE request of that host's robots.txt,
  ``{"kind": "robots", "confirm": [<their URLs>], "announced_by": <this host>}``, whose
  response queues the ones it lists (with that ``announced_by``) and counts the others as
  ``filtered:sitemap_not_cross_submitted`` (all of them when it answers outside 2xx); its
  own other ``Sitemap:`` lines are not read. With ``any_host`` nothing needs confirming.
- ``{"kind": "sitemap", "depth": N}`` (optionally ``announced_by``, ``any_host``): the body goes
  to ``sitemaps.SitemapParser`` in ``STEP`` slices. A ``url`` entry allowed by
  ``sitemaps.allowed`` (the sitemap's own origin and directory; the whole host of
  ``announced_by`` when the sitemap is on another host; any http(s) URL with ``any_host``)
  becomes a page request: the sitemap request without ``sitemap``, at the same ``curdepth``
  (entry points), with ``meta.sitemap_lastmod`` (epoch s) when the entry had a lastmod. A
  ``sitemap`` entry of an index, allowed by the same rule, becomes a sitemap request of depth
  N + 1, keeping ``announced_by`` only when it is on the index's host (``filtered:
  sitemap_too_deep`` past ``MAX_INDEX_DEPTH``). A page URL must also pass the crawl's own link
  filters (``allowed_domains``, ``allow_regex``, ``deny_regex``, ``deny_extensions``: counted
  ``filtered:<reason>`` as for links).

Every request made is a copy of the popped one without what belongs to that one fetch
(retries, redirects, depth upgrade, the retried re-crawl state) and is queued with dedupe: a
sitemap seen before in the crawl is not fetched again, which ends loops. Entries refused, by
the parser or by the host rules, count ``submitted`` and ``filtered:sitemap_<reason>``; a
parser stop logs one warning and counts ``sitemap:<reason>``. A status outside 2xx reads
nothing (a 404 robots.txt simply has no sitemap).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple
from urllib.parse import urljoin, urlsplit

from scrapy_cluster.crawler.common.link_rules import rules_for
from scrapy_cluster.crawler.common.revisit import RECRAWL_FIELD, RETRY_STATE_FIELD, Refetch
from scrapy_cluster.crawler.common.sitemaps import (
    DEFAULT_LIMITS,
    STEP,
    SitemapEntry,
    SitemapLimits,
    SitemapParser,
    SitemapResult,
    allowed,
    loc_refusal,
)

SITEMAP_FIELD = "sitemap"
"""The popped request's field saying its response is a robots.txt or a sitemap."""
LASTMOD_META = "sitemap_lastmod"
"""A page request's ``meta`` key: its sitemap entry's lastmod, epoch seconds."""
MAX_INDEX_DEPTH = 9
"""Deepest sitemap index level followed: a top sitemap (named by robots.txt, a well-known
path or the request) is depth 0, so at most 10 levels are read."""
BATCH_SIZE = 1_000


def limits_from_settings(settings: Mapping[str, Any]) -> SitemapLimits:
    """SITEMAP_MAX_URLS and SITEMAP_MAX_BYTES as the parser's per-file limits."""
    return SitemapLimits(max_entries=int(settings["SITEMAP_MAX_URLS"]),
                         max_bytes=int(settings["SITEMAP_MAX_BYTES"]))
"""Requests per enqueue call."""
ROBOTS_MAX_BYTES = 512 * 1024
"""Bytes of a robots.txt read for ``Sitemap:`` lines (Google reads 500 KiB)."""
FETCH_FIELDS = ("retry_times", "dont_filter", "redirect_times", "depth_upgrade",
                RETRY_STATE_FIELD, SITEMAP_FIELD)
"""Fields of the popped request that belong to its own fetch, not to the requests it makes."""
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SITEMAP_PREFIX = "sitemap:"


class LogLine(NamedTuple):
    """A line for the engine's logger: ``logger.log(level, message, extra=fields)``."""

    level: int
    message: str
    fields: dict[str, Any]


def host_key(url: str) -> str | None:
    """``host`` or ``host:port`` (a port other than the scheme's default), lower case, as
    ``announced_by`` names hosts; None for a URL that is not http(s)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return parts.hostname
    return f"{parts.hostname}:{port}"


def previous_fetch_s(refetch: Refetch | None, now_s: float) -> float | None:
    """When a re-crawled sitemap was fetched before: now less the interval its state was
    scheduled with (a little earlier than the real fetch when the queue held it back, so a
    page changed in between is fetched once more rather than missed); None on a first fetch."""
    if refetch is None or refetch.state is None:
        return None
    return now_s - refetch.state.interval_s


def is_sitemap_request(stored: Mapping[str, Any]) -> bool:
    return SITEMAP_FIELD in stored


class SitemapFlow:
    """The requests one robots.txt or sitemap response queues (see module docstring).

    Iterate it for the batches (lists of at most ``batch_size`` request dicts, each to queue
    with dedupe before the next batch is asked for: the body is parsed as the batches are
    taken, so memory holds one batch). Once exhausted, ``funnel`` holds the counts (funnel
    field -> n) and ``logs`` the lines to log; ``result`` is the parser's (None for a
    robots.txt or a body not read)."""

    batch_size = BATCH_SIZE
    """Most requests per batch (a class attribute: a test may set it on an instance)."""

    def __init__(self, stored: Mapping[str, Any], *, status: int, content_type: str | None,
                 body: bytes, limits: SitemapLimits = DEFAULT_LIMITS,
                 previous_fetch_s: float | None = None) -> None:
        self.stored = stored
        self.previous_fetch_s = previous_fetch_s
        """Re-crawls: when this sitemap was fetched before (None on its first fetch)."""
        self.status, self.content_type, self.body = status, content_type, body
        self.limits = limits
        self.funnel: Counter[str] = Counter()
        self.logs: list[LogLine] = []
        self.result: SitemapResult | None = None
        spec = stored.get(SITEMAP_FIELD)
        self.spec: Mapping[str, Any] = spec if isinstance(spec, Mapping) else {}
        self.url = str(stored.get("url") or "")
        self._base = _base_request(stored)
        self._rules = rules_for(stored)
        self._host = host_key(self.url)
        self._relaxed = bool(self.spec.get("any_host"))
        try:
            self._depth = int(self.spec.get("depth") or 0)
        except (TypeError, ValueError):
            self._depth = 0
        announced_by = self.spec.get("announced_by")
        self._cross_hosts = frozenset({str(announced_by).lower()}) \
            if announced_by and str(announced_by).lower() != self._host else frozenset[str]()

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        kind = self.spec.get("kind")
        if not 200 <= self.status < 300:
            self._log(logging.INFO, f"sitemap not read: HTTP {self.status}", status=self.status)
            if kind == "robots":  # nothing confirmed
                self._filtered("not_cross_submitted", len(self._confirm))
            return
        if kind == "robots":
            yield from self._robots()
        elif kind == "sitemap":
            yield from self._sitemap()
        else:
            self._log(logging.WARNING, f"sitemap request of unknown kind {kind!r}")

    def requests(self) -> list[dict[str, Any]]:
        """Every request, in one list (for tests and small bodies)."""
        return [request for batch in self for request in batch]

    # robots.txt

    @property
    def _confirm(self) -> list[str]:
        confirm = self.spec.get("confirm")
        return [str(url) for url in confirm] if isinstance(confirm, list) else []

    def _robots(self) -> Iterator[list[dict[str, Any]]]:
        body = self.body
        if len(body) > ROBOTS_MAX_BYTES:
            body = body[:ROBOTS_MAX_BYTES]
            self._stop("robots_too_large", f"only the first {ROBOTS_MAX_BYTES} bytes read")
        confirm = self._confirm
        announced_by = self.spec.get("announced_by") if confirm else self._host
        listed, foreign = self._robots_lines(body, confirm)
        if confirm:
            self._filtered("not_cross_submitted", len(set(confirm) - set(listed)))
        batch = [{**self._base, "url": loc, SITEMAP_FIELD: self._top_spec(announced_by)}
                 for loc in listed]
        for host, locs in foreign.items():  # to be confirmed by their own host's robots.txt
            spec = {"kind": "robots", "confirm": locs, "announced_by": self._host}
            batch.append({**self._base, "url": urljoin(locs[0], "/robots.txt"),
                          SITEMAP_FIELD: spec})
            self._log(logging.DEBUG, f"sitemaps of {host} to be confirmed by its robots.txt",
                      sitemaps=len(locs))
        for start in range(0, len(batch), self.batch_size):
            yield batch[start:start + self.batch_size]

    def _robots_lines(self, body: bytes, confirm: list[str]
                      ) -> tuple[list[str], dict[str, list[str]]]:
        """The sitemaps of the robots.txt to queue now, and those on other hosts (per host) to
        be confirmed first; with ``confirm``, only those of it the robots.txt lists."""
        listed: list[str] = []
        foreign: dict[str, list[str]] = {}
        wanted, seen = set(confirm), set[str]()
        for loc in robots_sitemaps(body, self.url):
            reason = loc_refusal(loc, self.limits.max_loc_chars)
            if reason is not None:
                if not confirm:
                    self._filtered(reason)
                continue
            if loc in seen or (confirm and loc not in wanted):
                continue
            seen.add(loc)
            host = host_key(loc)
            if confirm or self._relaxed or host == self._host or host is None:
                listed.append(loc)
            else:
                foreign.setdefault(host, []).append(loc)
        return listed, foreign

    def _top_spec(self, announced_by: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {"kind": "sitemap", "depth": 0}
        if announced_by:
            spec["announced_by"] = announced_by
        if self._relaxed:
            spec["any_host"] = True
        return spec

    # sitemaps

    def _sitemap(self) -> Iterator[list[dict[str, Any]]]:
        parser = SitemapParser(url=self.url, content_type=self.content_type, limits=self.limits)
        self.result = parser.result
        batch: list[dict[str, Any]] = []
        for entry in _entries(parser, self.body):
            self._add(entry, batch)
            if len(batch) >= self.batch_size:
                yield batch
                batch = []
        if batch:
            yield batch
        result = parser.result
        for reason, count in result.refused.items():
            self._filtered(reason, count)
        if result.stop is not None:
            self._stop(result.stop, result.detail)

    def _add(self, entry: SitemapEntry, batch: list[dict[str, Any]]) -> None:
        """The request ``entry`` makes appended to ``batch``, or its refusal counted."""
        reason = allowed(entry.loc, self.url, cross_submitted_hosts=self._cross_hosts,
                         relaxed=self._relaxed)
        if reason is not None:
            self._filtered(reason)
        elif entry.kind == "url":
            refusal = self._rules.refusal(entry.loc)
            if refusal is None:
                batch.append(self._page(entry))
            else:
                self._filter_count(refusal)
        elif self._depth + 1 > MAX_INDEX_DEPTH:
            self._filtered("too_deep")
        else:
            batch.append(self._child(entry.loc))

    def _page(self, entry: SitemapEntry) -> dict[str, Any]:
        page = {**self._base, "url": entry.loc}
        if entry.lastmod is not None:
            lastmod = entry.lastmod
            # with re-crawls, a page with a lastmod follows its sitemap's schedule, not one of
            # its own: fetched again only when a re-fetched sitemap lists it changed since then
            page.pop(RECRAWL_FIELD, None)
            if self.previous_fetch_s is not None and lastmod > self.previous_fetch_s:
                page["dont_filter"] = True
            page["meta"] = {**(page.get("meta") or {}),
                            LASTMOD_META: int(lastmod) if lastmod.is_integer() else lastmod}
        return page

    def _child(self, loc: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"kind": "sitemap", "depth": self._depth + 1}
        announced_by = self.spec.get("announced_by")
        if announced_by and host_key(loc) == self._host:
            spec["announced_by"] = announced_by
        if self._relaxed:
            spec["any_host"] = True
        return {**self._base, "url": loc, SITEMAP_FIELD: spec}

    # counts and logs

    def _filtered(self, reason: str, count: int = 1) -> None:
        self.funnel["submitted"] += count
        self.funnel[f"filtered:sitemap_{reason}"] += count

    def _filter_count(self, reason: str) -> None:
        """A page URL the crawl's own link filters refuse, counted as a refused link is."""
        self.funnel["submitted"] += 1
        self.funnel[f"filtered:{reason}"] += 1

    def _stop(self, reason: str, detail: str) -> None:
        self.funnel[f"sitemap:{reason}"] += 1
        self._log(logging.WARNING, f"sitemap stopped: {reason}", reason=reason, detail=detail)

    def _log(self, level: int, message: str, **fields: Any) -> None:
        self.logs.append(LogLine(level, message, {"url": self.url, **_crawl(self.stored),
                                                  **fields}))


def robots_sitemaps(body: bytes, robots_url: str) -> Iterator[str]:
    """The URLs of the ``Sitemap:`` lines of a robots.txt body (any case, in order; a relative
    one joined to the robots.txt's URL)."""
    text = body.decode("utf-8", "replace").lstrip("\ufeff")
    for line in text.splitlines():
        line = line.strip()
        if line[:len(_SITEMAP_PREFIX)].lower() != _SITEMAP_PREFIX:
            continue
        words = line[len(_SITEMAP_PREFIX):].split(None, 1)  # a URL has no blank: the rest
        value = words[0] if words else ""                   # is a comment
        if value:
            yield value if value.lower().startswith(("http://", "https://")) \
                else urljoin(robots_url, value)


def _entries(parser: SitemapParser, body: bytes) -> Iterator[SitemapEntry]:
    """The entries of ``body`` fed to ``parser`` in ``STEP`` slices, then closed."""
    for start in range(0, len(body), STEP):
        yield from parser.entries(body[start:start + STEP])
        if parser.stopped:
            return
    yield from parser.close_entries()


def _base_request(stored: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` without the fields of its own fetch."""
    return {key: value for key, value in stored.items() if key not in FETCH_FIELDS}


def _crawl(stored: Mapping[str, Any]) -> dict[str, Any]:
    return {key: stored[key] for key in ("appid", "crawlid", "spiderid")
            if stored.get(key) is not None}
