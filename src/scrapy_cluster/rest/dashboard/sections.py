"""Turning what ``snapshot.SnapshotBuilder`` read into the dashboard's overview. Pure: no I/O.

Units: times are epoch seconds (``*_s``) or milliseconds (``*_ms``), rates are per second.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from scrapy_cluster import keys
from scrapy_cluster.rest.dashboard import classify, tables
from scrapy_cluster.rest.dashboard.model import Policy, Raw, Snapshot, json_object
from scrapy_cluster.stats import reasons

OFFLINE_KEEP_S = 600
"""A node no longer alive is still shown (offline or stopped) this long after its last beat."""
NODES_REMEMBERED = 1000
TOP_ERROR_DOMAINS = 50
INFO_FIELDS = ("version", "engine", "spiders", "cpu_percent", "rss_bytes", "started")


class NodeMemory:
    """Remembers nodes seen, so one that left its heartbeat index stays listed for
    OFFLINE_KEEP_S after its last beat: ``stopped`` when it left while alive (a clean stop
    removes its heartbeat at once), else offline (its heartbeat timed out)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], dict[str, Any]] = {}

    def merge(self, rows: list[dict[str, Any]], now_s: float) -> list[dict[str, Any]]:
        present = {(row["component"], row["member"]) for row in rows}
        for node, row in self._seen.items():
            if node not in present and row["in_index"]:
                self._seen[node] = {**row, "stopped": bool(row["alive"]), "alive": False,
                                    "in_index": False}
        for row in rows:
            self._seen[(row["component"], row["member"])] = row
        gone = [{**row, "age_s": round(now_s - row["last_seen_s"], 1)}
                for node, row in self._seen.items() if node not in present
                and now_s - row["last_seen_s"] < OFFLINE_KEEP_S]
        keep = sorted(self._seen.items(), key=lambda item: -item[1]["last_seen_s"])
        self._seen = {node: row for node, row in keep[:NODES_REMEMBERED]
                      if now_s - row["last_seen_s"] < OFFLINE_KEEP_S}
        return sorted(rows + gone, key=lambda row: (row["component"], row["member"]))


# --- nodes ---------------------------------------------------------------------------------
def nodes(raw: Raw, policy: Policy, memory: NodeMemory) -> list[dict[str, Any]]:
    rows = []
    for component, members in raw.heartbeats.items():
        for member, beat_s in members:
            info = json_object(raw.node_infos.get((component, member))) or {}
            row = {"component": component, "member": member,
                   "machine": keys.parse_heartbeat_member(member)[0],
                   "alive": raw.now_s - beat_s < policy.heartbeat_timeout_s,
                   "last_seen_s": beat_s, "age_s": round(max(0.0, raw.now_s - beat_s), 1),
                   "in_index": True, "stopped": False,
                   **{name: info.get(name) for name in INFO_FIELDS}}
            spider = keys.crawler_member_spider(member) if component == "crawler" else None
            if row["spiders"] is None and spider is not None:
                row["spiders"] = [spider]
            rows.append(row)
    return memory.merge(rows, raw.now_s)


# --- throughput ----------------------------------------------------------------------------
def throughput(raw: Raw) -> dict[str, Any]:
    """Responses per status code per bucket of the last chart window (an hour: 60 one-minute
    buckets), cluster-wide and per crawler host, from the crawlers' rolling windows."""
    bucket_s = raw.chart_window_s / 60
    current = math.floor(raw.now_s / bucket_s)
    first = current - 59
    cluster: dict[str, list[int]] = {}
    per_node: dict[str, dict[str, list[int]]] = {}
    for (source, status), buckets in raw.status_buckets.items():
        host = source.host
        series = [0] * 60
        for number, hits in buckets.items():
            try:
                index = int(number) - first
            except ValueError:
                continue
            if 0 <= index < 60:
                series[index] += int(hits)
        for target in (cluster.setdefault(status, [0] * 60),
                       per_node.setdefault(host, {}).setdefault(status, [0] * 60)):
            for index, count in enumerate(series):
                target[index] += count
    return {"bucket_s": bucket_s, "window_s": raw.chart_window_s,
            "times_s": [int((first + index) * bucket_s) for index in range(60)],
            "statuses": dict(sorted(cluster.items())),
            "per_node": {host: dict(sorted(series.items()))
                         for host, series in sorted(per_node.items())}}


# --- errors --------------------------------------------------------------------------------
def domain_statuses(raw: Raw) -> dict[str, Counter[int]]:
    """Statuses per active domain in the status window (members ``<status>:<ms>:...``)."""
    found: dict[str, Counter[int]] = {}
    for domain, members in raw.status_windows.items():
        found[domain] = Counter(status for status in map(keys.crawler_domain_status_of_member,
                                                         members) if status is not None)
    return found


def errors(raw: Raw, policy: Policy, statuses: Mapping[str, Counter[int]]) -> dict[str, Any]:
    by_status: Counter[int] = Counter()
    by_domain: list[dict[str, Any]] = []
    for domain, seen in statuses.items():
        failed = {status: count for status, count in seen.items() if status in policy.errors}
        by_status.update(failed)
        if failed:
            by_domain.append({"domain": domain, "errors": sum(failed.values()),
                              "responses": sum(seen.values()),
                              "statuses": {str(code): n for code, n in sorted(failed.items())}})
    by_domain.sort(key=lambda row: (-int(row["errors"]), str(row["domain"])))
    oldest = math.floor(raw.now_s / (raw.chart_window_s / 60)) - 59
    by_exception = {name: sum(int(hits) for number, hits in buckets.items()
                              if _bucket_number(number) >= oldest)
                    for name, buckets in raw.error_buckets.items()}
    return {"window_s": policy.status_window_s, "exceptions_window_s": raw.chart_window_s,
            "by_status": {str(code): n for code, n in sorted(by_status.items())},
            "by_exception": {name: n for name, n in sorted(by_exception.items()) if n},
            "by_domain": by_domain[:TOP_ERROR_DOMAINS]}


def _bucket_number(number: bytes | str) -> int:
    try:
        return int(number)
    except ValueError:
        return -(2**62)


# --- why nothing happens --------------------------------------------------------------------
def dropped_urls(raw: Raw) -> dict[str, dict[str, int]]:
    """``{refused: {reason: n}, filtered: {reason: n}}``: URLs crawlers refused and URLs
    filtered before they were queued, over the cluster's lifetime (``stats.reasons``)."""
    dropped = reasons.DroppedUrls.from_totals(raw.filtered_totals)
    return {"refused": dropped.refused, "filtered": dropped.filtered}


def unserved(raw: Raw, policy: Policy) -> dict[str, int]:
    """``{spiderid: requests queued}`` of the spiders with work that no live crawler runs."""
    return reasons.unserved_backlog({spider: queued.total for spider, queued in
                                     raw.backlog.items()}, tables.live_spiders(raw, policy))


# --- all -----------------------------------------------------------------------------------
def assemble(raw: Raw, policy: Policy, memory: NodeMemory) -> Snapshot:
    statuses = domain_statuses(raw)
    domain_rows = tables.domains(raw, policy, statuses)
    crawl_rows = tables.crawls(raw)
    recrawl = {spider: found.summary() for spider, found in tables.schedules(raw).items()
               if found.crawls}
    node_rows = nodes(raw, policy, memory)
    responses = sum(sum(seen.values()) for seen in statuses.values())
    summary = {
        "backlog": sum(backlog.total for backlog in raw.backlog.values()),
        "in_flight": len(raw.leases), "domains": len(domain_rows), "crawls": len(crawl_rows),
        "nodes_alive": sum(1 for row in node_rows if row["alive"]),
        "nodes_offline": sum(1 for row in node_rows if not row["alive"] and not row["stopped"]),
        "nodes_stopped": sum(1 for row in node_rows if row["stopped"]),
        "rate_rps": round(responses / policy.status_window_s, 4)
        if policy.status_window_s > 0 else 0.0,
        "paused": sum(1 for row in domain_rows if row["state"] == classify.PAUSED),
        "halted": sum(1 for row in domain_rows if row["state"] == classify.HALTED),
        **dropped_urls(raw), "unserved": unserved(raw, policy),
        "scheduled": sum(row["scheduled"] for row in recrawl.values()),
        "overdue_crawls": sum(row["overdue_crawls"] for row in recrawl.values()),
        "oldest_overdue_s": max((row["oldest_overdue_s"] for row in recrawl.values()),
                                default=0.0)}
    config = {"throttles": [{"domain": domain, **(json_object(value) or {})}
                            for domain, value in sorted(raw.throttles.items())],
              "blacklist": raw.blacklist,
              "paused": [{"domain": domain, **tables.pause_of(domain, raw)}
                         for domain in sorted(set(raw.paused) | set(raw.breaker))]}
    overview = {"generated_at_ms": int(raw.now_s * 1000), "summary": summary,
                "nodes": node_rows, "throughput": throughput(raw),
                "errors": errors(raw, policy, statuses), "config": config,
                "spiders": raw.spiders, "recrawl": recrawl}
    return Snapshot(int(raw.now_s * 1000), overview, domain_rows, crawl_rows)
