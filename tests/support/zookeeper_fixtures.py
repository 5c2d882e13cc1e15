"""Fixtures for ZooKeeper (registered through ``pytest_plugins`` in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.starting import external_or_started
from tests.support.zookeeper import ZooKeeperServer, external_zookeeper


@pytest.fixture(scope="session")
def zookeeper_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """"127.0.0.1:<port>" of a private ZooKeeper for the session (or SC_TEST_ZOOKEEPER).

    The server starts on first use only; tests should work under a node path
    of their own, since the server is shared by the whole session.
    """
    for server in external_or_started(
            external_zookeeper(),
            lambda: ZooKeeperServer(Path(tmp_path_factory.mktemp("zookeeper")))):
        yield server if isinstance(server, str) else server.hosts
