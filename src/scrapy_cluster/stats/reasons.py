"""Why a crawl does nothing: filtered and refused URLs, and spiders no live crawler runs. Pure.

Two facts explain most crawls that fetch nothing, and the progress line of ``up``, the
dashboard, ``info`` and ``feed`` all say them the same way from these functions:

- its URLs were dropped: the frontier sums the ``filtered:<reason>`` counts of every crawl's
  URL funnel into ``keys.funnel_filtered_totals`` (per spider and reason). ``robots`` and
  ``ssrf`` are *refused*: a crawler declined to fetch a queued URL (robots.txt, a private or
  local address); every other reason is *filtered*: a URL dropped before it was queued
  (``offsite``, ``maxdepth``, ``blacklisted``, ...);
- no crawler runs its spider: the live members of the crawler heartbeat index
  (``stats:crawler:self``, ``<machine>:<spiderid>:<id>``, younger than HEARTBEAT_TIMEOUT) name
  the spiders being crawled; work queued for any other spider waits until one starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy_cluster import keys
from scrapy_cluster.frontier.model import CrawlFunnel

REFUSED_REASONS = frozenset({"robots", "ssrf"})
"""Funnel reasons meaning a crawler refused to fetch a queued URL (the rest: filtered)."""
NO_CRAWLER = "no crawler for this spider"
"""The reason ``info``, ``feed`` and the dashboard give for work no live crawler will take."""


@dataclass(frozen=True)
class DroppedUrls:
    """URLs refused and filtered, by reason (``{reason: count}``, largest first)."""

    refused: dict[str, int] = field(default_factory=dict)
    filtered: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_counts(cls, by_reason: Mapping[str, int]) -> DroppedUrls:
        """Split ``{reason: count}`` into refused and filtered; zero counts are left out."""
        ordered = sorted(((reason, count) for reason, count in by_reason.items() if count),
                         key=lambda item: (-item[1], item[0]))
        return cls(refused={reason: count for reason, count in ordered
                            if reason in REFUSED_REASONS},
                   filtered={reason: count for reason, count in ordered
                             if reason not in REFUSED_REASONS})

    @classmethod
    def from_totals(cls, raw: Mapping[Any, Any], spiderid: str | None = None) -> DroppedUrls:
        """From the HGETALL reply of ``keys.funnel_filtered_totals``, summed over spiders (or
        for ``spiderid`` alone)."""
        by_reason: dict[str, int] = {}
        for name, value in raw.items():
            spider, reason = keys.parse_funnel_filtered_field(name)
            if spiderid is None or spider == spiderid:
                by_reason[reason] = by_reason.get(reason, 0) + int(value)
        return cls.from_counts(by_reason)

    def text(self) -> str:
        """``3 refused (ssrf 2, robots 1)  5 filtered (offsite 5)``; '' when nothing was."""
        parts = [reason_counts_text(counts, noun) for counts, noun in
                 ((self.refused, "refused"), (self.filtered, "filtered")) if counts]
        return "  ".join(parts)


def reason_counts_text(counts: Mapping[str, int], noun: str) -> str:
    """``3 refused (ssrf 2, robots 1)``: the total, then each reason in the given order."""
    detail = ", ".join(f"{reason} {count:,}" for reason, count in counts.items())
    return f"{sum(counts.values()):,} {noun} ({detail})"


def live_crawler_spiders(members: Iterable[tuple[str, float]], *, now_s: float,
                         heartbeat_timeout_s: float) -> set[str]:
    """The spiders of the crawler heartbeat members (``(member, last beat epoch s)``) younger
    than ``heartbeat_timeout_s``."""
    return {spider for member, beat_s in members
            if now_s - beat_s < heartbeat_timeout_s
            and (spider := keys.crawler_member_spider(member)) is not None}


def unserved_backlog(backlog: Mapping[str, int], live_spiders: set[str]) -> dict[str, int]:
    """``{spiderid: requests queued}`` of the spiders with queued work and no live crawler."""
    return {spider: queued for spider, queued in sorted(backlog.items())
            if queued > 0 and spider not in live_spiders}


def unserved_text(unserved: Mapping[str, int]) -> str:
    """``no crawler for nosuchspider (1 queued)``; '' when every spider with work is served."""
    if not unserved:
        return ""
    return "no crawler for " + ", ".join(f"{spider} ({queued:,} queued)"
                                         for spider, queued in unserved.items())


def crawl_reason(*, status: str, pending: int, funnel: CrawlFunnel,
                 served: bool) -> str | None:
    """Why a crawl is doing nothing, for ``info``; None when there is nothing to explain.

    ``status``: the crawl's status (``running``, ``complete``, ...); ``pending``: requests
    queued or in flight; ``funnel``: its ``CrawlFunnel``; ``served``: a live crawler runs its
    spider. A running crawl with work and no crawler: ``NO_CRAWLER``. A crawl that ended
    having fetched nothing while URLs were refused or filtered: ``nothing fetched: 1 refused
    (ssrf 1)``.
    """
    if status == "running" and pending > 0 and not served:
        return NO_CRAWLER
    if status != "running" and not sum(funnel.fetched.values()):
        dropped = DroppedUrls.from_counts(funnel.filtered).text()
        if dropped:
            return f"nothing fetched: {dropped.replace('  ', ', ')}"
    return None
