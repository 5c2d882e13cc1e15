"""The Redis backend of the domain configuration (``DOMAIN_CONFIG_BACKEND = "redis"``).

The document and its version live in ``domain-config:document`` (HASH ``version``, ``yaml``,
``source``: ``redis``, or the ZooKeeper node a mirror copied it from).
A write is one optimistic transaction: WATCH the document, check the version, then in one
MULTI/EXEC store the new document, replace the keys the frontier's pop script reads
(``domain-config:throttle``, ``domain-config:blacklist``) and PUBLISH the new version on
``domain-config:changes``. So the document and what crawlers obey never disagree, and every
crawler obeys a change on its next pop. Afterwards each changed domain is made due again in
every ready set (one script call per changed domain), which also wakes waiting crawlers.
Round trips per write: 5 + one per changed domain.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.domain_config.document import DomainDocument, Normalize, frontier_domain
from scrapy_cluster.domain_config.store import VersionedDocument
from scrapy_cluster.errors import DomainConfigConflictError
from scrapy_cluster.frontier.config import DomainConfig, DomainToucher
from scrapy_cluster.text import as_text

STORE_ATTEMPTS = 20
REDIS_SOURCE = "redis"
"""The ``source`` field of a document written through this store (a mirror names its own)."""


class RedisDomainConfigStore:
    """See module docstring; implements ``DomainConfigStore``."""

    def __init__(self, redis_client: redis.Redis, toucher: DomainToucher, *,
                 normalize: Normalize) -> None:
        self.redis = redis_client
        self.applier = DomainConfig(redis_client, toucher)
        self.normalize = normalize

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], redis_client: redis.Redis,
                      normalize: Normalize | None = None) -> RedisDomainConfigStore:
        from scrapy_cluster.frontier import Frontier

        return cls(redis_client, Frontier.from_settings(settings, redis_client),
                   normalize=normalize or frontier_domain())

    def read(self) -> VersionedDocument:
        return read_document(self.redis, self.normalize)

    def write(self, document: DomainDocument, *, expected_version: int) -> int:
        return self._store(document, REDIS_SOURCE,
                           lambda stored, _source: stored == expected_version,
                           lambda stored: stored + 1, f"is not at version {expected_version}")

    def mirror(self, versioned: VersionedDocument, source: str) -> bool:
        """Store and apply a version decided elsewhere (``source``, e.g. a ZooKeeper node),
        unless Redis already has it or a newer one from the same source. Returns whether it
        was applied."""
        try:
            self._store(versioned.document, source,
                        lambda stored, stored_source: stored_source != source
                        or stored < versioned.version,
                        lambda _stored: versioned.version, "already has it")
        except DomainConfigConflictError:
            return False
        return True

    def _store(self, document: DomainDocument, source: str,
               allowed: Callable[[int, str], bool], next_version: Callable[[int], int],
               refusal: str) -> int:
        """Compare-and-set of the document and the keys crawlers read, in one MULTI/EXEC.

        The throttle hash and blacklist are WATCHed too: a crawler writing a Crawl-delay entry
        meanwhile makes the transaction retry (the entry is then kept), instead of the entry
        being wiped by a replace computed before it existed.
        """
        for _ in range(STORE_ATTEMPTS):
            try:
                new_version, changed = self._store_once(document, source, allowed,
                                                        next_version, refusal)
            except redis.WatchError:
                continue
            self.applier.touch(changed)
            return new_version
        raise DomainConfigConflictError(
            f"domain configuration kept changing while it was being replaced "
            f"({STORE_ATTEMPTS} attempts)")

    def _store_once(self, document: DomainDocument, source: str,
                    allowed: Callable[[int, str], bool], next_version: Callable[[int], int],
                    refusal: str) -> tuple[int, set[str]]:
        document_key = keys.domain_config_document()
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.watch(document_key, keys.domain_throttle_config(), keys.domain_blacklist())
            version, stored_source = pipe.hmget(document_key, ["version", "source"])
            stored = int(version or 0)
            if not allowed(stored, as_text(stored_source or REDIS_SOURCE)):
                raise DomainConfigConflictError(
                    f"domain configuration (version {stored}) {refusal}")
            old_throttles, old_blacklist = DomainConfig.current_raw(pipe)
            pipe.multi()
            new_version = next_version(stored)
            pipe.hset(document_key, mapping={"version": new_version, "source": source,
                                             "yaml": document.to_yaml()})
            changed = DomainConfig.queue_replace(pipe, document.throttles,
                                                 set(document.blacklist), old_throttles,
                                                 old_blacklist)
            pipe.publish(keys.domain_config_changes(), new_version)
            pipe.execute()
        return new_version, changed

    def watch(self, callback: Callable[[VersionedDocument], None]) -> RedisWatch:
        """Call ``callback`` with the document after every write (from a background thread)."""
        return RedisWatch(self, callback).start()

    def close(self) -> None:
        return None


def read_document(redis_client: redis.Redis, normalize: Normalize) -> VersionedDocument:
    """The document stored in Redis (with the ZooKeeper backend, the copy ``config sync``
    mirrored: what the crawlers obey). Round trips: 1."""
    version, text = redis_client.hmget(keys.domain_config_document(), ["version", "yaml"])
    if version is None:
        return VersionedDocument(DomainDocument(), 0)
    document = DomainDocument.from_yaml(as_text(text or ""), normalize)
    return VersionedDocument(document, int(version))


def read_document_if_changed(redis_client: redis.Redis, normalize: Normalize,
                             known_version: int) -> VersionedDocument | None:
    """``read_document``, or None while the stored version is still ``known_version`` (its
    YAML then is neither fetched nor parsed). Round trips: 1, plus 1 when it changed."""
    version = redis_client.hget(keys.domain_config_document(), "version")
    if int(version or 0) == known_version:
        return None
    return read_document(redis_client, normalize)


class RedisWatch:
    """A subscription to ``domain-config:changes`` that reads each new version once."""

    def __init__(self, store: RedisDomainConfigStore,
                 callback: Callable[[VersionedDocument], None]) -> None:
        self.store, self.callback = store, callback
        self._pubsub = store.redis.pubsub(ignore_subscribe_messages=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="domain-config-watch",
                                        daemon=True)
        self._seen = -1

    def start(self) -> RedisWatch:
        self._pubsub.subscribe(keys.domain_config_changes())
        self._deliver()
        self._thread.start()
        return self

    def _deliver(self) -> None:
        current = self.store.read()
        if current.version > self._seen:
            self._seen = current.version
            self.callback(current)

    def _run(self) -> None:
        """Wait for change messages; after a lost connection (redis-py resubscribes on the
        next call) read the document again, since a change may have been missed meanwhile."""
        missed = False
        while not self._stop.is_set():
            try:
                if missed:
                    self._deliver()
                    missed = False
                if self._pubsub.get_message(timeout=1.0) is not None:
                    self._deliver()
            except (redis.ConnectionError, redis.TimeoutError):
                missed = True
                self._stop.wait(1.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._pubsub.close()
