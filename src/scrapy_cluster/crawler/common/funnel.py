"""The crawler's share of each crawl's URL funnel (``keys.crawl_funnel``; docs/api.md).

The enqueue script counts ``submitted`` / ``queued`` / ``deduplicated`` for the URLs it is
offered; this process counts what only it sees, per crawl, in memory, and the lease
acknowledgement carries the counts (``LeaseState.plan_flush`` -> ``Frontier.ack(..., funnel=...)``:
no round trip of their own). Every count of a page is made before its lease is finished, so
when a crawl's last lease is acknowledged its funnel is complete in Redis in the same atomic
step, which is what lets the Redis Monitor announce exact totals when the crawl completes:

* ``submitted`` and ``deduplicated`` for links the frontier's seen cache recognised as
  duplicates without sending them to Redis (``frontier/seen.py``);
* ``submitted`` and ``filtered:<reason>`` for links the crawl's rules drop before the frontier
  (``max_links``, ``expired``, ``maxdepth``, ``offsite``, ``deny_regex``, ``allow_regex``,
  ``deny_extensions``; see ``link_rules.select_links``);
* ``filtered:robots`` / ``filtered:ssrf`` for queued requests refused at fetch time;
* ``fetched:<status>`` per download (``0``: no response), ``retried`` per retry sent back to
  the frontier, ``dropped`` per request given up without a page (an error item instead);
* ``delivered`` per result item once the bus confirmed it.

Memory is bounded by the crawls seen between two acknowledgements times a handful of fields.
Counts left when the process stops belong to pages it gives back (released, crawled again
elsewhere) and are dropped with them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

ROBOTS_MESSAGE = "Forbidden by robots.txt"
"""What Scrapy's RobotsTxtMiddleware says when it refuses a request (the fast engine says it too)."""


class FunnelCounter:
    """Funnel counts per (spiderid, crawlid) since the last ``take``."""

    def __init__(self) -> None:
        self._counts: defaultdict[tuple[str, str], Counter[str]] = defaultdict(Counter)

    def add(self, crawl: Mapping[str, Any], field: str, amount: int = 1) -> None:
        """Count ``amount`` under ``field`` for the crawl named by ``crawl`` (a request dict or
        meta with ``spiderid`` and ``crawlid``; ignored without them). No Redis I/O."""
        spiderid, crawlid = crawl.get("spiderid"), crawl.get("crawlid")
        if spiderid and crawlid and amount:
            self._counts[(str(spiderid), str(crawlid))][field] += amount

    def add_filtered(self, crawl: Mapping[str, Any], reasons: Mapping[str, int]) -> None:
        """Links the crawl's rules dropped before the frontier: submitted and filtered."""
        for reason, count in reasons.items():
            self.add(crawl, "submitted", count)
            self.add(crawl, f"filtered:{reason}", count)

    def add_cached(self, cached_by_crawl: Mapping[tuple[str, str], int]) -> None:
        """Links the frontier's seen cache knew for duplicates (``EnqueueResult
        .cached_by_crawl``): counted here as the enqueue script would have counted them."""
        for (spiderid, crawlid), count in cached_by_crawl.items():
            if count:
                fields = self._counts[(spiderid, crawlid)]
                fields["submitted"] += count
                fields["deduplicated"] += count

    def pending(self, spiderid: str, crawlid: str) -> dict[str, int]:
        return dict(self._counts.get((spiderid, crawlid), {}))

    def take(self) -> dict[tuple[str, str], dict[str, int]]:
        """Every count so far, per (spiderid, crawlid), forgotten here (the caller writes
        them; ``Frontier.ack`` applies the TTL rule of docs/architecture.md)."""
        counts, self._counts = self._counts, defaultdict(Counter)
        return {crawl: dict(fields) for crawl, fields in counts.items()}

    def restore(self, counts: Mapping[tuple[str, str], Mapping[str, int]]) -> None:
        """Put back counts ``take`` returned that could not be written."""
        for crawl, fields in counts.items():
            self._counts[crawl].update(fields)
