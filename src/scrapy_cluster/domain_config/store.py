"""Where the domain configuration document lives: the interface both backends implement.

``DOMAIN_CONFIG_BACKEND`` chooses ``redis`` (the default: the document and its version in
Redis, applied to the keys the frontier reads in the same transaction) or ``zookeeper`` (the
document in a ZooKeeper node; ``scrapy-cluster config sync`` mirrors every version into Redis).
Both are checked by one contract suite (``tests/test_domain_config_contract.py``).

Every write is a compare-and-set on the version it was based on, so concurrent
read-modify-write updates (the API's ``domain-update``, ``blacklist-add``, ...) never lose one
another: ``update`` retries a lost race with the newer document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from scrapy_cluster.domain_config.document import DomainDocument
from scrapy_cluster.errors import DomainConfigConflictError

UPDATE_ATTEMPTS = 50


@dataclass(frozen=True)
class VersionedDocument:
    """A document and its version (0: nothing stored yet; every write adds at least one)."""

    document: DomainDocument
    version: int


class DomainConfigStore(Protocol):
    """Read, replace and watch the cluster's domain configuration document."""

    def read(self) -> VersionedDocument:
        """The current document (an empty one at version 0 when none was ever written)."""
        ...

    def write(self, document: DomainDocument, *, expected_version: int) -> int:
        """Replace the whole document if the stored version is still ``expected_version``;
        returns the new version. Raises ``DomainConfigConflictError`` otherwise."""
        ...

    def close(self) -> None: ...


def update(store: DomainConfigStore, change: Callable[[DomainDocument], DomainDocument],
           attempts: int = UPDATE_ATTEMPTS) -> VersionedDocument:
    """Read-modify-write with compare-and-set, retried while other writers win the race."""
    for _ in range(attempts):
        current = store.read()
        changed = change(current.document)
        try:
            version = store.write(changed, expected_version=current.version)
        except DomainConfigConflictError:
            continue
        return VersionedDocument(changed, version)
    raise DomainConfigConflictError(f"domain configuration still changing after {attempts} "
                                    "attempts; try again")
