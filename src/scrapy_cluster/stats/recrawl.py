"""Re-crawl schedules as the readers of the cluster show them: ``/metrics``, the dashboard and
the Redis Monitor's monitoring line. Pure: the reads are planned in ``stats.reader``.

The frontier keeps, per spider, ``<spiderid>:recrawl`` (``keys.recrawl_due_crawls``): a ZSET
crawlid -> due time (epoch ms, frontier clock) of the crawl's earliest re-crawl bucket, a member
for every crawl with URLs in its schedule. A score at or before now means that crawl has URLs
*overdue*: due, and not yet queued again (a pop queues due URLs, so only crawls no crawler pops
for, or whose due URLs come faster than pops take them, stay overdue); now minus the score is
the age of its oldest overdue URL. How many URLs a crawl has scheduled is the ``~scheduled``
field of its counts hash (``frontier.calls.SCHEDULED_FIELD``).

Readers take at most ``MOST_CRAWLS`` crawls of each spider, the earliest due first: the overdue
ones come first, so the count of overdue crawls and the oldest age are exact unless more than
``MOST_CRAWLS`` crawls of a spider are overdue; the scheduled URLs are those of the crawls read
(``complete`` says whether every crawl with a schedule was read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from scrapy_cluster.frontier.calls import SCHEDULED_FIELD
from scrapy_cluster.frontier.model import FETCHED_PREFIX
from scrapy_cluster.text import as_text

MOST_CRAWLS = 1000
"""Crawls with a schedule read per spider (the earliest due first)."""
NOT_MODIFIED = f"{FETCHED_PREFIX}304"
"""The funnel field counting a crawl's ``304 Not Modified`` answers."""


class RecrawlIndex(NamedTuple):
    """One spider's ``<spiderid>:recrawl`` as read: how many crawls have a schedule, and the
    earliest due of them (at most ``MOST_CRAWLS``) with their due time, earliest first."""

    crawls: int
    due_ms: list[tuple[str, int]]


def parse_index(raw: Sequence[Any]) -> RecrawlIndex:
    """From the replies of ZRANGE WITHSCORES and ZCARD (``ReadBatch.recrawl_index``)."""
    members, total = raw
    return RecrawlIndex(int(total), [(as_text(crawlid), int(score)) for crawlid, score in members])


def scheduled_of(counts: Mapping[bytes, bytes]) -> int:
    """The URLs in the re-crawl schedule of a crawl, from its counts hash."""
    raw = counts.get(SCHEDULED_FIELD.encode())
    return int(raw) if raw is not None else 0


def fetched_of(funnel: Mapping[bytes, bytes]) -> tuple[int, int]:
    """``(downloads, 304 answers)`` of a crawl, from its funnel hash (``fetched:<status>``)."""
    fetched = not_modified = 0
    for name, value in funnel.items():
        text = as_text(name)
        if text.startswith(FETCHED_PREFIX):
            fetched += int(value)
            if text == NOT_MODIFIED:
                not_modified += int(value)
    return fetched, not_modified


def not_modified_share(funnel: Mapping[bytes, bytes]) -> float | None:
    """``fetched:304`` over every download of a crawl; None when it fetched nothing."""
    fetched, not_modified = fetched_of(funnel)
    return round(not_modified / fetched, 4) if fetched else None


def overdue_seconds(due_ms: int | None, now_ms: int) -> float:
    """The age of the oldest overdue URL of a crawl whose earliest bucket is ``due_ms``; 0 when
    nothing is overdue (or the crawl has no schedule)."""
    if due_ms is None or due_ms > now_ms:
        return 0.0
    return round((now_ms - due_ms) / 1000.0, 3)


@dataclass(frozen=True)
class CrawlSchedule:
    """One crawl's schedule: its earliest bucket, URLs scheduled, downloads and 304 answers."""

    crawlid: str
    due_ms: int
    scheduled: int
    fetched: int = 0
    not_modified: int = 0


@dataclass(frozen=True)
class SpiderSchedules:
    """One spider's re-crawl schedules at ``now_ms`` (frontier clock, epoch ms)."""

    crawls: int
    """Crawls with a schedule (all of them)."""
    read: tuple[CrawlSchedule, ...]
    """The crawls read, earliest due first (at most ``MOST_CRAWLS``)."""
    now_ms: int

    @classmethod
    def build(cls, index: RecrawlIndex, now_ms: int, scheduled: Mapping[str, int],
              funnels: Mapping[str, Mapping[bytes, bytes]] | None = None) -> SpiderSchedules:
        """From the index and, per crawl read, its scheduled URLs (``scheduled_of``) and its
        funnel hash (optional: no downloads counted without it)."""
        read = []
        for crawlid, due_ms in index.due_ms:
            fetched, not_modified = fetched_of((funnels or {}).get(crawlid, {}))
            read.append(CrawlSchedule(crawlid, due_ms, scheduled.get(crawlid, 0), fetched,
                                      not_modified))
        return cls(index.crawls, tuple(read), now_ms)

    @property
    def scheduled(self) -> int:
        return sum(crawl.scheduled for crawl in self.read)

    @property
    def complete(self) -> bool:
        """Whether every crawl with a schedule was read (else ``scheduled`` is a lower bound)."""
        return len(self.read) >= self.crawls

    def overdue(self) -> list[CrawlSchedule]:
        """The crawls read with URLs overdue, the oldest first."""
        return [crawl for crawl in self.read if crawl.due_ms <= self.now_ms]

    def overdue_s(self, crawl: CrawlSchedule) -> float:
        return overdue_seconds(crawl.due_ms, self.now_ms)

    @property
    def oldest_overdue_s(self) -> float:
        """The age of the spider's oldest overdue URL; 0 when none is overdue."""
        return self.overdue_s(self.read[0]) if self.read else 0.0

    @property
    def fetched(self) -> int:
        return sum(crawl.fetched for crawl in self.read)

    @property
    def not_modified(self) -> int:
        return sum(crawl.not_modified for crawl in self.read)

    def summary(self) -> dict[str, Any]:
        """``{crawls, scheduled, overdue_crawls, oldest_overdue_s, complete}`` (JSON)."""
        return {"crawls": self.crawls, "scheduled": self.scheduled,
                "overdue_crawls": len(self.overdue()), "oldest_overdue_s": self.oldest_overdue_s,
                "complete": self.complete}
