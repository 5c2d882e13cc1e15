"""The Kafka Monitor's default plugins and the base class for your own."""

from __future__ import annotations

from scrapy_cluster.kafka_monitor.plugins.action import ActionHandler
from scrapy_cluster.kafka_monitor.plugins.base import BaseHandler, PipelinedHandler
from scrapy_cluster.kafka_monitor.plugins.scraper import ScraperHandler
from scrapy_cluster.kafka_monitor.plugins.stats import StatsHandler
from scrapy_cluster.kafka_monitor.plugins.zookeeper import ZookeeperHandler

__all__ = ["ActionHandler", "BaseHandler", "PipelinedHandler", "ScraperHandler",
           "StatsHandler", "ZookeeperHandler"]
