"""The operators' domain configuration: a YAML document of throttles and a blacklist.

``document`` parses and validates it; ``store`` is the interface of its two backends
(``redis_store``, ``zookeeper_store``), chosen by DOMAIN_CONFIG_BACKEND with ``open_store``.
Whatever the backend, the frontier reads the configuration from Redis
(``frontier.config.DomainConfig``); with ZooKeeper, ``scrapy-cluster config sync`` mirrors it.
See docs/operations.md, "Controlling domains".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

from scrapy_cluster.domain_config.document import DomainDocument, frontier_domain
from scrapy_cluster.domain_config.store import DomainConfigStore, VersionedDocument, update
from scrapy_cluster.errors import SettingsError

BACKENDS = ("redis", "zookeeper")


def open_store(settings: Mapping[str, Any], redis_client: redis.Redis) -> DomainConfigStore:
    """The store DOMAIN_CONFIG_BACKEND names (ZooKeeper connects here; close it after use)."""
    backend = str(settings["DOMAIN_CONFIG_BACKEND"]).lower()
    if backend == "redis":
        from scrapy_cluster.domain_config.redis_store import RedisDomainConfigStore

        return RedisDomainConfigStore.from_settings(settings, redis_client)
    if backend == "zookeeper":
        from scrapy_cluster.domain_config.zookeeper_store import ZookeeperDomainConfigStore

        return ZookeeperDomainConfigStore.from_settings(settings, frontier_domain())
    raise SettingsError(f"DOMAIN_CONFIG_BACKEND must be one of {', '.join(BACKENDS)}, "
                        f"got {backend!r}")


__all__ = ["BACKENDS", "DomainConfigStore", "DomainDocument", "VersionedDocument",
           "frontier_domain", "open_store", "update"]
