"""Composition root of ``scrapy-cluster redis-monitor``: builds, wires and closes everything."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.errors import NotConfigured
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.outage import Backoff
from scrapy_cluster.plugins import ranked_classes
from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.redis_monitor.answer_sender import AnswerSender
from scrapy_cluster.redis_monitor.jobs import JobQueue
from scrapy_cluster.redis_monitor.monitor import (
    RedisMonitor,
    RedisMonitorParts,
    RedisMonitorPolicy,
    plugin_settings_names,
)
from scrapy_cluster.redis_monitor.monitoring import MonitoringLine
from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor
from scrapy_cluster.redis_monitor.plugins.circuit_breaker import breaker_for
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.stats.cluster import ClusterStats
from scrapy_cluster.stats.node import NodeInfo
from scrapy_cluster.upkeep import Heartbeat, StatsDump, node_id, process_identity


def build_plugins(settings: Mapping[str, Any], *, logger: logging.Logger,
                  redis_client: redis.Redis, frontier: Frontier, answers: AnswerSender,
                  clock: Callable[[], float] = time.time) -> list[BaseMonitor]:
    """The PLUGINS classes in rank order, set up; those raising ``NotConfigured`` are left out."""
    plugins: list[BaseMonitor] = []
    for cls in ranked_classes(settings, BaseMonitor):
        plugin = cls(logger=logger, redis_client=redis_client, frontier=frontier,
                     answers=answers, clock=clock)
        try:
            plugin.setup(settings)
        except NotConfigured as exc:
            logger.info("plugin %s not configured, skipped: %s", cls.__name__, exc,
                        extra={"plugin": cls.__name__})
            continue
        plugins.append(plugin)
    return plugins


@contextmanager
def open_monitor(settings: Mapping[str, Any], logger: logging.Logger, *,
                 clock: Callable[[], float] = time.time) -> Iterator[RedisMonitor]:
    """A ready Redis Monitor; its plugins, producer, bus and Redis client close on exit.

    ``clock`` (epoch s) is what plugins see (answers' ``server_time``, expiry); tests inject it.
    """
    with ExitStack() as stack:
        redis_client = RedisConfig.from_settings(settings).sync_client()
        stack.callback(redis_client.close)
        bus = create_bus(settings)
        stack.callback(bus.close)
        producer = bus.producer()
        stack.callback(producer.close)
        answers = AnswerSender.from_settings(settings, producer)
        frontier = Frontier.from_settings(settings, redis_client)
        plugins = build_plugins(settings, logger=logger, redis_client=redis_client,
                                frontier=frontier, answers=answers, clock=clock)
        machine, process_id = process_identity()  # the job consumer: unique per run
        node = node_id(settings) or process_id  # the heartbeat: SC_NODE_ID when set
        lock_s = float(settings["REDIS_LOCK_EXPIRATION"])
        queue = JobQueue(redis_client, f"{machine}:{process_id}",
                         claim_idle_ms=int(lock_s * 1000))
        stats = WindowedStats.from_settings(settings, redis_client,
                                            key_prefix=keys.stats_key("redis-monitor"), clock=clock)
        interval_s = min(5.0, float(settings["HEARTBEAT_TIMEOUT"]) / 3)
        chores = [StatsDump(stats, plugin_settings_names(plugins),
                            interval_s=float(settings["STATS_DUMP"]), clock=time.monotonic,
                            logger=logger, title="Redis Monitor").dump_if_due]
        monitor = RedisMonitor(
            RedisMonitorParts(
                queue=queue, plugins=plugins, redis_client=redis_client, answers=answers,
                stats=stats, logger=logger,
                heartbeat=Heartbeat(stats, machine=machine, process_id=node,
                                    interval_s=interval_s, clock=time.monotonic,
                                    info=NodeInfo()),
                backoff=Backoff()),
            policy=RedisMonitorPolicy.from_settings(settings), chores=chores)
        if bool(settings["MONITORING_LOG"]):
            monitor.chores.append(MonitoringLine.from_settings(
                settings, breaker=breaker_for(settings, redis_client, clock), frontier=frontier,
                cluster=ClusterStats(redis_client, settings, frontier=frontier, clock=clock),
                redis_client=redis_client, logger=logger).log_if_due)
        stack.callback(monitor.close)
        stack.callback(monitor.heartbeat.remove, logger)  # a clean stop leaves no live node
        logger.info("Redis Monitor starting", extra={
            "plugins": [plugin.name for plugin in plugins], "machine": machine,
            "process_id": process_id})
        yield monitor
