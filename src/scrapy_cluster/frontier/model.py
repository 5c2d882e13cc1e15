"""Value types of the frontier's API: what goes in and what comes out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class Clock(Protocol):
    """Milliseconds since the epoch. Injected in tests; production uses Redis server time."""

    def __call__(self) -> int: ...


@dataclass(frozen=True)
class DispatchView:
    """Who is asking for work: a spider type, and the crawler's public IP.

    Whether the IP (and the spider type) scope the throttle is decided by
    SCHEDULER_IP_ENABLED / SCHEDULER_TYPE_ENABLED, not by the view.
    """

    spiderid: str
    ip: str | None = None


@dataclass(frozen=True)
class LeasedRequest:
    """A dispatched request, leased to its crawler until acked, released or reaped.
    ``throttled``: its domain has a limit, so its dispatch took a throttle slot.
    ``enqueued_at_ms``: when it was queued (frontier clock, like ``dispatched_at_ms``); None
    for an item queued by a version that did not record it."""

    request: dict[str, Any]
    lease_id: str
    domain: str
    dispatched_at_ms: int
    throttled: bool = True
    enqueued_at_ms: int | None = None
    revisit: str | None = None
    """The URL's re-crawl state from its previous fetch (``Revisit.state``, written by the
    crawler, never read by the frontier); None on a first fetch."""


REVISIT_STATE_MAX = 120
"""Longest ``Revisit.state`` the frontier accepts."""


@dataclass(frozen=True)
class Revisit:
    """Acknowledge a lease and schedule its request to be queued again after ``delay_ms``
    (a re-crawl), carrying ``state``: the popped request's ``LeasedRequest.revisit``. The state
    is printable ASCII without space, at most ``REVISIT_STATE_MAX`` characters."""

    delay_ms: int
    state: str


@dataclass(frozen=True)
class PopResult:
    """``requests`` handed out; ``wait_s``: seconds until the next domain is allowed
    (0 when more may be due now), None when nothing is queued for the view.

    ``ready_at_s`` is that moment on this process's ``time.monotonic()`` clock (None when
    nothing is queued). To wait for it, pass the whole result to ``wait_for_work``.
    ``received_at_s``: the ``time.monotonic()`` at which the reply (stamped ``now_ms`` by the
    frontier) arrived.
    """

    requests: list[LeasedRequest]
    wait_s: float | None
    now_ms: int = 0
    ready_at_s: float | None = None
    received_at_s: float = 0.0


@dataclass(frozen=True)
class LateSend:
    """A request of ``domain`` dispatched at ``dispatched_ms`` but sent at ``sent_ms`` (both on
    the frontier's clock): its throttle slot should count from the send."""

    domain: str
    dispatched_ms: int
    sent_ms: int


@dataclass
class EnqueueResult:
    """Counts of one batch. ``invalid`` lists (index in the batch, reason) of refused requests.
    ``depth_upgrades``: requests seen before only at a larger depth, queued again at theirs
    (included in ``queued``). ``cached``: duplicates the crawler's seen cache recognised
    without sending them (included in ``duplicates``; per crawl in ``cached_by_crawl``: the
    caller counts them in its URL funnel, the script did not)."""

    queued: int = 0
    duplicates: int = 0
    blacklisted: int = 0
    invalid: list[tuple[int, str]] = field(default_factory=list)
    depth_upgrades: int = 0
    cached: int = 0
    cached_by_crawl: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class DomainCount:
    """Queued requests of one domain: how many, and their highest and lowest priority."""

    total: int
    high_priority: int
    low_priority: int


@dataclass
class CrawlInfo:
    """Pending work of one crawl, or of every crawl of an app (``crawlid`` None).

    ``total_pending`` counts queued requests; ``in_flight`` those leased to crawlers;
    ``scheduled`` the URLs waiting in re-crawl schedules, of which ``due`` are due already (a
    lower bound past 100 due buckets per crawl) and the others due at ``next_due_ms`` or later
    (epoch ms, frontier clock ``now_ms``).
    """

    spiderid: str
    appid: str
    crawlid: str | None
    total_pending: int = 0
    in_flight: int = 0
    domains: dict[str, DomainCount] = field(default_factory=dict)
    crawlids: list[str] = field(default_factory=list)
    scheduled: int = 0
    due: int = 0
    next_due_ms: int | None = None
    now_ms: int = 0

    @property
    def total_domains(self) -> int:
        return len(self.domains)

    def as_dict(self) -> dict[str, Any]:
        """The info-action shape: ``total_pending``, ``total_domains``, ``domains`` ... and,
        for a crawl with a re-crawl schedule, ``scheduled``, ``due`` and ``next_due`` (epoch s)."""
        return {
            "spiderid": self.spiderid, "appid": self.appid,
            **({"crawlid": self.crawlid} if self.crawlid else {}),
            "total_pending": self.total_pending, "total_domains": self.total_domains,
            "in_flight": self.in_flight,
            **({"scheduled": self.scheduled, "due": self.due,
                "next_due": None if self.next_due_ms is None else self.next_due_ms / 1000.0}
               if self.scheduled else {}),
            "domains": {name: {"total": count.total, "high_priority": count.high_priority,
                               "low_priority": count.low_priority}
                        for name, count in sorted(self.domains.items())},
        }


@dataclass(frozen=True)
class PurgeResult:
    """What a purge removed: queued requests and in-flight leases. ``prior_status``: the
    crawl's status before the purge (``running``, ``complete``, ...; None without state)."""

    queued: int = 0
    in_flight: int = 0
    prior_status: str | None = None

    @property
    def total(self) -> int:
        return self.queued + self.in_flight


@dataclass(frozen=True)
class Backlog:
    """Queued requests of one spider: the total and the count per domain."""

    total: int
    domains: dict[str, int]


@dataclass(frozen=True)
class CrawlCounts:
    """One crawl's queued requests per domain as ``(total, low priority, high priority)``, and
    its requests in flight."""

    domains: dict[str, tuple[int, int, int]]
    in_flight: int = 0
    scheduled: int = 0

    @property
    def total(self) -> int:
        return sum(total for total, _, _ in self.domains.values())


FUNNEL_COUNTS = ("submitted", "queued", "deduplicated", "retried", "dropped", "delivered")
FILTERED_PREFIX = "filtered:"
FETCHED_PREFIX = "fetched:"
SITEMAP_PREFIX = "sitemap:"


@dataclass
class CrawlFunnel:
    """What happened to the URLs of one crawl (``keys.crawl_funnel``; docs/api.md, "URL funnel").

    ``filtered``: reason -> URLs dropped by the crawl's rules; ``fetched``: status (text, ``0``
    = no response) -> downloads; ``sitemaps``: reason -> sitemaps whose reading stopped early
    (``too_large``, ``dtd``, ...; present only for a crawl that had such a stop). Every count is 0
    for a crawl never seen.
    """

    submitted: int = 0
    queued: int = 0
    deduplicated: int = 0
    filtered: dict[str, int] = field(default_factory=dict)
    fetched: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    dropped: int = 0
    delivered: int = 0
    sitemaps: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> CrawlFunnel:
        """From the HGETALL reply of the funnel hash (unknown fields are ignored)."""
        funnel = cls()
        for name, value in raw.items():
            text = name.decode() if isinstance(name, bytes) else str(name)
            count = int(value)
            if text.startswith(FILTERED_PREFIX):
                funnel.filtered[text.removeprefix(FILTERED_PREFIX)] = count
            elif text.startswith(FETCHED_PREFIX):
                funnel.fetched[text.removeprefix(FETCHED_PREFIX)] = count
            elif text.startswith(SITEMAP_PREFIX):
                funnel.sitemaps[text.removeprefix(SITEMAP_PREFIX)] = count
            elif text in FUNNEL_COUNTS:
                setattr(funnel, text, count)
        return funnel

    def as_dict(self) -> dict[str, Any]:
        """The ``funnel`` object of ``info`` answers: every key present, reasons and statuses
        sorted."""
        return {"submitted": self.submitted, "queued": self.queued,
                "deduplicated": self.deduplicated, "filtered": dict(sorted(self.filtered.items())),
                "fetched": dict(sorted(self.fetched.items(), key=lambda kv: (len(kv[0]), kv[0]))),
                "retried": self.retried, "dropped": self.dropped, "delivered": self.delivered,
                **({"sitemaps": dict(sorted(self.sitemaps.items()))} if self.sitemaps else {})}


CRAWL_STATUSES = ("running", "complete", "stopped", "expired")
FunnelCounts = Mapping[tuple[str, str], Mapping[str, int]]
"""URL funnel counts to add: (spiderid, crawlid) -> {funnel field: count}."""


@dataclass(frozen=True)
class CompletedCrawl:
    """A crawl the complete script declared complete (docs/api.md, "Crawl complete").

    ``started_ms``: its first enqueue; ``finished_ms``: since when it has had nothing queued
    and nothing leased; ``funnel``: its URL funnel then. ``member`` and ``held_score`` name the
    taken index entry for ``Frontier.confirm_completed``.
    """

    spiderid: str
    crawlid: str
    appid: str
    started_ms: int | None
    finished_ms: int
    funnel: CrawlFunnel
    member: bytes
    held_score: int
