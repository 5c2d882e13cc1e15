"""Shared fixtures: real services on free loopback ports, started only when a test asks.

With ``CI`` set, a service that cannot start is a test error; otherwise the
test is skipped with the reason and the install hint.

Under ``pytest -n N --dist loadgroup`` (``make test``) every worker starts its own
session services (on free ports, in its own temporary directory), each test file runs
whole on one worker (so its module fixtures start once), and the tests marked
``xdist_group("cpu-sensitive")`` run on one worker one after another.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

# The helpers of tests/support/ assert as the tests do, and pytest rewrites their asserts too (a
# failing one shows its values); it can only do so for modules imported after this line.
pytest.register_assert_rewrite("tests.support")

from tests.support.services import RedisServer  # noqa: E402
from tests.support.starting import external_or_started  # noqa: E402

pytest_plugins = ["tests.support.zookeeper_fixtures", "tests.support.bus_fixtures",
                  "tests.support.up_process"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup``, a test without an ``xdist_group`` is grouped by its file."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer | str]:
    """A private redis-server for the session (or the URL in SC_TEST_REDIS_URL)."""
    yield from external_or_started(os.environ.get("SC_TEST_REDIS_URL"),
                                   lambda: RedisServer(Path(tmp_path_factory.mktemp("redis"))))


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer | str) -> str:
    return redis_server if isinstance(redis_server, str) else redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A fresh client on an empty database; flushed after the test."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server owned by one test (it may stop, kill or restart it)."""
    for server in external_or_started(None, lambda: RedisServer(tmp_path / "redis-private")):
        assert isinstance(server, RedisServer)
        yield server
