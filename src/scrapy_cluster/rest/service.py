"""``RestService``: the clients and background threads behind the Rest service's endpoints.

Threads (each owns its client, so no client is shared across threads except the thread-safe
redis-py pool): ``FeedSender`` (the bus producer, group commit), ``AnswerListener`` (the
reader of ``<prefix>.outbound_firehose``), ``HealthMonitor`` (connectivity checks and the
heartbeat). HTTP handlers run on uvicorn's event loop; Redis reads of the dashboard and
``/metrics`` run in worker threads with the sync client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.rest.answer_router import AnswerListener, AnswerRouter
from scrapy_cluster.rest.feed_sender import FeedSender
from scrapy_cluster.rest.health import Health, HealthMonitor
from scrapy_cluster.rest.security import Access
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.stats.cluster import ClusterStats
from scrapy_cluster.stats.coverage import SpiderCoverage
from scrapy_cluster.stats.node import NodeInfo
from scrapy_cluster.upkeep import Heartbeat, node_id, process_identity

HEALTH_PROBE_TIMEOUT_S = 2.0
LAG_TIMEOUT_S = 2.0


class RequestCheck(Protocol):
    """The Kafka Monitor's validator (``RequestValidator.match``): returns an object with
    ``plugin`` and ``message`` when a plugin accepts the request, or with ``reason``."""

    def __call__(self, message: Any) -> Any: ...


class Metrics(Protocol):
    def observe_request(self, endpoint: str, status_code: int) -> None: ...

    def observe_feed(self, plugin: str, outcome: str) -> None: ...

    def observe_answer(self, seconds: float) -> None: ...

    def render(self) -> tuple[bytes, str]: ...


class RestService:
    """Everything the endpoints use; ``start`` launches the threads, ``close`` stops them.
    ``clock`` (wall clock, seconds) times the dashboard's sessions and the key guard."""

    def __init__(self, settings: Mapping[str, Any], logger: logging.Logger, *,
                 check: RequestCheck, schemas: Sequence[tuple[str, dict[str, Any]]],
                 metrics_factory: Callable[[RestService], Metrics] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.logger = logger
        self.access = Access.from_settings(settings, clock=clock, logger=logger)
        self.check = check
        self.schemas = list(schemas)
        self.started_at = time.time()
        self.machine, self.process_id = process_identity()
        config = RedisConfig.from_settings(settings)
        self.redis: redis.Redis = config.sync_client()
        self._probe_redis = config.sync_client(socket_timeout=HEALTH_PROBE_TIMEOUT_S,
                                               socket_connect_timeout=HEALTH_PROBE_TIMEOUT_S)
        self.frontier = Frontier.from_settings(settings, self.redis)
        self.cluster_stats = ClusterStats(self.redis, settings, frontier=self.frontier)
        self.bus = create_bus(settings)
        self.incoming_topic = topics.incoming(settings)
        self.outbound_topic = topics.outbound_firehose(str(settings["KAFKA_TOPIC_PREFIX"]))
        self.wait_s = float(settings["WAIT_FOR_RESPONSE_TIME"])
        self.max_body_bytes = int(settings["REST_MAX_BODY_BYTES"])
        self.router = AnswerRouter()
        self.sender = FeedSender(self.bus.producer(), timeout_s=float(settings["KAFKA_FEED_TIMEOUT"]),
                                 logger=logger)
        self.listener = AnswerListener(
            open_reader=lambda: self.bus.reader([self.outbound_topic], from_beginning=False),
            router=self.router, redis_client=self.redis,
            poll_ttl_s=int(settings["REST_POLL_TTL"]), logger=logger)
        stats = WindowedStats.from_settings(settings, self.redis, key_prefix=keys.stats_key("rest"))
        self._heartbeat = Heartbeat(stats, machine=self.machine,
                                    process_id=node_id(settings) or self.process_id,
                                    interval_s=min(5.0, float(settings["HEARTBEAT_TIMEOUT"]) / 3),
                                    clock=time.monotonic, info=NodeInfo())
        self.health_monitor = HealthMonitor(
            redis_probe=self._probe_redis.ping, bus_probe=self.bus.list_topics,
            interval_s=float(settings["REST_HEALTH_INTERVAL_S"]), logger=logger,
            heartbeat=lambda: self._heartbeat.beat_if_due(logger))
        self.metrics: Metrics | None = metrics_factory(self) if metrics_factory else None
        self.spider_coverage = SpiderCoverage.from_settings(settings, self.redis)

    def monitor_lag(self) -> dict[str, int | None]:
        """``{incoming topic: messages the Kafka Monitor's group has not read}`` (None when the
        bus cannot tell); for ``/metrics``."""
        group_lag = getattr(self.bus, "group_lag", None)
        if group_lag is None:
            return {self.incoming_topic: None}
        return {self.incoming_topic: group_lag(self.incoming_topic,
                                               str(self.settings["KAFKA_GROUP"]),
                                               timeout_s=LAG_TIMEOUT_S)}

    @property
    def health(self) -> Health:
        return self.health_monitor.health

    @property
    def my_id(self) -> str:
        return self.process_id

    def start(self, ready_timeout_s: float = 10.0) -> None:
        """Check health once, start the threads and wait (bounded) for the answer reader, so
        that answers to the first requests are not missed when the bus is up."""
        self.health_monitor.check_now()
        self.sender.start()
        self.listener.start()
        self.health_monitor.start()
        if self.health.kafka_connected and not self.listener.ready.wait(ready_timeout_s):
            self.logger.warning("answer reader not ready after %ss; answers may go to /poll",
                                ready_timeout_s)

    def close(self, join_timeout_s: float | None = None) -> None:
        timeout = float(self.settings["DAEMON_THREAD_JOIN_TIMEOUT"]) if join_timeout_s is None \
            else join_timeout_s
        self.health_monitor.stop()
        self.listener.stop()
        self.sender.stop()
        for thread in (self.sender, self.listener, self.health_monitor):
            if thread.is_alive():
                thread.join(timeout)
        self._heartbeat.remove(self.logger)  # a clean stop leaves no live node
        try:
            self.sender.producer.close()
        except Exception as exc:  # undelivered requests were already reported to their callers
            self.logger.warning("producer closed with undelivered requests: %s", exc)
        self.bus.close()
        self.redis.close()
        self._probe_redis.close()
