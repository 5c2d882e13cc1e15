"""Fixtures for ZooKeeper (registered through ``pytest_plugins`` in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import service_unavailable
from tests.support.services import ServiceUnavailable
from tests.support.zookeeper import ZooKeeperServer, external_zookeeper


@pytest.fixture(scope="session")
def zookeeper_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """"127.0.0.1:<port>" of a private ZooKeeper for the session (or SC_TEST_ZOOKEEPER).

    The server starts on first use only; tests should work under a node path
    of their own, since the server is shared by the whole session.
    """
    external = external_zookeeper()
    if external:
        yield external
        return
    try:
        server = ZooKeeperServer(Path(tmp_path_factory.mktemp("zookeeper")))
        server.start()
    except ServiceUnavailable as exc:
        service_unavailable(exc)
        return
    yield server.hosts
    server.stop()
