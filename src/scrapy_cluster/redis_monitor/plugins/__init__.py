"""The default Redis Monitor plugins (ranks in ``settings/defaults.py``)."""

from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor
from scrapy_cluster.redis_monitor.plugins.circuit_breaker import CircuitBreakerMonitor
from scrapy_cluster.redis_monitor.plugins.complete import CompleteMonitor
from scrapy_cluster.redis_monitor.plugins.info import InfoMonitor
from scrapy_cluster.redis_monitor.plugins.stats import StatsMonitor
from scrapy_cluster.redis_monitor.plugins.stop import ExpireMonitor, StopMonitor
from scrapy_cluster.redis_monitor.plugins.zookeeper import ZookeeperMonitor

__all__ = ["BaseMonitor", "CircuitBreakerMonitor", "CompleteMonitor", "ExpireMonitor", "InfoMonitor", "StatsMonitor", "StopMonitor",
           "ZookeeperMonitor"]
