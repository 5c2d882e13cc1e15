"""The dashboard's paged tables: domains (why each is not faster) and active crawls. Pure."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scrapy_cluster import keys
from scrapy_cluster.frontier.calls import LEASED_FIELD, SCHEDULED_FIELD
from scrapy_cluster.frontier.config import DomainThrottle
from scrapy_cluster.frontier.pause import HALT_UNTIL_MS
from scrapy_cluster.rest.dashboard import classify
from scrapy_cluster.rest.dashboard.model import CrawlKey, Policy, Raw, json_object
from scrapy_cluster.rest.dashboard.records import LeaseRecord
from scrapy_cluster.stats import reasons, recrawl
from scrapy_cluster.text import as_text


def limit_of(domain: str, raw: Raw, policy: Policy) -> dict[str, Any]:
    """The throttle in force: the override, else QUEUE_HITS / QUEUE_WINDOW. ``rate_rps`` None:
    not throttled (window 0)."""
    override = json_object(raw.throttles.get(domain))
    if override is not None:
        throttle = DomainThrottle.from_json(raw.throttles[domain])
        hits, window_s, source = throttle.limit, throttle.window_s, "override"
    else:
        hits, window_s, source = policy.default_hits, policy.default_window_s, "default"
    return {"hits": hits, "window_s": window_s, "source": source,
            "rate_rps": hits / window_s if window_s > 0 else None}


def pause_of(domain: str, raw: Raw) -> dict[str, Any]:
    breaker = json_object(raw.breaker.get(domain)) or {}
    until_ms = raw.paused.get(domain)
    breaker_until = breaker.get("until_ms")
    if breaker.get("state") == classify.PAUSED and isinstance(breaker_until, int):
        until_ms = max(until_ms or 0, breaker_until)
    state = classify.domain_state(paused_until_ms=until_ms, breaker_state=breaker.get("state"),
                                  now_ms=raw.redis_now_ms, halt_until_ms=HALT_UNTIL_MS)
    return {"state": state, "reason": breaker.get("reason"),
            "paused_until_ms": until_ms if state == classify.PAUSED else None}


def domains(raw: Raw, policy: Policy, statuses: Mapping[str, Counter[int]]) -> list[dict[str, Any]]:
    in_flight: Counter[str] = Counter(lease.domain for lease in raw.leases)
    queued: dict[str, dict[str, int]] = defaultdict(dict)
    for spider, backlog in raw.backlog.items():
        for domain, count in backlog.domains.items():
            queued[domain][spider] = count
    for lease in raw.leases:
        queued[lease.domain].setdefault(lease.spiderid, 0)
    blacklist = set(raw.blacklist)
    live = live_spiders(raw, policy)
    rows = []
    for domain in sorted(set(queued) | set(statuses) | set(raw.paused)):
        row = _domain_row(domain, raw, policy, statuses.get(domain, Counter()),
                          queued.get(domain, {}), in_flight[domain], domain in blacklist, live)
        rows.append(row)
    rows.sort(key=lambda row: (-(row["backlog"] + row["in_flight"]), -row["rate_rps"],
                               row["domain"]))
    return rows


def live_spiders(raw: Raw, policy: Policy) -> set[str]:
    """The spiders of the crawlers whose heartbeat is younger than HEARTBEAT_TIMEOUT."""
    return reasons.live_crawler_spiders(raw.heartbeats.get("crawler", []), now_s=raw.now_s,
                                        heartbeat_timeout_s=policy.heartbeat_timeout_s)


def _domain_row(domain: str, raw: Raw, policy: Policy, seen: Counter[int],
                by_spider: dict[str, int], in_flight: int, blacklisted: bool,
                live: set[str]) -> dict[str, Any]:
    backlog = sum(by_spider.values())
    responses = sum(seen.values())
    rate = responses / policy.status_window_s if policy.status_window_s > 0 else 0.0
    limit = limit_of(domain, raw, policy)
    scores = [raw.ready[spider][domain] for spider in by_spider
              if domain in raw.ready.get(spider, {})]
    ready_at_ms = math.floor(min(scores)) if scores else None
    pause = pause_of(domain, raw)
    return {
        "domain": domain, "backlog": backlog, "spiders": dict(sorted(by_spider.items())),
        "in_flight": in_flight, "responses": responses, "rate_rps": round(rate, 4),
        "limit": limit, "statuses": {str(code): n for code, n in sorted(seen.items())},
        "errors": sum(n for code, n in seen.items() if code in policy.errors),
        "last_error": json_object(raw.last_errors.get(domain)), **pause, "blacklisted": blacklisted,
        "ready_in_ms": None if ready_at_ms is None else ready_at_ms - raw.redis_now_ms,
        "bottleneck": classify.bottleneck(
            backlog=backlog, rate_rps=rate, limit_rps=limit["rate_rps"],
            ready_at_ms=ready_at_ms, now_ms=raw.redis_now_ms, state=pause["state"],
            blacklisted=blacklisted,
            served=any(spider in live for spider, count in by_spider.items() if count)),
        "drain_s": None if pause["state"] != classify.ACTIVE else classify.drain_seconds(
            backlog, rate)}


# --- crawls --------------------------------------------------------------------------------
def crawls_with_work(subqueues: Mapping[tuple[str, str], Sequence[str]],
                     leases: Iterable[LeaseRecord]) -> dict[CrawlKey, tuple[str, int] | None]:
    """Each crawl with queued or leased requests -> one of its sub-queues ``(domain,
    priority)`` (None when everything it has is in flight)."""
    found: dict[CrawlKey, tuple[str, int] | None] = {}
    for (spider, domain), members in subqueues.items():
        for member in members:
            priority, _, crawlid = member.partition("|")
            if (spider, crawlid) not in found or found[(spider, crawlid)] is None:
                found[(spider, crawlid)] = (domain, int(priority))
    for lease in leases:
        found.setdefault((lease.spiderid, lease.crawlid), None)
    return found


def crawl_totals(counts: Mapping[bytes, bytes]) -> tuple[int, int, int]:
    """``(pending, in flight, domains)`` from a crawl's count hash."""
    pending = in_flight = 0
    domains_seen = set()
    for name, value in counts.items():
        text = as_text(name)
        if text == LEASED_FIELD:
            in_flight += int(value)
        elif text == SCHEDULED_FIELD:
            continue
        else:
            pending += int(value)
            domains_seen.add(text.rpartition("|")[0])
    return pending, in_flight, len(domains_seen)


def funnel(raw: Mapping[bytes, bytes]) -> dict[str, Any]:
    """The funnel hash as ``{submitted, queued, deduplicated, filtered: {reason: n}, fetched:
    {status: n}, retried, dropped, delivered}``; stages never counted are left out."""
    result: dict[str, Any] = {}
    for name, value in sorted(raw.items()):
        text = as_text(name)
        stage, _, detail = text.partition(":")
        if detail:
            result.setdefault(stage, {})[detail] = int(value)
        else:
            result[stage] = int(value)
    return result


def crawls(raw: Raw) -> list[dict[str, Any]]:
    """One row per crawl read; re-crawl fields: ``scheduled`` (URLs in its schedule),
    ``oldest_overdue_s`` (age of its oldest URL due and not yet queued again, 0 when none is;
    None when no schedule of it was read) and ``not_modified_share`` (``fetched:304`` over its
    downloads, None before any)."""
    due = {(spider, crawlid): due_ms for spider, index in raw.recrawl.items()
           for crawlid, due_ms in index.due_ms}
    rows = []
    for (spider, crawlid), (counts, funnel_raw) in raw.crawl_counts.items():
        if not counts:
            continue
        pending, in_flight, domain_count = crawl_totals(counts)
        appid = raw.crawl_apps.get((spider, crawlid))
        expires = None if appid is None else raw.timeouts.get(
            keys.crawl_timeout(spider, appid, crawlid))
        due_ms = due.get((spider, crawlid))
        rows.append({"spiderid": spider, "appid": appid, "crawlid": crawlid,
                     "pending": pending, "in_flight": in_flight, "domains": domain_count,
                     "expires_s": expires, "funnel": funnel(funnel_raw),
                     "scheduled": recrawl.scheduled_of(counts),
                     "oldest_overdue_s": None if due_ms is None
                     else recrawl.overdue_seconds(due_ms, raw.redis_now_ms),
                     "not_modified_share": recrawl.not_modified_share(funnel_raw)})
    rows.sort(key=_busiest_crawl)
    return rows


def _busiest_crawl(row: dict[str, Any]) -> tuple[int, str, str]:
    return -(int(row["pending"]) + int(row["in_flight"])), str(row["spiderid"]), str(row["crawlid"])


def schedules(raw: Raw) -> dict[str, recrawl.SpiderSchedules]:
    """Each spider's re-crawl schedules (``stats.recrawl``), aged on Redis TIME, from its
    index and the counts and funnels of its crawls read."""
    found = {}
    for spider, index in sorted(raw.recrawl.items()):
        pairs = {crawlid: raw.crawl_counts.get((spider, crawlid), ({}, {}))
                 for crawlid, _ in index.due_ms}
        found[spider] = recrawl.SpiderSchedules.build(
            index, raw.redis_now_ms,
            {crawlid: recrawl.scheduled_of(pair[0]) for crawlid, pair in pairs.items()},
            {crawlid: pair[1] for crawlid, pair in pairs.items()})
    return found
