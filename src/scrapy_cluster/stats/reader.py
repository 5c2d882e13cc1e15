"""One reader of the cluster's Redis data, for everything that shows the cluster.

``/metrics`` (``rest.metrics``), the dashboard snapshot (``rest.dashboard.snapshot``), the
progress line of ``up`` (``stats.progress``), the Stats API answers (``stats.cluster``) and the
live-spider check of ``feed`` (``stats.coverage``) read Redis only through ``ClusterReader``.
Each of them plans its reading as a few ``ReadBatch`` es: a batch queues typed reads on one
pipeline and ``run()`` sends them in ONE round trip (none when nothing was queued); each read
returns a ``Reply`` whose ``value`` is the parsed reply once the batch ran. Key names come
from ``keys`` and are parsed back there; bytes become text with ``text.as_text``.

Only indexes are read, never the keyspace: live nodes from the heartbeat indexes
(``stats:<component>:self``), crawler stats sources from ``stats:crawler:_sources``, counter
names from each prefix's ``..:_names``, queue lengths from the frontier's backlog script,
re-crawl schedules from each spider's ``<spiderid>:recrawl`` (``stats.recrawl``).
Each caller writes the round trips of one reading in its docstring; ``tests/
test_cluster_read_budgets.py`` counts them against a real Redis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier.calls import SCHEDULED_FIELD
from scrapy_cluster.frontier.model import Backlog
from scrapy_cluster.stats.recrawl import MOST_CRAWLS, RecrawlIndex, SpiderSchedules, parse_index
from scrapy_cluster.stats.windowed import LIFETIME, WindowedStats
from scrapy_cluster.text import as_text

T = TypeVar("T")
Heartbeat = tuple[str, float]
"""A heartbeat index member (``<machine>:<parts>``) and its last beat, epoch s."""


class BacklogSource(Protocol):
    """What the reader needs of ``Frontier``."""

    def backlog(self, most_domains: int = ...) -> dict[str, Backlog]: ...


class CrawlerSource(NamedTuple):
    """A member of ``stats:crawler:_sources``: one crawler host counting for one spider."""

    host: str
    spider: str

    @property
    def prefix(self) -> str:
        """Its ``WindowedStats`` prefix, ``stats:crawler:<host>:<spider>``."""
        return keys.crawler_stats(self.host, self.spider)


class Reply(Generic[T]):
    """One read of a ``ReadBatch``: ``value`` is its parsed reply once the batch ran."""

    __slots__ = ("_parse", "_value", "_done")

    def __init__(self, parse: Callable[[Any], T]) -> None:
        self._parse = parse
        self._done = False

    def _set(self, raw: Any) -> None:
        self._value, self._done = self._parse(raw), True

    @property
    def value(self) -> T:
        if not self._done:
            raise RuntimeError("the batch of this reply has not run")
        return self._value


def _texts(raw: Iterable[bytes | str]) -> list[str]:
    return sorted(as_text(member) for member in raw)


def _scored(raw: Iterable[tuple[bytes | str, float]]) -> list[Heartbeat]:
    return [(as_text(member), float(score)) for member, score in raw]


class ReadBatch:
    """Reads queued on one pipeline; ``run()`` is ONE round trip (none when nothing queued)."""

    def __init__(self, client: redis.Redis) -> None:
        self._pipe = client.pipeline(transaction=False)
        self._replies: list[tuple[Reply[Any], int]] = []

    def _queue(self, parse: Callable[[Any], T], commands: int = 1) -> Reply[T]:
        reply = Reply(parse)
        self._replies.append((reply, commands))
        return reply

    def run(self) -> None:
        if not self._replies:
            return
        raws = iter(self._pipe.execute())
        for reply, commands in self._replies:
            reply._set(next(raws) if commands == 1 else [next(raws) for _ in range(commands)])

    # --- nodes ----------------------------------------------------------------------------
    def heartbeats(self, component: str) -> Reply[list[Heartbeat]]:
        """Every member of the component's heartbeat index with its last beat, oldest first."""
        self._pipe.zrange(keys.heartbeat_index(component), 0, -1, withscores=True)
        return self._queue(_scored)

    def live_heartbeats(self, component: str, after_s: float) -> Reply[list[Heartbeat]]:
        """The members that beat after ``after_s`` (epoch s), with their last beat."""
        self._pipe.zrangebyscore(keys.heartbeat_index(component), f"({after_s}", "+inf",
                                 withscores=True)
        return self._queue(_scored)

    def members(self, component: str, *, after_s: float | None = None,
                until_s: float | None = None) -> Reply[list[str]]:
        """The members that beat after ``after_s``, or at ``until_s`` or before, sorted."""
        low = "-inf" if after_s is None else f"({after_s}"
        high = "+inf" if until_s is None else until_s
        self._pipe.zrangebyscore(keys.heartbeat_index(component), low, high)
        return self._queue(_texts)

    def live_count(self, component: str, after_s: float) -> Reply[int]:
        self._pipe.zcount(keys.heartbeat_index(component), f"({after_s}", "+inf")
        return self._queue(int)

    def node_infos(self, nodes: Sequence[tuple[str, str]]) -> Reply[list[bytes | None]]:
        """The ``keys.node_info`` JSON of each ``(component, member)`` (one MGET; none queued
        when ``nodes`` is empty)."""
        if not nodes:
            return _ready([])
        self._pipe.mget([keys.node_info(component, member) for component, member in nodes])
        return self._queue(list)

    # --- counters -------------------------------------------------------------------------
    def crawler_sources(self) -> Reply[list[CrawlerSource]]:
        """The crawler stats sources, in the order of their members' text."""
        self._pipe.smembers(keys.crawler_stats_sources())
        return self._queue(_sources)

    def names(self, prefix: str) -> Reply[list[str]]:
        """The counter names ever incremented under a ``WindowedStats`` prefix, sorted."""
        self._pipe.smembers(keys.stats_names_index(prefix))
        return self._queue(_texts)

    def lifetimes(self, counters: Sequence[tuple[str, str]]) -> Reply[list[int]]:
        """The lifetime count of each ``(prefix, name)`` (one MGET; none queued when empty)."""
        if not counters:
            return _ready([])
        self._pipe.mget([keys.stats_name(prefix, name, LIFETIME) for prefix, name in counters])
        return self._queue(lambda values: [int(value or 0) for value in values])

    def windows(self, stats: WindowedStats,
                names: Sequence[str]) -> Reply[dict[str, dict[str, int]]]:
        """``WindowedStats.read_many`` of ``names``: ``{name: {window: count, lifetime: n}}``."""
        stats.queue_read(self._pipe, names)
        return self._queue(lambda raws: stats.parse_read(iter(raws), names),
                           len(names) * (len(stats.windows_s) + 1))

    def window_buckets(self, prefix: str, name: str,
                       window_s: int) -> Reply[Mapping[bytes, bytes]]:
        """The bucket HASH of one rolling window of a counter (bucket number -> hits)."""
        return self.raw_hash(keys.stats_name(prefix, name, window_s))

    def filtered_totals(self) -> Reply[Mapping[bytes, bytes]]:
        """``keys.funnel_filtered_totals``: ``<spiderid>:<reason>`` -> URLs, as stored."""
        return self.raw_hash(keys.funnel_filtered_totals())

    # --- re-crawl schedules (stats.recrawl) ------------------------------------------------
    def recrawl_index(self, spider: str, most: int = MOST_CRAWLS) -> Reply[RecrawlIndex]:
        """The spider's crawls with a re-crawl schedule, the ``most`` earliest due with their
        due ms, and how many there are (ZRANGE WITHSCORES and ZCARD of ``<spiderid>:recrawl``)."""
        key = keys.recrawl_due_crawls(spider)
        self._pipe.zrange(key, 0, max(0, most - 1), withscores=True)
        self._pipe.zcard(key)
        return self._queue(parse_index, 2)

    def crawl_scheduled(self, spider: str, crawlid: str) -> Reply[int]:
        """URLs in the crawl's re-crawl schedule: HGET of ``~scheduled`` in its counts hash."""
        self._pipe.hget(keys.crawl_counts(spider, crawlid), SCHEDULED_FIELD)
        return self._queue(lambda raw: int(raw or 0))

    # --- anything else, by key ------------------------------------------------------------
    def raw_hash(self, key: str) -> Reply[Mapping[bytes, bytes]]:
        """HGETALL of ``key`` (a name built by ``keys``), as stored."""
        self._pipe.hgetall(key)
        return self._queue(dict)

    def hash_values(self, key: str) -> Reply[list[bytes]]:
        self._pipe.hvals(key)
        return self._queue(list)

    def text_set(self, key: str) -> Reply[list[str]]:
        """SMEMBERS of ``key`` as text, sorted."""
        self._pipe.smembers(key)
        return self._queue(_texts)

    def cardinality(self, key: str) -> Reply[int]:
        self._pipe.zcard(key)
        return self._queue(int)

    def scored(self, key: str, low: float | str = "-inf",
               high: float | str = "+inf") -> Reply[list[tuple[str, float]]]:
        """ZRANGEBYSCORE ``low`` ``high`` WITHSCORES of ``key``, members as text."""
        self._pipe.zrangebyscore(key, low, high, withscores=True)
        return self._queue(_scored)

    def ranked(self, key: str, low: float | str = "-inf",
               high: float | str = "+inf") -> Reply[list[str]]:
        """ZRANGEBYSCORE ``low`` ``high`` of ``key``, members as text in score order."""
        self._pipe.zrangebyscore(key, low, high)
        return self._queue(lambda raw: [as_text(member) for member in raw])

    def values(self, keys_: Sequence[str]) -> Reply[list[bytes | None]]:
        """MGET of ``keys_`` (none queued when empty)."""
        if not keys_:
            return _ready([])
        self._pipe.mget(list(keys_))
        return self._queue(list)

    def list_head(self, key: str) -> Reply[bytes | None]:
        self._pipe.lindex(key, 0)
        return self._queue(lambda raw: raw)

    def server_time_ms(self) -> Reply[int]:
        """Redis ``TIME`` in epoch ms."""
        self._pipe.time()
        return self._queue(lambda raw: int(raw[0]) * 1000 + int(raw[1]) // 1000)


def _ready(value: T) -> Reply[T]:
    reply: Reply[T] = Reply(lambda raw: raw)
    reply._set(value)
    return reply


def _sources(raw: Iterable[bytes | str]) -> list[CrawlerSource]:
    parsed = (keys.parse_crawler_stats_source(member) for member in _texts(raw))
    return [CrawlerSource(*source) for source in parsed if source is not None]


class Rider(Protocol):
    """Reads that ride along two consecutive batches of another reading (``lifetime_totals``),
    so they cost no round trip of their own: ``first`` queues on the first batch, ``second``
    (after the first ran) on the second."""

    def first(self, batch: ReadBatch) -> None: ...

    def second(self, batch: ReadBatch) -> None: ...


class ScheduleRead:
    """Reads the re-crawl schedules of ``spiders`` in two batches (a ``Rider``): the first
    queues ``ReadBatch.recrawl_index`` per spider (2 commands each), the second HGET of
    ``~scheduled`` and, with ``funnels``, HGETALL of the funnel hash (a few dozen fields) of
    each crawl read (at most ``MOST_CRAWLS`` per spider). ``result(now_ms)`` once both ran."""

    def __init__(self, spiders: Sequence[str], *, funnels: bool = False,
                 most: int = MOST_CRAWLS) -> None:
        self.spiders, self.funnels, self.most = list(spiders), funnels, most
        self._indexes: dict[str, Reply[RecrawlIndex]] = {}
        self._counts: dict[tuple[str, str], Reply[int]] = {}
        self._funnels: dict[tuple[str, str], Reply[Mapping[bytes, bytes]]] = {}

    def first(self, batch: ReadBatch) -> None:
        self._indexes = {spider: batch.recrawl_index(spider, self.most) for spider in self.spiders}

    def second(self, batch: ReadBatch) -> None:
        for spider, index in self._indexes.items():
            for crawlid, _ in index.value.due_ms:
                self._counts[(spider, crawlid)] = batch.crawl_scheduled(spider, crawlid)
                if self.funnels:
                    self._funnels[(spider, crawlid)] = batch.raw_hash(
                        keys.crawl_funnel(spider, crawlid))

    def result(self, now_ms: int) -> dict[str, SpiderSchedules]:
        """``{spider: SpiderSchedules}`` for every spider asked, in their order."""
        found = {}
        for spider, index in self._indexes.items():
            crawls = [crawlid for crawlid, _ in index.value.due_ms]
            found[spider] = SpiderSchedules.build(
                index.value, now_ms,
                {crawlid: self._counts[(spider, crawlid)].value for crawlid in crawls},
                {crawlid: self._funnels[(spider, crawlid)].value for crawlid in crawls
                 if (spider, crawlid) in self._funnels})
        return found


class ClusterReader:
    """Reads the cluster (module docstring); ``frontier`` is needed for ``backlog`` only."""

    def __init__(self, client: redis.Redis, frontier: BacklogSource | None = None) -> None:
        self.redis = client
        self.frontier = frontier

    def batch(self) -> ReadBatch:
        return ReadBatch(self.redis)

    def backlog(self, most_domains: int | None = None) -> dict[str, Backlog]:
        """The frontier's queue lengths per spider (and per domain, ``most_domains`` at most):
        ONE round trip (its backlog script); none and ``{}`` without a frontier."""
        if self.frontier is None:
            return {}
        if most_domains is None:
            return self.frontier.backlog()
        return self.frontier.backlog(most_domains)

    def names_of(self, prefixes: Sequence[str]) -> list[list[str]]:
        """``ReadBatch.names`` of each prefix: ONE round trip, none when ``prefixes`` is empty."""
        batch = self.batch()
        replies = [batch.names(prefix) for prefix in prefixes]
        batch.run()
        return [reply.value for reply in replies]

    def lifetime_totals(self, sources: Sequence[CrawlerSource],
                        names: Mapping[str, Sequence[str]], *,
                        rider: Rider | None = None) -> dict[str, dict[str, int]]:
        """``{prefix: {name: lifetime count}}`` for the prefixes of ``names`` (their names
        already read) and every crawler source (``source.prefix``). Round trips: the sources'
        name indexes (none without sources), then one MGET (none when nothing is named); the
        ``rider``'s reads go in the same two batches (a batch that has only its reads is still
        one round trip)."""
        first = self.batch()
        indexes = [first.names(source.prefix) for source in sources]
        if rider is not None:
            rider.first(first)
        first.run()
        named = {**names, **{source.prefix: reply.value
                             for source, reply in zip(sources, indexes, strict=True)}}
        wanted = [(prefix, name) for prefix, found in named.items() for name in found]
        batch = self.batch()
        values = batch.lifetimes(wanted)
        if rider is not None:
            rider.second(batch)
        batch.run()
        counters: dict[str, dict[str, int]] = {}
        for (prefix, name), value in zip(wanted, values.value, strict=True):
            counters.setdefault(prefix, {})[name] = value
        return counters

    def recrawl(self, *, funnels: bool = False) -> dict[str, SpiderSchedules]:
        """The re-crawl schedules of every spider in ``frontier:spiders``, aged on Redis ``TIME``
        (the frontier's clock): THREE round trips (the time and the spiders, their indexes, the
        counts, and with ``funnels`` the funnels, of the crawls read); two when no crawl has a
        schedule, one when no spider ever queued."""
        batch = self.batch()
        now_ms = batch.server_time_ms()
        spiders = batch.text_set(keys.frontier_spiders())
        batch.run()
        plan = ScheduleRead(spiders.value, funnels=funnels)
        for step in (plan.first, plan.second):
            batch = self.batch()
            step(batch)
            batch.run()
        return plan.result(now_ms.value)

    def remove_nodes(self, component: str, members: Sequence[str]) -> None:
        """Remove dead nodes: their heartbeat keys and index members. ONE round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.delete(*(keys.heartbeat_of_member(component, member) for member in members))
        pipe.zrem(keys.heartbeat_index(component), *members)
        pipe.execute()
