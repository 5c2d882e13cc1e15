"""The domain configuration document in one ZooKeeper node (``DOMAIN_CONFIG_BACKEND=zookeeper``).

The node is ``ZOOKEEPER_ASSIGN_PATH`` + ``ZOOKEEPER_ID`` (``/scrapy-cluster/crawler/all`` by
default) and holds the document's YAML in UTF-8. Its version is the node's ``stat.version + 1``
(0: no node), so ZooKeeper's own conditional ``set`` is the compare-and-set ``update`` needs.
Deleting the node by hand starts the versions again at 1.

Every ``read`` and ``write`` is one round trip. The frontier does not read ZooKeeper: ``scrapy-
cluster config sync`` mirrors each version ``watch`` delivers into Redis (``sync.Mirror``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from scrapy_cluster.domain_config.document import DomainDocument, Normalize
from scrapy_cluster.domain_config.store import VersionedDocument
from scrapy_cluster.domain_config.zookeeper_client import (
    CONNECT_TIMEOUT_S,
    CallbackThread,
    NodeWatch,
    kazoo_client,
    start_client,
)
from scrapy_cluster.errors import DomainConfigConflictError, DomainConfigError

DEFAULT_ASSIGN_PATH = "/scrapy-cluster/crawler/"
DEFAULT_ID = "all"

logger = logging.getLogger("scrapy_cluster.domain_config")

VersionCallback = Callable[[VersionedDocument], None]


def node_path(assign_path: str, zookeeper_id: str) -> str:
    """``assign_path`` and ``zookeeper_id`` joined by exactly one slash."""
    return f"{assign_path.rstrip('/')}/{zookeeper_id.lstrip('/')}"


def parse_node(path: str, data: bytes, normalize: Normalize) -> DomainDocument:
    """The document a node holds; ``DomainConfigError`` names the node and the problem."""
    try:
        return DomainDocument.from_yaml(data.decode("utf-8"), normalize)
    except UnicodeDecodeError as exc:
        raise DomainConfigError(f"ZooKeeper node {path}: not UTF-8 text: {exc}") from exc
    except DomainConfigError as exc:
        raise DomainConfigError(f"ZooKeeper node {path}: {exc}") from exc


class ZookeeperDomainConfigStore:
    """``DomainConfigStore`` on the ZooKeeper node ``path`` (see the module docstring)."""

    def __init__(self, client: KazooClient, path: str, normalize: Normalize, *,
                 owns_client: bool = False) -> None:
        """``client`` must be started; ``close()`` stops it only if ``owns_client``."""
        self.client, self.path, self.normalize = client, path, normalize
        self.source = f"zookeeper:{path}"
        """Names this document's origin where it is mirrored (``sync.Mirror``)."""
        self._owns_client = owns_client
        self._watches: list[DomainConfigWatch] = []
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], normalize: Normalize, *,
                      connect_timeout_s: float | None = None) -> ZookeeperDomainConfigStore:
        """Connects to ``ZOOKEEPER_HOSTS`` within ``connect_timeout_s`` (default
        ZOOKEEPER_CONNECT_TIMEOUT_S; else ``ZookeeperUnavailableError``); the store owns that
        client."""
        if connect_timeout_s is None:
            connect_timeout_s = float(settings.get("ZOOKEEPER_CONNECT_TIMEOUT_S",
                                                   CONNECT_TIMEOUT_S))
        hosts = str(settings["ZOOKEEPER_HOSTS"])
        path = node_path(str(settings.get("ZOOKEEPER_ASSIGN_PATH", DEFAULT_ASSIGN_PATH)),
                         str(settings.get("ZOOKEEPER_ID", DEFAULT_ID)))
        client = kazoo_client(hosts)
        start_client(client, hosts, connect_timeout_s)
        return cls(client, path, normalize, owns_client=True)

    def read(self) -> VersionedDocument:
        """The current document (empty, version 0, when the node does not exist).
        Raises ``DomainConfigError`` when the node holds an invalid document."""
        try:
            data, stat = self.client.get(self.path)
        except NoNodeError:
            return VersionedDocument(DomainDocument(), 0)
        return VersionedDocument(parse_node(self.path, data, self.normalize), stat.version + 1)

    def write(self, document: DomainDocument, *, expected_version: int) -> int:
        """Replace the document if the node is still at ``expected_version`` (0: creates the
        node and its parents); returns the new version, else ``DomainConfigConflictError``."""
        data = document.to_yaml().encode("utf-8")
        if expected_version < 0:
            raise DomainConfigConflictError(f"no version {expected_version} can be stored")
        if expected_version == 0:
            return self._create(data)
        try:
            stat = self.client.set(self.path, data, version=expected_version - 1)
        except (BadVersionError, NoNodeError) as exc:
            raise self._conflict(expected_version) from exc
        return int(stat.version) + 1

    def watch(self, callback: VersionCallback) -> DomainConfigWatch:
        """Call ``callback`` with the current version, then with every new one, on a thread of
        its own until the handle's (or the store's) ``close()``; see ``DomainConfigWatch``."""
        watch = DomainConfigWatch(self.client, self.path, self.normalize, callback)
        with self._lock:
            self._watches.append(watch)
        return watch

    def close(self) -> None:
        """Close the watches; stop the client if the store created it. Idempotent."""
        with self._lock:
            watches, self._watches = self._watches, []
        for watch in watches:
            watch.close()
        if self._owns_client:
            self._owns_client = False
            try:
                self.client.stop()
            finally:
                self.client.close()

    def _create(self, data: bytes) -> int:
        try:
            self.client.create(self.path, data, makepath=True)
        except NodeExistsError as exc:
            raise self._conflict(0) from exc
        return 1

    def _conflict(self, expected_version: int) -> DomainConfigConflictError:
        return DomainConfigConflictError(
            f"domain configuration in {self.path} is no longer at version {expected_version}; "
            "read it again")


class DomainConfigWatch:
    """Delivers each new version of the node's document to ``callback``, one at a time, on
    its own thread: at once the current one, then every change, including changes made
    while ZooKeeper was unreachable (after the reconnection). A missing node is the empty
    document at version 0. A document that does not parse is logged (logger
    ``scrapy_cluster.domain_config``) and skipped: the previous one stays in force.
    The constructor reads the node once, so it blocks until the client is connected.
    """

    def __init__(self, client: KazooClient, path: str, normalize: Normalize,
                 callback: VersionCallback) -> None:
        self.path, self.normalize = path, normalize
        self._callback = callback
        self._callbacks = CallbackThread(f"domain-config-watch {path}")
        self._node_watch = NodeWatch(client, path, self._on_node, self._callbacks)

    def close(self) -> None:
        """No callback after this returns (unless called from the callback itself)."""
        self._node_watch.close()
        self._callbacks.close()

    def __enter__(self) -> DomainConfigWatch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def _on_node(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        if data is None or stat is None:
            self._callback(VersionedDocument(DomainDocument(), 0))
            return
        version = int(stat.version) + 1
        try:
            document = parse_node(self.path, data, self.normalize)
        except DomainConfigError as exc:
            logger.error("domain configuration version %d ignored, the previous one stays "
                         "in force: %s", version, exc)
            return
        self._callback(VersionedDocument(document, version))
