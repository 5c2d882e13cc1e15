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


def backend_name(settings: Mapping[str, Any]) -> str:
    """DOMAIN_CONFIG_BACKEND, lower-cased and checked."""
    backend = str(settings["DOMAIN_CONFIG_BACKEND"]).lower()
    if backend not in BACKENDS:
        raise SettingsError(f"DOMAIN_CONFIG_BACKEND must be one of {', '.join(BACKENDS)}, "
                            f"got {backend!r}")
    return backend


def open_store(settings: Mapping[str, Any], redis_client: redis.Redis) -> DomainConfigStore:
    """The store DOMAIN_CONFIG_BACKEND names (ZooKeeper connects here; close it after use)."""
    backend = backend_name(settings)
    if backend == "redis":
        from scrapy_cluster.domain_config.redis_store import RedisDomainConfigStore

        return RedisDomainConfigStore.from_settings(settings, redis_client)
    from scrapy_cluster.domain_config.zookeeper_store import ZookeeperDomainConfigStore

    return ZookeeperDomainConfigStore.from_settings(settings, frontier_domain())


__all__ = ["BACKENDS", "DomainConfigStore", "backend_name", "DomainDocument", "VersionedDocument",
           "frontier_domain", "open_store", "update"]
