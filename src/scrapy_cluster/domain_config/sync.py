"""Mirror a document kept elsewhere (ZooKeeper) into the Redis keys the frontier reads.

``scrapy-cluster config sync`` runs this (``up`` starts it when DOMAIN_CONFIG_BACKEND is
``zookeeper``). Each version the watch delivers is stored in ``domain-config:document`` with
its ZooKeeper-derived version and source (the node) and applied to ``domain-config:throttle`` /
``:blacklist`` in one transaction (``RedisDomainConfigStore.mirror``); an older or equal
version of the same source is ignored, so several sync processes may run, and a document from
another source (a switch from the Redis backend, another node) is replaced whatever its version. A version that cannot be applied (Redis away) is retried on
the next change and every ``RESYNC_S`` seconds.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from scrapy_cluster.domain_config.redis_store import RedisDomainConfigStore
from scrapy_cluster.domain_config.store import VersionedDocument

RESYNC_S = 5.0
logger = logging.getLogger("scrapy_cluster.domain_config")


class Watchable(Protocol):
    source: str

    def read(self) -> VersionedDocument: ...

    def watch(self, callback: Any) -> Any: ...


class Mirror:
    """Keeps ``target`` (Redis) at the version of ``source``; ``close()`` stops it."""

    def __init__(self, source: Watchable, target: RedisDomainConfigStore) -> None:
        self.source, self.target = source, target
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.applied_version = 0
        self._watch: Any = None
        self._thread = threading.Thread(target=self._resync_loop, name="domain-config-sync",
                                        daemon=True)

    def start(self) -> Mirror:
        self._watch = self.source.watch(self.apply)
        self._thread.start()
        return self

    def apply(self, versioned: VersionedDocument) -> None:
        with self._lock:
            try:
                if self.target.mirror(versioned, self.source.source):
                    logger.info("domain configuration version %d applied", versioned.version)
                self.applied_version = max(self.applied_version, versioned.version)
            except Exception as exc:  # noqa: BLE001 - Redis away: the resync loop retries
                logger.warning("domain configuration version %d not applied yet: %s",
                               versioned.version, exc)

    def _resync_loop(self) -> None:
        while not self._stop.wait(RESYNC_S):
            try:
                current = self.source.read()
            except Exception as exc:  # noqa: BLE001 - source away: its watch reconnects
                logger.warning("domain configuration source unreadable: %s", exc)
                continue
            if current.version != self.applied_version:
                self.apply(current)

    def close(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.close()
        self._thread.join(5)
