"""The Kafka Monitor's consume loop: poll a batch, validate, hand to plugins, write, then ack.

Per batch of up to KAFKA_MONITOR_BATCH_SIZE requests: one Redis round trip for
a MULTI/EXEC pipeline carrying every plugin's job writes, the stats increments
and (when due) the heartbeat, plus one round trip for ``frontier.enqueue_many``
when the batch holds crawl requests. The batch is acknowledged on the bus only
after Redis took it; while Redis is unreachable the same batch is retried with
capped exponential backoff and nothing is acknowledged (at-least-once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from scrapy_cluster import keys
from scrapy_cluster.api.validation import Accepted, RequestValidator
from scrapy_cluster.errors import BusError
from scrapy_cluster.kafka_monitor.plugins.base import BaseHandler, Failures
from scrapy_cluster.outage import Backoff, is_redis_outage
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.stats.node import NodeInfo
from scrapy_cluster.upkeep import Heartbeat, StatsDump

TOTAL, FAIL = "total", "fail"


class BusMessage(Protocol):
    value: Any
    raw: bytes


class BusConsumer(Protocol):
    def poll(self, max_messages: int = 100, timeout_s: float = 1.0) -> Sequence[Any]: ...

    def ack(self, messages: Sequence[Any]) -> None: ...


@dataclass
class BatchReport:
    """What happened to one batch: requests received, handled per plugin, failed."""

    received: int = 0
    handled: dict[str, int] = field(default_factory=dict)
    failed: int = 0


@dataclass
class _RoutedBatch:
    by_plugin: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rejected: int = 0


class BatchAbandoned(Exception):
    """Shutdown was requested while Redis was down; the batch stays unacknowledged."""


@dataclass(frozen=True)
class KafkaMonitorPolicy:
    """The settings the loop obeys (docs/settings.md, section Kafka Monitor)."""

    batch_size: int = 500
    poll_timeout_s: float = 0.05
    count_total: bool = True
    count_plugins: bool = True

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> KafkaMonitorPolicy:
        return cls(batch_size=int(settings["KAFKA_MONITOR_BATCH_SIZE"]),
                   poll_timeout_s=float(settings["KAFKA_CONSUMER_TIMEOUT"]) / 1000,
                   count_total=bool(settings["STATS_TOTAL"]),
                   count_plugins=bool(settings["STATS_PLUGINS"]))


@dataclass(frozen=True)
class KafkaMonitorParts:
    """The collaborators the loop works with, built by ``KafkaMonitor.from_settings``."""

    consumer: BusConsumer
    validator: RequestValidator
    plugins: Sequence[BaseHandler]
    redis_client: redis.Redis
    stats: WindowedStats
    logger: logging.Logger
    heartbeat: Heartbeat
    stats_dump: StatsDump
    backoff: Backoff


class KafkaMonitor:
    """Validates API requests from the bus and hands each to the first plugin accepting it."""

    def __init__(self, parts: KafkaMonitorParts, *,
                 policy: KafkaMonitorPolicy = KafkaMonitorPolicy()) -> None:
        self.consumer = parts.consumer
        self.validator = parts.validator
        self.plugins = {plugin.name: plugin for plugin in parts.plugins}
        self.redis = parts.redis_client
        self.stats = parts.stats
        self.logger = parts.logger
        self.heartbeat = parts.heartbeat
        self.stats_dump = parts.stats_dump
        self.backoff = parts.backoff
        self.policy = policy

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], *, consumer: BusConsumer,
                      validator: RequestValidator, plugins: Sequence[BaseHandler],
                      redis_client: redis.Redis, logger: logging.Logger,
                      machine: str, process_id: str, clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], None] = time.sleep) -> KafkaMonitor:
        stats = WindowedStats.from_settings(settings, redis_client,
                                            key_prefix=keys.stats_key("kafka-monitor"))
        interval_s = min(5.0, float(settings["HEARTBEAT_TIMEOUT"]) / 3)
        names = [TOTAL, FAIL, *(plugin.name for plugin in plugins)]
        return cls(
            KafkaMonitorParts(
                consumer=consumer, validator=validator, plugins=plugins,
                redis_client=redis_client, stats=stats, logger=logger,
                heartbeat=Heartbeat(stats, machine=machine, process_id=process_id,
                                    interval_s=interval_s, clock=clock, info=NodeInfo()),
                stats_dump=StatsDump(stats, names, interval_s=float(settings["STATS_DUMP"]),
                                     clock=clock, logger=logger),
                backoff=Backoff(sleep=sleep)),
            policy=KafkaMonitorPolicy.from_settings(settings))

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Process batches until ``should_stop()``; the batch in hand is finished first."""
        while not should_stop():
            try:
                self.run_once(should_stop)
                self.backoff.reset()
            except BatchAbandoned:
                return
            except BusError as exc:
                log = self.logger.warning if self.backoff.failures == 0 else self.logger.debug
                log("bus error, retrying: %s", exc, extra={"error": str(exc)})  # once per outage
                self.backoff.wait()
            self.stats_dump.dump_if_due()

    def run_once(self, should_stop: Callable[[], bool] = lambda: False) -> BatchReport:
        """Poll one batch and process it (see the module docstring for round trips)."""
        messages = self.consumer.poll(self.policy.batch_size, self.policy.poll_timeout_s)
        if not messages:
            self.heartbeat.beat_if_due(self.logger)
            return BatchReport()
        return self.process_batch(messages, should_stop)

    def process_batch(self, messages: Sequence[Any],
                      should_stop: Callable[[], bool] = lambda: False) -> BatchReport:
        """Validate, hand to plugins, write to Redis (retrying outages), then ack."""
        routed = self._route(messages)
        report = self._write_with_retry(routed, len(messages), should_stop)
        self.consumer.ack(messages)
        return report

    def _route(self, messages: Sequence[Any]) -> _RoutedBatch:
        routed = _RoutedBatch()
        for message in messages:
            if message.value is None and getattr(message, "error", None):
                routed.rejected += 1
                self.logger.warning("invalid JSON: %s", message.error,
                                    extra={"error": str(message.error), "raw": message.raw[:200]})
                continue
            match = self.validator.match(message.value)
            if isinstance(match, Accepted):
                routed.by_plugin.setdefault(match.plugin, []).append(match.message)
            else:
                routed.rejected += 1
                self.logger.warning("request matches no API: %s", match.reason,
                                    extra={"reason": match.reason, "closest": match.closest})
        return routed

    def _write_with_retry(self, routed: _RoutedBatch, received: int,
                          should_stop: Callable[[], bool]) -> BatchReport:
        while True:
            try:
                report = self._write(routed, received)
                self.backoff.reset()
                return report
            except Exception as exc:
                if not is_redis_outage(exc):
                    raise
                if should_stop():
                    raise BatchAbandoned from exc
                delay_s = self.backoff.next_delay_s()
                log = self.logger.warning if self.backoff.failures == 0 else self.logger.debug
                log("Redis unreachable, retrying batch in %.1fs: %s", delay_s, exc,
                    extra={"retry_in_s": delay_s, "requests": received})  # once per outage
                self.backoff.wait()

    def _write(self, routed: _RoutedBatch, received: int) -> BatchReport:
        """One attempt. Round trips: 1 (pipeline) + those the plugins make themselves."""
        report = BatchReport(received=received, failed=routed.rejected)
        pipe = self.redis.pipeline(transaction=True)
        for name, requests in routed.by_plugin.items():
            failures = self._handle(self.plugins[name], requests, pipe)
            report.handled[name] = len(requests) - len(failures)
            report.failed += len(failures)
        self._queue_stats(pipe, report)
        if self.heartbeat.due():
            self.heartbeat.queue(pipe)
        pipe.execute()
        return report

    def _handle(self, plugin: BaseHandler, requests: list[dict[str, Any]], pipe: Any) -> Failures:
        """The plugin's batch call; when it raises, each request alone so one bad one is isolated."""
        try:
            failures = plugin.handle_batch(requests, pipe)
        except Exception as exc:
            if is_redis_outage(exc):
                raise
            if len(requests) > 1:
                self.logger.warning("plugin %s failed on a batch, handling one by one: %s",
                                    plugin.name, exc, extra={"plugin": plugin.name})
                return self._handle_one_by_one(plugin, requests, pipe)
            failures = {0: f"{type(exc).__name__}: {exc}"}
            self._log_failures(plugin, requests, failures, exc)
            return failures
        self._log_failures(plugin, requests, failures, None)
        return failures

    def _handle_one_by_one(self, plugin: BaseHandler, requests: list[dict[str, Any]],
                           pipe: Any) -> Failures:
        failures: Failures = {}
        for index, request in enumerate(requests):
            single = self._handle(plugin, [request], pipe)
            if single:
                failures[index] = single[0]
        return failures

    def _log_failures(self, plugin: BaseHandler, requests: Sequence[dict[str, Any]],
                      failures: Failures, exc: BaseException | None) -> None:
        for index, reason in failures.items():
            self.logger.error("plugin %s failed: %s", plugin.name, reason,
                              exc_info=exc, extra={"plugin": plugin.name, "reason": reason,
                                                   "request": requests[index]})

    def _queue_stats(self, pipe: Any, report: BatchReport) -> None:
        if self.policy.count_total:
            self.stats.increment(TOTAL, pipe=pipe, amount=report.received)
            if report.failed:
                self.stats.increment(FAIL, pipe=pipe, amount=report.failed)
        if self.policy.count_plugins:
            for name, handled in report.handled.items():
                if handled:
                    self.stats.increment(name, pipe=pipe, amount=handled)
