"""Prometheus metrics of the cluster, served by the Rest service at ``GET /metrics``.

Two sources, one private ``CollectorRegistry`` (docs/metrics.md lists every metric):

- **Cluster-wide values read from Redis at scrape time** (``MetricsReader``, through
  ``stats.reader.ClusterReader``) by ``ClusterCollector``: live nodes
  per component, the frontier's backlog (per spider, and per domain for the
  METRICS_TOP_DOMAINS largest of each spider), leased requests, paused and halted domains,
  the lifetime counters of the crawlers (responses by status, errors by exception), of the
  Kafka Monitor and of the Redis Monitor, the ``enqueue_to_fetch_seconds`` histogram the
  crawlers write, and the re-crawl schedules per spider (``stats.recrawl``: URLs scheduled,
  overdue crawls and the age of their oldest overdue URL, the downloads and ``304`` answers of
  the crawls with a schedule). Every Rest process exposes the same cluster values; Prometheus should
  scrape one of them (or aggregate with ``max``), not sum them.
- **This Rest process's own traffic**: HTTP requests, ``/feed`` outcomes and the time to an
  answer, as ordinary prometheus-client counters and a histogram.

Redis round trips of one scrape, whatever the size of the cluster (nothing is scanned and
nothing is written; dead heartbeats are only left uncounted; ``tests/
test_cluster_read_budgets.py`` counts them):

1. one pipeline: Redis TIME, ZCOUNT of each heartbeat index, HVALS of the pauses and of the
   circuit breaker's states, ZCARD of the leases, HGETALL of the histogram and of the refused
   and filtered URL totals, SMEMBERS of the crawler stats sources, of ``frontier:spiders`` and
   of the name indexes of both monitors and of the crawler errors;
2. the frontier's backlog script (``Frontier.backlog``: queue lengths, never items);
3. one pipeline: SMEMBERS of the name index of each crawler stats source, ZRANGE WITHSCORES
   (the ``stats.recrawl.MOST_CRAWLS`` earliest due) and ZCARD of each spider's
   ``<spiderid>:recrawl`` (nothing to read: skipped);
4. one pipeline: MGET of every lifetime counter named by those indexes, HGET of ``~scheduled``
   in the counts hash and HGETALL of the funnel of each crawl read in 3 (nothing to read:
   skipped).

A Redis outage never fails a scrape: ``scrapy_cluster_redis_up`` is 0, the Redis-read
families are left out, and the outage is logged once (and its end once).
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from scrapy_cluster import keys
from scrapy_cluster.errors import FrontierError
from scrapy_cluster.frontier.model import Backlog
from scrapy_cluster.frontier.pause import HALT_UNTIL_MS
from scrapy_cluster.outage import is_redis_outage
from scrapy_cluster.stats.cluster import FAIL, TOTAL
from scrapy_cluster.stats.histogram import (
    ENQUEUE_TO_FETCH,
    SECONDS_BUCKETS,
    HistogramSnapshot,
    parse_snapshot,
)
from scrapy_cluster.stats.reader import BacklogSource, ClusterReader, CrawlerSource, ScheduleRead
from scrapy_cluster.stats.reasons import REFUSED_REASONS
from scrapy_cluster.stats.recrawl import SpiderSchedules

COMPONENTS = ("crawler", "kafka-monitor", "redis-monitor", "rest")
MONITORS = ("kafka-monitor", "redis-monitor")
BREAKER_STATES = ("paused", "halted")
ENDPOINTS = frozenset({"/", "/feed", "/poll", "/metrics", "/openapi.json", "/docs", "/ui"})
FEED_OUTCOMES = frozenset({"accepted", "invalid", "unavailable", "answered", "poll_id"})
ANSWER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
OTHER = "other"
REFUSED, FILTERED = "refused", "filtered"


@dataclass(frozen=True)
class ClusterReading:
    """What one scrape read from Redis (lifetime counters keyed as in their indexes)."""

    live_nodes: dict[str, int]
    paused_until_ms: list[int]
    breaker_states: list[str]
    leased: int
    backlog: dict[str, Backlog]
    enqueue_to_fetch: HistogramSnapshot
    responses: dict[tuple[str, str], int]
    monitors: dict[str, dict[str, int]]
    errors: dict[str, int]
    filtered: dict[tuple[str, str], int] = field(default_factory=dict)
    """``{(spider, reason): URLs}`` refused or filtered (``keys.funnel_filtered_totals``)."""
    recrawl: dict[str, SpiderSchedules] = field(default_factory=dict)
    """Re-crawl schedules per spider, aged on Redis TIME (``stats.recrawl``)."""


class MetricsReader:
    """Reads a ``ClusterReading`` in at most four round trips (module docstring)."""

    def __init__(self, client: redis.Redis, frontier: BacklogSource, *, heartbeat_timeout_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.reader = ClusterReader(client, frontier)
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.clock = clock
        self.counter_prefixes = [*(keys.stats_key(monitor) for monitor in MONITORS),
                                 keys.crawler_error_stats()]

    def read(self) -> ClusterReading:
        now_s = self.clock()
        batch = self.reader.batch()
        redis_now_ms = batch.server_time_ms()
        spiders = batch.text_set(keys.frontier_spiders())
        live = {component: batch.live_count(component, now_s - self.heartbeat_timeout_s)
                for component in COMPONENTS}
        paused = batch.hash_values(keys.domain_paused())
        states = batch.hash_values(keys.circuit_breaker_state())
        leased = batch.cardinality(keys.frontier_leases())
        histogram = batch.raw_hash(keys.histogram(ENQUEUE_TO_FETCH))
        filtered = batch.filtered_totals()
        sources = batch.crawler_sources()
        names = {prefix: batch.names(prefix) for prefix in self.counter_prefixes}
        batch.run()
        backlog = self.reader.backlog()
        schedules = ScheduleRead(spiders.value, funnels=True)
        counters = self.reader.lifetime_totals(
            sources.value, {prefix: reply.value for prefix, reply in names.items()},
            rider=schedules)
        return ClusterReading(
            live_nodes={component: reply.value for component, reply in live.items()},
            paused_until_ms=[int(until) for until in paused.value],
            breaker_states=[_breaker_state(raw) for raw in states.value], leased=leased.value,
            backlog=backlog,
            enqueue_to_fetch=parse_snapshot(histogram.value, SECONDS_BUCKETS),
            responses=_per_spider(counters, sources.value),
            errors=counters.get(keys.crawler_error_stats(), {}),
            monitors={monitor: counters.get(keys.stats_key(monitor), {}) for monitor in MONITORS},
            filtered={keys.parse_funnel_filtered_field(name): int(count)
                      for name, count in filtered.value.items()},
            recrawl=schedules.result(redis_now_ms.value))


def _breaker_state(raw: bytes | str) -> str:
    try:
        return str(orjson.loads(raw).get("state", OTHER))
    except (orjson.JSONDecodeError, AttributeError):
        return OTHER


def _per_spider(counters: Mapping[str, Mapping[str, int]],
                sources: Sequence[CrawlerSource]) -> dict[tuple[str, str], int]:
    """Crawler response counters summed over hosts: ``{(spider, status): count}``."""
    summed: Tally[tuple[str, str]] = Tally()
    for source in sources:
        for status, count in counters.get(source.prefix, {}).items():
            summed[(source.spider, status)] += count
    return dict(sorted(summed.items()))


def cluster_families(reading: ClusterReading, *, top_domains: int,
                     now_ms: int) -> Iterator[Metric]:
    """The metric families of one reading (pure; see docs/metrics.md)."""
    nodes = GaugeMetricFamily("scrapy_cluster_live_nodes", "Processes with a heartbeat younger "
                              "than HEARTBEAT_TIMEOUT, per component.", labels=["component"])
    for component, count in reading.live_nodes.items():
        nodes.add_metric([component], count)
    yield nodes
    yield from _backlog_families(reading.backlog, top_domains)
    yield GaugeMetricFamily("scrapy_cluster_leased_requests", "Requests handed to a crawler "
                            "and not yet acknowledged (in flight).", value=reading.leased)
    halted = sum(1 for until in reading.paused_until_ms if until >= HALT_UNTIL_MS)
    paused = sum(1 for until in reading.paused_until_ms if now_ms < until < HALT_UNTIL_MS)
    yield GaugeMetricFamily("scrapy_cluster_paused_domains", "Domains no crawler dispatches "
                            "until their pause ends (circuit breaker or Retry-After).", value=paused)
    yield GaugeMetricFamily("scrapy_cluster_halted_domains", "Domains halted by the circuit "
                            "breaker until a domain-resume request.", value=halted)
    breaker = GaugeMetricFamily("scrapy_cluster_circuit_breaker_domains", "Domains the "
                                "circuit breaker has paused or halted.", labels=["state"])
    states = Tally(reading.breaker_states)
    for state in sorted({*BREAKER_STATES, *states}):
        breaker.add_metric([state], states[state])
    yield breaker
    yield from _counter_families(reading)
    yield _histogram_family(reading.enqueue_to_fetch)
    yield from _recrawl_families(reading.recrawl, top_domains)


def _backlog_families(backlog: Mapping[str, Backlog], top_domains: int) -> Iterator[Metric]:
    total = GaugeMetricFamily("scrapy_cluster_backlog_requests", "Requests queued in the "
                              "frontier, per spider.", labels=["spider"])
    domains = GaugeMetricFamily("scrapy_cluster_backlog_domains", "Domains with queued "
                                "requests, per spider.", labels=["spider"])
    top = GaugeMetricFamily("scrapy_cluster_domain_backlog_requests", "Requests queued for "
                            "the METRICS_TOP_DOMAINS largest domains of each spider.",
                            labels=["spider", "domain"])
    for spider, queued in backlog.items():
        total.add_metric([spider], queued.total)
        domains.add_metric([spider], len(queued.domains))
        largest = sorted(queued.domains.items(), key=lambda item: (-item[1], item[0]))
        for domain, count in largest[:max(0, top_domains)]:
            top.add_metric([spider, domain], count)
    yield from (total, domains, top)


def _recrawl_families(schedules: Mapping[str, SpiderSchedules],
                      top_crawls: int) -> Iterator[Metric]:
    """Per spider: crawls with a schedule, URLs scheduled, overdue crawls, the oldest overdue
    age, and the downloads and 304 answers of the crawls read; per crawl, the oldest overdue
    age of the ``top_crawls`` (METRICS_TOP_DOMAINS) most overdue crawls of each spider."""
    crawls = GaugeMetricFamily("scrapy_cluster_recrawl_crawls", "Crawls with a re-crawl "
                               "schedule, per spider.", labels=["spider"])
    scheduled = GaugeMetricFamily("scrapy_cluster_recrawl_scheduled_urls", "URLs waiting in "
                                  "re-crawl schedules (not yet queued again), per spider.",
                                  labels=["spider"])
    overdue = GaugeMetricFamily("scrapy_cluster_recrawl_overdue_crawls", "Crawls with a "
                                "re-crawl URL due and not yet queued again, per spider.",
                                labels=["spider"])
    oldest = GaugeMetricFamily("scrapy_cluster_recrawl_oldest_overdue_seconds", "Age of the "
                               "oldest re-crawl URL due and not yet queued again, per spider "
                               "(0: none).", labels=["spider"])
    per_crawl = GaugeMetricFamily("scrapy_cluster_recrawl_crawl_overdue_seconds", "Age of the "
                                  "oldest overdue re-crawl URL of the METRICS_TOP_DOMAINS most "
                                  "overdue crawls of each spider.", labels=["spider", "crawlid"])
    fetched = GaugeMetricFamily("scrapy_cluster_recrawl_fetched_pages", "Downloads of the "
                                "crawls with a re-crawl schedule, per spider.", labels=["spider"])
    unchanged = GaugeMetricFamily("scrapy_cluster_recrawl_not_modified_pages", "304 Not "
                                  "Modified answers among those downloads, per spider.",
                                  labels=["spider"])
    for spider, found in sorted(schedules.items()):
        crawls.add_metric([spider], found.crawls)
        scheduled.add_metric([spider], found.scheduled)
        late = found.overdue()
        overdue.add_metric([spider], len(late))
        oldest.add_metric([spider], found.oldest_overdue_s)
        for crawl in late[:max(0, top_crawls)]:
            per_crawl.add_metric([spider, crawl.crawlid], found.overdue_s(crawl))
        fetched.add_metric([spider], found.fetched)
        unchanged.add_metric([spider], found.not_modified)
    yield from (crawls, scheduled, overdue, oldest, per_crawl, fetched, unchanged)


def _counter_families(reading: ClusterReading) -> Iterator[Metric]:
    pages = CounterMetricFamily("scrapy_cluster_crawled_pages", "Downloads by response status "
                                "(0: no response), per spider, over the cluster's lifetime.",
                                labels=["spider", "status"])
    for (spider, status), count in reading.responses.items():
        pages.add_metric([spider, status], count)
    errors = CounterMetricFamily("scrapy_cluster_crawler_errors", "Downloads that got no "
                                 "response, by exception class.", labels=["exception"])
    for exception, count in sorted(reading.errors.items()):
        errors.add_metric([exception], count)
    handled = CounterMetricFamily("scrapy_cluster_monitor_requests", "Requests the Kafka "
                                  "Monitor read, jobs the Redis Monitor finished.",
                                  labels=["component"])
    failed = CounterMetricFamily("scrapy_cluster_monitor_failures", "Requests or jobs that "
                                 "failed.", labels=["component"])
    plugins = CounterMetricFamily("scrapy_cluster_monitor_plugin_requests", "Requests or jobs "
                                  "handled per plugin.", labels=["component", "plugin"])
    for monitor, counts in reading.monitors.items():
        handled.add_metric([monitor], counts.get(TOTAL, 0))
        failed.add_metric([monitor], counts.get(FAIL, 0))
        for plugin, count in sorted(counts.items()):
            if plugin not in (TOTAL, FAIL):
                plugins.add_metric([monitor, plugin], count)
    dropped = CounterMetricFamily("scrapy_cluster_dropped_urls", "URLs crawlers refused "
                                  "(robots, ssrf) or filtered before queuing, per spider and "
                                  "reason, over the cluster's lifetime.",
                                  labels=["spider", "reason", "kind"])
    for (spider, reason), count in sorted(reading.filtered.items()):
        dropped.add_metric([spider, reason, REFUSED if reason in REFUSED_REASONS else FILTERED],
                           count)
    yield from (pages, errors, handled, failed, plugins, dropped)


def _histogram_family(snapshot: HistogramSnapshot) -> Metric:
    return HistogramMetricFamily(
        "scrapy_cluster_enqueue_to_fetch_seconds", "Seconds from queuing a request in the "
        "frontier to its response at a crawler.",
        buckets=[(floatToGoString(bound), count) for bound, count in snapshot.buckets],
        sum_value=snapshot.sum)


class ClusterCollector(Collector):
    """Reads the cluster at every scrape; never raises (module docstring)."""

    def __init__(self, reader: MetricsReader, *, top_domains: int, logger: logging.Logger,
                 bus_lag: Callable[[], dict[str, int | None]] | None = None) -> None:
        self.reader = reader
        self.top_domains = top_domains
        self.logger = logger
        self.bus_lag = bus_lag
        self._failing: set[str] = set()

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        families: list[Metric] = []
        redis_up = 1
        try:
            reading = self.reader.read()
            families += cluster_families(reading, top_domains=self.top_domains,
                                         now_ms=int(self.reader.clock() * 1000))
            self._recovered("redis", "Redis")
        except (redis.RedisError, FrontierError) as exc:
            redis_up = 0 if is_redis_outage(exc) else 1
            self._failed("redis", "cluster metrics skipped, Redis read failed", exc)
        families.append(self._lag_family())
        yield GaugeMetricFamily("scrapy_cluster_redis_up", "1 when this scrape could read the "
                                "cluster's Redis, else 0.", value=redis_up)
        yield from families
        yield GaugeMetricFamily("scrapy_cluster_scrape_duration_seconds", "Seconds this scrape "
                                "spent reading the cluster.", value=time.perf_counter() - started)

    def _lag_family(self) -> Metric:
        family = GaugeMetricFamily("scrapy_cluster_kafka_monitor_lag_messages", "Requests on "
                                   "the incoming topic the Kafka Monitor's group has not "
                                   "acknowledged.", labels=["topic"])
        if self.bus_lag is None:
            return family
        try:
            lags = self.bus_lag()
            self._recovered("bus", "the bus")
        except Exception as exc:  # noqa: BLE001 - any bus failure only hides the lag
            self._failed("bus", "Kafka Monitor lag skipped, bus read failed", exc)
            return family
        for topic, lag in sorted(lags.items()):
            if lag is not None:
                family.add_metric([topic], lag)
        return family

    def _failed(self, source: str, message: str, exc: BaseException) -> None:
        if source not in self._failing:
            self._failing.add(source)
            self.logger.warning("metrics: %s: %s", message, exc)

    def _recovered(self, source: str, name: str) -> None:
        if source in self._failing:
            self._failing.discard(source)
            self.logger.info("metrics: %s readable again", name)


class RestMetrics:
    """The Rest service's ``/metrics``: the cluster collector plus this process's traffic."""

    def __init__(self, settings: Mapping[str, Any], redis_client: redis.Redis, *,
                 frontier: BacklogSource,
                 bus_lag: Callable[[], dict[str, int | None]] | None = None,
                 clock: Callable[[], float] = time.time,
                 logger: logging.Logger | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = Counter("scrapy_cluster_rest_requests", "HTTP requests this Rest "
                                 "process answered, by endpoint and status code.",
                                 ["endpoint", "code"], registry=self.registry)
        self._feeds = Counter("scrapy_cluster_rest_feed_requests", "Requests to /feed by "
                              "plugin and outcome.", ["plugin", "outcome"], registry=self.registry)
        self._answers = Histogram("scrapy_cluster_rest_answer_seconds", "Seconds from feeding "
                                  "a request with a uuid to its answer arriving.",
                                  buckets=ANSWER_BUCKETS, registry=self.registry)
        reader = MetricsReader(redis_client, frontier, clock=clock,
                               heartbeat_timeout_s=float(settings["HEARTBEAT_TIMEOUT"]))
        logger = logger or logging.getLogger(str(settings.get("LOGGER_NAME") or __name__))
        self.registry.register(ClusterCollector(
            reader, top_domains=int(settings["METRICS_TOP_DOMAINS"]), logger=logger,
            bus_lag=bus_lag))

    def observe_request(self, endpoint: str, status_code: int) -> None:
        """One HTTP request; an endpoint outside ``ENDPOINTS`` is counted as ``other``."""
        self._requests.labels(endpoint if endpoint in ENDPOINTS else OTHER,
                              str(status_code)).inc()

    def observe_feed(self, plugin: str, outcome: str) -> None:
        """One ``/feed`` request; an outcome outside ``FEED_OUTCOMES`` is counted as ``other``."""
        self._feeds.labels(plugin, outcome if outcome in FEED_OUTCOMES else OTHER).inc()

    def observe_answer(self, seconds: float) -> None:
        self._answers.observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The text exposition (format 0.0.4, which every Prometheus version reads; all names
        are legacy-safe) and its content type; Redis is read here, in a worker thread."""
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4
