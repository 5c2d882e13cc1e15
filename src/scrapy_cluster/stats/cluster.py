"""Reading the cluster's statistics in the shapes of the Stats API, without scanning keys.

Every source is indexed: a component's counter names in ``stats:<component>:_names``, its live
nodes in ``stats:<component>:self`` (a ZSET scored by the last heartbeat), the crawlers' stats
prefixes in ``stats:crawler:_sources``, the queues in the frontier's domain indexes; all read
through ``stats.reader.ClusterReader``. A node whose heartbeat is older than HEARTBEAT_TIMEOUT
is dead: it leaves the answer and its heartbeat key and index entry are removed.

Window dictionaries follow the original: ``{"900": n, "3600": n, ..., "lifetime": n}`` with the
windows that counted nothing left out (``lifetime`` is always there).

Round trips of one answer (``tests/test_cluster_read_budgets.py`` counts them):

- ``kafka-monitor`` / ``redis-monitor``: 3 (nodes, names, counters; 2 while nothing was ever
  counted); ``rest``: 1 (nodes);
- ``machine``: 3 (crawler sources, their names, their counters; 1 without sources);
  ``spider``: those 3 and the crawler nodes, 4; ``queue``: 1 (the backlog script);
- ``crawler``: 5 (sources, names, counters, nodes, backlog); ``all``: the four components and
  the crawler, 11;
- plus one per component whose dead nodes are removed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.stats.reader import BacklogSource, ClusterReader, CrawlerSource
from scrapy_cluster.stats.windowed import LIFETIME, WindowedStats

TOTAL, FAIL = "total", "fail"
CrawlerCounts = dict[CrawlerSource, dict[str, dict[str, int]]]
"""``{source: {status: windows}}`` of every crawler stats source."""

def trimmed(windows: Mapping[str, int]) -> dict[str, int]:
    """The windows that counted something, plus ``lifetime``."""
    return {name: count for name, count in windows.items() if count or name == LIFETIME}


class ClusterStats:
    """Builds each stats answer body from Redis (see module docstring)."""

    def __init__(self, client: redis.Redis, settings: Mapping[str, Any], *,
                 frontier: BacklogSource | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        self.reader = ClusterReader(client, frontier)
        self.settings = settings
        self.clock = clock
        self.heartbeat_timeout_s = float(settings["HEARTBEAT_TIMEOUT"])

    def _windowed(self, prefix: str) -> WindowedStats:
        return WindowedStats.from_settings(self.settings, self.redis, key_prefix=prefix,
                                           clock=self.clock)

    # --- nodes ------------------------------------------------------------------------
    def live_members(self, component: str) -> list[str]:
        """Members (``<machine>:<parts>``) with a heartbeat younger than HEARTBEAT_TIMEOUT;
        older ones are removed with their heartbeat keys. One round trip, two with dead ones."""
        cutoff = self.clock() - self.heartbeat_timeout_s
        batch = self.reader.batch()
        live = batch.members(component, after_s=cutoff)
        dead = batch.members(component, until_s=cutoff)
        batch.run()
        if dead.value:
            self.reader.remove_nodes(component, dead.value)
        return live.value

    def nodes(self, component: str) -> dict[str, list[str]]:
        """``{machine: [node id, ...]}`` of the live nodes of a component."""
        found: dict[str, list[str]] = defaultdict(list)
        for member in self.live_members(component):
            machine, parts = keys.parse_heartbeat_member(member)
            found[machine].append(parts)
        return dict(found)

    # --- a monitor or the rest service ---------------------------------------------------
    def component(self, component: str) -> dict[str, Any]:
        """``{nodes, total, fail, plugins{name: windows}}`` (fail/total only when counted)."""
        answer: dict[str, Any] = {"nodes": self.nodes(component)}
        if component == "rest":
            return answer
        stats = self._windowed(keys.stats_key(component))
        (names,) = self.reader.names_of([stats.key_prefix])
        counts = self._read_windows([(stats, names)])[0] if names else {}
        plugins = {name: trimmed(windows) for name, windows in counts.items()
                   if name not in (TOTAL, FAIL)}
        for name in (TOTAL, FAIL):
            if name in counts:
                answer[name] = trimmed(counts[name])
        answer["plugins"] = plugins
        return answer

    def _read_windows(self, reads: list[tuple[WindowedStats, list[str]]],
                      ) -> list[dict[str, dict[str, int]]]:
        """The windows of each ``(stats, names)``: one round trip (none when nothing to read)."""
        batch = self.reader.batch()
        replies = [batch.windows(stats, names) for stats, names in reads]
        batch.run()
        return [reply.value for reply in replies]

    # --- crawlers --------------------------------------------------------------------------
    def _crawler_counts(self) -> CrawlerCounts:
        """``{source: {status: windows}}`` for every crawler stats source: three round trips
        (sources, their names, their windows), one without sources."""
        batch = self.reader.batch()
        found = batch.crawler_sources()
        batch.run()
        sources = found.value
        windowed = [self._windowed(source.prefix) for source in sources]
        names = self.reader.names_of([stats.key_prefix for stats in windowed])
        counts = self._read_windows(list(zip(windowed, names, strict=True)))
        return dict(zip(sources, counts, strict=True))

    def spiders(self, counts: CrawlerCounts | None = None) -> dict[str, Any]:
        """``{unique_spider_count, total_spider_count, <spiderid>: {count, <status>: windows}}``."""
        counts = self._crawler_counts() if counts is None else counts
        live: dict[str, int] = defaultdict(int)
        for member in self.live_members("crawler"):
            spider = keys.crawler_member_spider(member)
            if spider is not None:
                live[spider] += 1
        per_spider: dict[str, dict[str, Any]] = {}
        for source, statuses in counts.items():
            merged = per_spider.setdefault(source.spider, {})
            _add_windows(merged, statuses)
        answer: dict[str, Any] = {
            "unique_spider_count": sum(1 for count in live.values() if count),
            "total_spider_count": sum(live.values()),
        }
        for spider in sorted(set(per_spider) | set(live)):
            statuses = per_spider.get(spider, {})
            answer[spider] = {"count": live.get(spider, 0),
                              **{status: trimmed(windows) for status, windows in
                                 sorted(statuses.items())}}
        return answer

    def machines(self, counts: CrawlerCounts | None = None) -> dict[str, Any]:
        """``{count, <hostname>: {<status>: windows}}`` summed over the spiders of each host."""
        counts = self._crawler_counts() if counts is None else counts
        per_host: dict[str, dict[str, Any]] = {}
        for source, statuses in counts.items():
            _add_windows(per_host.setdefault(source.host, {}), statuses)
        answer: dict[str, Any] = {"count": len(per_host)}
        for host in sorted(per_host):
            answer[host] = {status: trimmed(windows)
                            for status, windows in sorted(per_host[host].items())}
        return answer

    def queues(self) -> dict[str, Any]:
        """``{queue_<spiderid>: {domains: [{domain, backlog}], spider_backlog, num_domains},
        total_backlog}``; domains largest backlog first."""
        backlog = self.reader.backlog()
        answer: dict[str, Any] = {}
        for spider, queued in backlog.items():
            domains = sorted(queued.domains.items(), key=lambda item: (-item[1], item[0]))
            answer[f"queue_{spider}"] = {
                "domains": [{"domain": domain, "backlog": count} for domain, count in domains],
                "spider_backlog": queued.total, "num_domains": len(queued.domains)}
        answer["total_backlog"] = sum(queued.total for queued in backlog.values())
        return answer

    def crawler(self) -> dict[str, Any]:
        """``{spiders, machines, queues}`` (the ``crawler`` stats type)."""
        counts = self._crawler_counts()
        return {"spiders": self.spiders(counts), "machines": self.machines(counts),
                "queues": self.queues()}

    def answer(self, stats_type: str) -> dict[str, Any]:
        """The body of a stats answer of ``stats_type`` (without appid/uuid/server_time)."""
        if stats_type in ("kafka-monitor", "redis-monitor", "rest"):
            return self.component(stats_type)
        if stats_type == "spider":
            return {"spiders": self.spiders()}
        if stats_type == "machine":
            return {"machines": self.machines()}
        if stats_type == "queue":
            return {"queues": self.queues()}
        if stats_type == "crawler":
            return self.crawler()
        if stats_type == "all":
            return {"kafka-monitor": self.component("kafka-monitor"),
                    "redis-monitor": self.component("redis-monitor"),
                    "crawler": self.crawler(), "rest": self.component("rest")}
        raise ValueError(f"unknown stats type {stats_type!r}")


STATS_TYPES = ("all", "kafka-monitor", "redis-monitor", "crawler", "spider", "machine", "queue",
               "rest")


def _add_windows(target: dict[str, Any], statuses: Mapping[str, Mapping[str, int]]) -> None:
    for status, windows in statuses.items():
        merged = target.setdefault(status, {})
        for window, count in windows.items():
            merged[window] = merged.get(window, 0) + count
