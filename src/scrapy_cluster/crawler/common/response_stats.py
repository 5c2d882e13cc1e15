"""Response statistics of one crawler process, written to Redis in batches.

Per response (no Redis I/O): the status is counted locally. Every ``STATS_CYCLE`` seconds ONE
round trip (a pipeline) writes:

* ``stats:crawler:<hostname>:<spiderid>:<status>:<window>`` rolling windows (``STATS_TIMES``)
  and ``...:lifetime`` for the codes in ``STATUS_RESPONSE_CODES`` (when ``STATS_STATUS_CODES``);
* per domain, the status window and the last N statuses the circuit breaker reads
  (``keys.crawler_domain_status_window`` / ``keys.crawler_domain_last_statuses``), and the
  index of those domains (``keys.crawler_domain_status_domains``). A request that got no
  response (connection failure, timeout) counts as status ``NO_RESPONSE`` (0);
* ``<hostname>:<spiderid>`` in ``stats:crawler:_sources`` (so stats readers find the counters);
* the heartbeat ``stats:crawler:self:<hostname>:<spiderid>:<id>`` with TTL HEARTBEAT_TIMEOUT
  (``<id>``: SC_NODE_ID, else random per process), scored in ``stats:crawler:self``, and the
  node's description beside it
  (``stats:crawler:info:<hostname>:<spiderid>:<id>``: version, engine ``scrapy``, spiders,
  CPU, RSS, start; see ``stats.node``);
* whatever the ``writers`` counted (``queue_flush(pipe)``): the download telemetry
  (``telemetry.py``). The crawls' URL funnels (``funnel.py``) are written with the lease
  acknowledgements instead (``lease_state.py``), so a completed crawl's totals are exact.

``leave()`` (a clean stop, after the last ``flush``) removes the heartbeat: one round trip.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from scrapy_cluster import keys
from scrapy_cluster.outage import OutageLog
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.upkeep import node_id

DOMAIN_KEYS_TTL_S = 86_400
NO_RESPONSE = 0
"""The status recorded for a request that got no response (connection failure, timeout)."""
logger = logging.getLogger(__name__)


class PipelineWriter(Protocol):
    """Something that queues its locally counted writes on a pipeline the caller executes."""

    def queue_flush(self, pipe: Any) -> None: ...


@dataclass(frozen=True)
class StatusPolicy:
    """What ``ResponseStats`` counts and for whom: the crawler's ``hostname`` and ``spiderid``,
    the ``tracked_codes`` (STATUS_RESPONSE_CODES) counted when ``codes_enabled``
    (STATS_STATUS_CODES), the per-domain window ``window_s`` (CRAWLER_STATUS_WINDOW_S) and
    ``last_n`` (CRAWLER_STATUS_LAST_N); ``node_id`` None: this instance's own id."""

    hostname: str
    spiderid: str
    tracked_codes: frozenset[int] = frozenset()
    codes_enabled: bool = False
    window_s: int = 60
    last_n: int = 50
    node_id: str | None = None


class ResponseStats:
    """Counts statuses locally; ``flush()`` writes them (see module docstring)."""

    def __init__(self, client: redis.Redis, windowed: WindowedStats, policy: StatusPolicy, *,
                 clock: Callable[[], float] = time.time, writers: Sequence[PipelineWriter] = (),
                 node_info: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.client, self.windowed = client, windowed
        self.writers, self.node_info = list(writers), node_info
        self.hostname, self.spiderid = policy.hostname, policy.spiderid
        self.tracked_codes, self.codes_enabled = policy.tracked_codes, policy.codes_enabled
        self.window_s, self.last_n = policy.window_s, policy.last_n
        self.instance_id = uuid.uuid4().hex[:12]
        self.node_id = policy.node_id or self.instance_id
        """The heartbeat's ``<id>`` (the status windows' members keep ``instance_id``)."""
        self._clock = clock
        self._codes: Counter[int] = Counter()
        self._by_domain: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
        self._outage = OutageLog(logger)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], client: redis.Redis, *, hostname: str,
                      spiderid: str, writers: Sequence[PipelineWriter] = (),
                      node_info: Callable[[], Mapping[str, Any]] | None = None) -> ResponseStats:
        prefix = keys.stats_key("crawler", hostname, spiderid)
        policy = StatusPolicy(
            hostname=hostname, spiderid=spiderid,
            tracked_codes=frozenset(int(c) for c in settings["STATUS_RESPONSE_CODES"]),
            codes_enabled=bool(settings["STATS_STATUS_CODES"]),
            window_s=int(settings["CRAWLER_STATUS_WINDOW_S"]),
            last_n=int(settings["CRAWLER_STATUS_LAST_N"]), node_id=node_id(settings))
        return cls(client, WindowedStats.from_settings(settings, client, key_prefix=prefix),
                   policy, writers=writers, node_info=node_info)

    def record(self, domain: str, status: int) -> None:
        """Count one response. No Redis I/O."""
        self._codes[status] += 1
        self._by_domain[domain].append((status, int(self._clock() * 1000)))

    def flush(self) -> None:
        """Write everything counted since the last flush, the writers' counts and the heartbeat
        with the node's description: ONE round trip."""
        codes, self._codes = self._codes, Counter()
        by_domain, self._by_domain = self._by_domain, defaultdict(list)
        pipe = self.client.pipeline(transaction=False)
        if self.codes_enabled:
            for status, count in codes.items():
                if status in self.tracked_codes:
                    self.windowed.increment(str(status), pipe=pipe, amount=count)
        for domain, seen in by_domain.items():
            self._queue_domain(pipe, domain, seen)
        if by_domain:
            self._queue_index(pipe, by_domain)
        if codes:
            pipe.sadd(keys.crawler_stats_sources(),
                      keys.crawler_stats_source(self.hostname, self.spiderid))
        for writer in self.writers:
            writer.queue_flush(pipe)
        info = self.node_info() if self.node_info is not None else None
        self.windowed.heartbeat(self.hostname, self.spiderid, self.node_id, pipe=pipe,
                                info=info)
        try:
            pipe.execute()
        except redis.RedisError as exc:
            self._outage.failed("writing crawler stats", exc)
            return
        self._outage.succeeded()

    def leave(self) -> None:
        """Remove this crawler's heartbeat (a clean stop, after the last ``flush``): ONE round
        trip. An unreachable Redis is logged; the heartbeat then expires by itself."""
        try:
            self.windowed.remove_heartbeat(self.hostname, self.spiderid, self.node_id)
        except redis.RedisError as exc:
            logger.warning("crawler heartbeat not removed (it expires by itself): %s", exc)

    def _queue_domain(self, pipe: Any, domain: str, seen: list[tuple[int, int]]) -> None:
        window_key = keys.crawler_domain_status_window(domain)
        last_key = keys.crawler_domain_last_statuses(domain)
        newest_ms = seen[-1][1]
        pipe.zadd(window_key, {
            keys.crawler_domain_status_member(status, at_ms, self.instance_id, i): at_ms
            for i, (status, at_ms) in enumerate(seen)})
        pipe.zremrangebyscore(window_key, "-inf", newest_ms - self.window_s * 1000)
        pipe.expire(window_key, DOMAIN_KEYS_TTL_S)
        pipe.rpush(last_key, *[status for status, _ in seen])
        pipe.ltrim(last_key, -self.last_n, -1)
        pipe.expire(last_key, DOMAIN_KEYS_TTL_S)

    @staticmethod
    def _queue_index(pipe: Any, by_domain: Mapping[str, list[tuple[int, int]]]) -> None:
        index = keys.crawler_domain_status_domains()
        newest_ms = {domain: seen[-1][1] for domain, seen in by_domain.items()}
        pipe.zadd(index, newest_ms, gt=True)
        pipe.zremrangebyscore(index, "-inf", max(newest_ms.values()) - DOMAIN_KEYS_TTL_S * 1000)
        pipe.expire(index, DOMAIN_KEYS_TTL_S)
