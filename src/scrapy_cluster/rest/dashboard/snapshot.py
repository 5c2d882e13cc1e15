"""``SnapshotBuilder``: everything the dashboard shows, read from Redis in FOUR round trips.

Read through ``stats.reader.ClusterReader``, one ``ReadBatch`` per round trip. Only indexes are
read, never the keyspace (no KEYS, no SCAN):

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
   work there), the exception counters, and each spider's re-crawl index ``<spiderid>:recrawl``
   (ZRANGE WITHSCORES of its ``stats.recrawl.MOST_CRAWLS`` earliest due crawls, and ZCARD);
4. one pipeline: the hour of status counters per source, each view's ready set, the counts and
   funnel of each active crawl and of each crawl read in 3 (``~scheduled``, ``fetched:304``),
   and the head item of a sub-queue of each crawl whose app is not known yet (the state hash
   of one with nothing queued; once per crawl: the app of a crawl is remembered while it is
   active).

Commands grow with nodes, domains, crawls and requests in flight; round trips do not
(``tests/test_cluster_read_budgets.py`` counts them). ``funnel`` (one crawl) is ONE round trip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier.model import Backlog
from scrapy_cluster.rest.dashboard import sections, tables
from scrapy_cluster.rest.dashboard.model import Policy, Raw, Snapshot
from scrapy_cluster.rest.dashboard.records import appid_of_item, parse_lease
from scrapy_cluster.stats import recrawl
from scrapy_cluster.stats.reader import BacklogSource, ClusterReader, Reply
from scrapy_cluster.stats.windows import window_seconds
from scrapy_cluster.text import as_text

COMPONENTS = ("kafka-monitor", "redis-monitor", "crawler", "rest")
HOUR_S = 3600
CHART_BUCKETS = 60


class SnapshotBuilder:
    """Builds ``model.Snapshot`` values (see module docstring). Not thread-safe: one build
    at a time (``cache.SnapshotCache`` guarantees it)."""

    def __init__(self, client: redis.Redis, frontier: BacklogSource,
                 settings: Mapping[str, Any], *,
                 clock: Callable[[], float] = time.time) -> None:
        self.reader = ClusterReader(client, frontier)
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
        backlog = self.reader.backlog()
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
        batch = self.reader.batch()
        redis_now_ms = batch.server_time_ms()
        heartbeats = {component: batch.heartbeats(component) for component in COMPONENTS}
        since_ms = int((now_s - self.policy.status_window_s) * 1000)
        replies: dict[str, Reply[Any]] = {
            "sources": batch.crawler_sources(),
            "error_names": batch.names(keys.crawler_error_stats()),
            "active_domains": batch.ranked(keys.crawler_domain_status_domains(), since_ms),
            "paused": batch.raw_hash(keys.domain_paused()),
            "breaker": batch.raw_hash(keys.circuit_breaker_state()),
            "throttles": batch.raw_hash(keys.domain_throttle_config()),
            "blacklist": batch.text_set(keys.domain_blacklist()),
            "leases": batch.raw_hash(keys.frontier_lease_items()),
            "timeouts": batch.scored(keys.crawl_timeouts()),
            "spiders": batch.text_set(keys.frontier_spiders()),
            "filtered_totals": batch.filtered_totals()}
        batch.run()
        parts = {name: reply.value for name, reply in replies.items()}
        parts["active_domains"] = sorted(parts["active_domains"])
        parts["paused"] = {as_text(domain): int(until) for domain, until in parts["paused"].items()}
        for name in ("breaker", "throttles"):
            parts[name] = {as_text(domain): raw for domain, raw in parts[name].items()}
        parts["leases"] = [lease for lease in map(parse_lease, parts["leases"].values()) if lease]
        parts["timeouts"] = {member: int(score) for member, score in parts["timeouts"]}
        parts["heartbeats"] = {component: reply.value for component, reply in heartbeats.items()}
        return {"redis_now_ms": redis_now_ms.value, "parts": parts}

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
        since_ms = int((now_s - self.policy.status_window_s) * 1000)
        batch = self.reader.batch()
        infos = batch.node_infos(members)
        source_names = {source: batch.names(source.prefix) for source in parts["sources"]}
        views = {spider: batch.ranked(keys.dispatch_views(spider)) for spider in parts["spiders"]}
        windows = {domain: batch.ranked(keys.crawler_domain_status_window(domain), since_ms)
                   for domain in parts["active_domains"]}
        last_errors = batch.values([keys.crawler_domain_last_error(domain) for domain in domains])
        subqueues = {key: batch.ranked(keys.domain_queue(*key)) for key in queued}
        recrawl = {spider: batch.recrawl_index(spider) for spider in parts["spiders"]}
        error_buckets = {name: batch.window_buckets(keys.crawler_error_stats(), name,
                                                    self.chart_window_s)
                         for name in parts["error_names"]}
        batch.run()
        return {"views": _values(views), "parts": {
            "node_infos": dict(zip(members, infos.value, strict=True)),
            "source_names": _values(source_names), "status_windows": _values(windows),
            "last_errors": dict(zip(domains, last_errors.value, strict=True)),
            "subqueues": _values(subqueues), "error_buckets": _values(error_buckets),
            "recrawl": _values(recrawl)}}

    def _series_and_crawls(self, first: dict[str, Any], backlog: Mapping[str, Backlog],
                           second: dict[str, Any]) -> dict[str, Any]:
        """Round trip 4."""
        parts = second["parts"]
        series = [(source, name) for source, names in parts["source_names"].items()
                  for name in names]
        views = [(spider, view) for spider, names in second["views"].items() for view in names]
        leases = first["parts"]["leases"]
        crawls = tables.crawls_with_work(parts["subqueues"], leases)
        for spider, index in parts["recrawl"].items():
            for crawlid, _ in index.due_ms:
                crawls.setdefault((spider, crawlid), None)
        apps = {crawl: self._apps[crawl] for crawl in crawls if crawl in self._apps}
        apps.update({(lease.spiderid, lease.crawlid): lease.appid for lease in leases
                     if lease.appid is not None})
        unknown = {crawl: head for crawl, head in crawls.items()
                   if crawl not in apps and head is not None}
        stateful = [crawl for crawl, head in crawls.items() if crawl not in apps and head is None]
        batch = self.reader.batch()
        buckets = {(source, name): batch.window_buckets(source.prefix, name, self.chart_window_s)
                   for source, name in series}
        ready_sets = [(spider, batch.scored(keys.dispatch_ready(spider, view)))
                      for spider, view in views]
        heads = {(spider, crawlid): batch.list_head(keys.domain_subqueue(spider, domain, priority,
                                                                         crawlid))
                 for (spider, crawlid), (domain, priority) in unknown.items()}
        states = {crawl: batch.raw_hash(keys.crawl_state(*crawl)) for crawl in stateful}
        counts = {(spider, crawlid): (batch.raw_hash(keys.crawl_counts(spider, crawlid)),
                                      batch.raw_hash(keys.crawl_funnel(spider, crawlid)))
                  for spider, crawlid in crawls}
        batch.run()
        ready: dict[str, dict[str, float]] = {}
        for spider, reply in ready_sets:
            earliest = ready.setdefault(spider, {})
            for domain, score in reply.value:
                earliest[domain] = min(earliest.get(domain, score), score)
        for crawl, head in heads.items():
            appid = appid_of_item(head.value)
            if appid is not None:
                apps[crawl] = appid
        for crawl, state in states.items():
            appid_raw = state.value.get(b"appid")
            if appid_raw:
                apps[crawl] = as_text(appid_raw)
        return {"status_buckets": _values(buckets), "ready": ready, "crawl_apps": apps,
                "crawl_counts": {crawl: (pair[0].value, pair[1].value)
                                 for crawl, pair in counts.items()}}

    # --- one crawl -------------------------------------------------------------------------
    def funnel(self, spiderid: str, crawlid: str) -> dict[str, Any]:
        """The crawl's URL funnel and what it has left. ONE round trip."""
        batch = self.reader.batch()
        funnel = batch.raw_hash(keys.crawl_funnel(spiderid, crawlid))
        counts = batch.raw_hash(keys.crawl_counts(spiderid, crawlid))
        batch.run()
        pending, in_flight, domains = tables.crawl_totals(counts.value)
        return {"spiderid": spiderid, "crawlid": crawlid, "funnel": tables.funnel(funnel.value),
                "pending": pending, "in_flight": in_flight, "domains": domains,
                "scheduled": recrawl.scheduled_of(counts.value),
                "not_modified_share": recrawl.not_modified_share(funnel.value)}


def _values(replies: Mapping[Any, Reply[Any]]) -> dict[Any, Any]:
    return {key: reply.value for key, reply in replies.items()}
