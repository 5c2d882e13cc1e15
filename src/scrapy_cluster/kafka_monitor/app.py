"""Composition root of ``scrapy-cluster kafka-monitor run``: builds, wires and closes everything."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.kafka_monitor.loader import build_plugins, build_validator, plugin_classes
from scrapy_cluster.kafka_monitor.monitor import KafkaMonitor
from scrapy_cluster.layout import check_at_start
from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.upkeep import node_identity


@contextmanager
def open_monitor(settings: Mapping[str, Any], logger: logging.Logger) -> Iterator[KafkaMonitor]:
    """A ready Kafka Monitor; its consumer, bus and Redis client close on exit."""
    with ExitStack() as stack:
        redis_client = RedisConfig.from_settings(settings).sync_client()
        stack.callback(redis_client.close)
        check_at_start(redis_client, logger)
        bus = create_bus(settings)
        stack.callback(bus.close)
        consumer = bus.consumer(
            [topics.incoming(settings)], str(settings["KAFKA_GROUP"]),
            from_beginning=settings["KAFKA_CONSUMER_AUTO_OFFSET_RESET"] == "earliest")
        stack.callback(consumer.close)
        frontier = Frontier.from_settings(settings, redis_client)
        plugins = build_plugins(plugin_classes(settings), settings, logger=logger,
                                redis_client=redis_client, frontier=frontier)
        validator = build_validator([type(plugin) for plugin in plugins], settings)
        machine, process_id = node_identity(settings)
        logger.info("Kafka Monitor starting", extra={
            "topic": topics.incoming(settings), "group": settings["KAFKA_GROUP"],
            "plugins": validator.plugin_names, "machine": machine, "process_id": process_id})
        monitor = KafkaMonitor.from_settings(
            settings, consumer=consumer, validator=validator, plugins=plugins,
            redis_client=redis_client, logger=logger, machine=machine, process_id=process_id)
        stack.callback(monitor.heartbeat.remove, logger)  # a clean stop leaves no live node
        yield monitor
