"""``SnapshotBuilder``: everything the dashboard shows, read from Redis in FOUR round trips.

Only indexes are read, never the keyspace (no KEYS, no SCAN):

1. one pipeline: the heartbeat indexes ``stats:<component>:self``, the crawler stats sources
   ``stats:crawler:_sources``, the exception names ``stats:crawler-errors:_names``, the
   recently active domains ``crawler:domain_status:domains``, ``domain-config:paused``,
   ``circuit-breaker:state``, ``domain-config:throttle``, ``domain-config:blacklist``, the
   leases ``frontier:lease_items`` (O(requests in flight)), the crawl expiries
   ``redis-monitor:timeouts``, ``frontier:spiders`` and the lifetime totals of refused and
   filtered URLs ``stats:crawl-funnel:filtered``;
2. the frontier's backlog script (``Frontier.backlog``: O(domains + sub-queues), lengths only);
3. one pipeline: the nodes' ``stats:<component>:info:<member>`` (one MGET), each source's
   status names, each spider's dispatch views, each active domain's status window, the
   domains' last errors (one MGET), each queued domain's sub-queue index (which crawls have
   work there) and the exception counters;
4. one pipeline: the hour of status counters per source, each view's ready set, each active
   crawl's counts and funnel, and the head item of a sub-queue of each crawl whose app is
   not known yet (once per crawl: the app of a crawl is remembered while it is active).

Commands grow with nodes, domains, crawls and requests in flight; round trips do not.
``funnel`` (one crawl) is ONE round trip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier.model import Backlog
from scrapy_cluster.rest.dashboard import sections, tables
from scrapy_cluster.rest.dashboard.model import Policy, Raw, Snapshot
from scrapy_cluster.rest.dashboard.records import appid_of_item, parse_lease
from scrapy_cluster.stats.windows import window_seconds

COMPONENTS = ("kafka-monitor", "redis-monitor", "crawler", "rest")
HOUR_S = 3600
CHART_BUCKETS = 60


class BacklogSource(Protocol):
    """What the builder needs of ``Frontier``."""

    def backlog(self, most_domains: int = ...) -> dict[str, Backlog]: ...


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class SnapshotBuilder:
    """Builds ``model.Snapshot`` values (see module docstring). Not thread-safe: one build
    at a time (``cache.SnapshotCache`` guarantees it)."""

    def __init__(self, client: redis.Redis, frontier: BacklogSource,
                 settings: Mapping[str, Any], *,
                 clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        self.frontier = frontier
        self.clock = clock
        self.policy = Policy.from_settings(settings)
        windows = sorted(window_seconds(window) for window in settings["STATS_TIMES"])
        self.chart_window_s = HOUR_S if HOUR_S in windows else windows[0]
        self.nodes = sections.NodeMemory()
        self._apps: dict[tuple[str, str], str] = {}

    # --- the snapshot ---------------------------------------------------------------------
    def build(self) -> Snapshot:
        now_s = self.clock()
        first = self._indexes(now_s)
        backlog = self.frontier.backlog()
        second = self._details(first, backlog, now_s)
        third = self._series_and_crawls(first, backlog, second)
        raw = Raw(now_s=now_s, redis_now_ms=first["redis_now_ms"], backlog=backlog,
                           chart_window_s=self.chart_window_s, **first["parts"],
                           **second["parts"], **third)
        snapshot = sections.assemble(raw, self.policy, self.nodes)
        self._apps = {(crawl["spiderid"], crawl["crawlid"]): crawl["appid"]
                      for crawl in snapshot.crawls if crawl["appid"] is not None}
        return snapshot

    def _indexes(self, now_s: float) -> dict[str, Any]:
        """Round trip 1."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.time()
        for component in COMPONENTS:
            pipe.zrange(keys.heartbeat_index(component), 0, -1, withscores=True)
        pipe.smembers(keys.crawler_stats_sources())
        pipe.smembers(keys.stats_names_index(keys.crawler_error_stats()))
        since_ms = int((now_s - self.policy.status_window_s) * 1000)
        pipe.zrangebyscore(keys.crawler_domain_status_domains(), since_ms, "+inf")
        pipe.hgetall(keys.domain_paused())
        pipe.hgetall(keys.circuit_breaker_state())
        pipe.hgetall(keys.domain_throttle_config())
        pipe.smembers(keys.domain_blacklist())
        pipe.hgetall(keys.frontier_lease_items())
        pipe.zrange(keys.crawl_timeouts(), 0, -1, withscores=True)
        pipe.smembers(keys.frontier_spiders())
        pipe.hgetall(keys.funnel_filtered_totals())
        replies = pipe.execute()
        seconds, micros = replies[0]
        heartbeats = {component: [(_text(member), float(score)) for member, score in reply]
                      for component, reply in zip(COMPONENTS, replies[1:5], strict=True)}
        (sources, error_names, active, paused, breaker, throttles, blacklist, leases,
         timeouts, spiders, filtered_totals) = replies[5:]
        parts = {
            "heartbeats": heartbeats,
            "sources": sorted(_text(source) for source in sources),
            "error_names": sorted(_text(name) for name in error_names),
            "active_domains": sorted(_text(domain) for domain in active),
            "paused": {_text(domain): int(until) for domain, until in paused.items()},
            "breaker": {_text(domain): raw for domain, raw in breaker.items()},
            "throttles": {_text(domain): raw for domain, raw in throttles.items()},
            "blacklist": sorted(_text(domain) for domain in blacklist),
            "leases": [lease for lease in map(parse_lease, leases.values()) if lease],
            "timeouts": {_text(member): int(score) for member, score in timeouts},
            "spiders": sorted(_text(spider) for spider in spiders),
            "filtered_totals": filtered_totals,
        }
        return {"redis_now_ms": int(seconds) * 1000 + int(micros) // 1000, "parts": parts}

    def _details(self, first: dict[str, Any], backlog: Mapping[str, Backlog],
                 now_s: float) -> dict[str, Any]:
        """Round trip 3 (the backlog script was 2)."""
        parts = first["parts"]
        members = [(component, member) for component, rows in parts["heartbeats"].items()
                   for member, _ in rows]
        domains = sorted(set(parts["active_domains"])
                         | {domain for queued in backlog.values() for domain in queued.domains})
        queued = [(spider, domain) for spider, queued in backlog.items()
                  for domain in queued.domains]
        pipe = self.redis.pipeline(transaction=False)
        if members:
            pipe.mget([keys.node_info(component, member) for component, member in members])
        for source in parts["sources"]:
            pipe.smembers(keys.stats_names_index(keys.stats_key("crawler", *source.split(":", 1))))
        for spider in parts["spiders"]:
            pipe.zrange(keys.dispatch_views(spider), 0, -1)
        since_ms = int((now_s - self.policy.status_window_s) * 1000)
        for domain in parts["active_domains"]:
            pipe.zrangebyscore(keys.crawler_domain_status_window(domain), since_ms, "+inf")
        if domains:
            pipe.mget([keys.crawler_domain_last_error(domain) for domain in domains])
        for spider, domain in queued:
            pipe.zrange(keys.domain_queue(spider, domain), 0, -1)
        for name in parts["error_names"]:
            pipe.hgetall(keys.stats_name(keys.crawler_error_stats(), name, self.chart_window_s))
        replies = iter(pipe.execute())
        infos = next(replies) if members else []
        source_names = {source: sorted(_text(name) for name in next(replies))
                        for source in parts["sources"]}
        views = {spider: [_text(view) for view in next(replies)] for spider in parts["spiders"]}
        windows = {domain: [_text(member) for member in next(replies)]
                   for domain in parts["active_domains"]}
        last_errors = dict(zip(domains, next(replies), strict=True)) if domains else {}
        subqueues = {key: [_text(member) for member in next(replies)] for key in queued}
        error_buckets = {name: next(replies) for name in parts["error_names"]}
        return {"views": views, "parts": {
            "node_infos": dict(zip(members, infos, strict=True)),
            "source_names": source_names, "status_windows": windows,
            "last_errors": last_errors, "subqueues": subqueues, "error_buckets": error_buckets}}

    def _series_and_crawls(self, first: dict[str, Any], backlog: Mapping[str, Backlog],
                           second: dict[str, Any]) -> dict[str, Any]:
        """Round trip 4."""
        parts = second["parts"]
        series = [(source, name) for source, names in parts["source_names"].items()
                  for name in names]
        views = [(spider, view) for spider, names in second["views"].items() for view in names]
        leases = first["parts"]["leases"]
        crawls = tables.crawls_with_work(parts["subqueues"], leases)
        apps = {crawl: self._apps[crawl] for crawl in crawls if crawl in self._apps}
        apps.update({(lease.spiderid, lease.crawlid): lease.appid for lease in leases
                     if lease.appid is not None})
        unknown = {crawl: head for crawl, head in crawls.items()
                   if crawl not in apps and head is not None}
        pipe = self.redis.pipeline(transaction=False)
        for source, name in series:
            prefix = keys.stats_key("crawler", *source.split(":", 1))
            pipe.hgetall(keys.stats_name(prefix, name, self.chart_window_s))
        for spider, view in views:
            pipe.zrange(keys.dispatch_ready(spider, view), 0, -1, withscores=True)
        for (spider, crawlid), (domain, priority) in unknown.items():
            pipe.lindex(keys.domain_subqueue(spider, domain, priority, crawlid), 0)
        for spider, crawlid in crawls:
            pipe.hgetall(keys.crawl_counts(spider, crawlid))
            pipe.hgetall(keys.crawl_funnel(spider, crawlid))
        replies = iter(pipe.execute())
        buckets = {key: next(replies) for key in series}
        ready: dict[str, dict[str, float]] = {}
        for spider, _ in views:
            earliest = ready.setdefault(spider, {})
            for domain, score in next(replies):
                name = _text(domain)
                earliest[name] = min(earliest.get(name, float(score)), float(score))
        for crawl in unknown:
            appid = appid_of_item(next(replies))
            if appid is not None:
                apps[crawl] = appid
        counts = {crawl: (next(replies), next(replies)) for crawl in crawls}
        return {"status_buckets": buckets, "ready": ready, "crawl_apps": apps,
                "crawl_counts": counts}

    # --- one crawl -------------------------------------------------------------------------
    def funnel(self, spiderid: str, crawlid: str) -> dict[str, Any]:
        """The crawl's URL funnel and what it has left. ONE round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.crawl_funnel(spiderid, crawlid))
        pipe.hgetall(keys.crawl_counts(spiderid, crawlid))
        funnel, counts = pipe.execute()
        pending, in_flight, domains = tables.crawl_totals(counts)
        return {"spiderid": spiderid, "crawlid": crawlid, "funnel": tables.funnel(funnel),
                "pending": pending, "in_flight": in_flight, "domains": domains}
