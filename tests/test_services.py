"""The test services are real: each fixture's server answers its own protocol."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from tests.support.services import RedisServer, ServiceUnavailable
from tests.support.starting import service_unavailable
from tests.support.zookeeper import ZooKeeperServer, is_serving

pytestmark = pytest.mark.integration


@pytest.fixture
def kazoo(zookeeper_hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zookeeper_hosts)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def test_redis_fixture_answers_ping(redis_client: redis.Redis) -> None:
    assert redis_client.ping() is True


def test_private_redis_answers_ping_after_restart(private_redis: RedisServer) -> None:
    private_redis.restart()
    client = redis.Redis.from_url(private_redis.url)
    try:
        assert client.ping() is True
    finally:
        client.close()


def test_kafka_fixture_answers_a_metadata_request_naming_itself(kafka_bootstrap: str) -> None:
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30)
    assert [f"{broker.host}:{broker.port}" for broker in metadata.brokers.values()] == [
        kafka_bootstrap]


def test_zookeeper_fixture_stores_and_returns_a_node(kazoo: KazooClient) -> None:
    path = f"/sc-test/{uuid.uuid4().hex}/config"
    kazoo.create(path, b"domain: example.com", makepath=True)
    data, stat = kazoo.get(path)
    assert (data, stat.version) == (b"domain: example.com", 0)


def test_zookeeper_fixture_reports_a_changed_node_version(kazoo: KazooClient) -> None:
    path = f"/sc-test/{uuid.uuid4().hex}"
    kazoo.create(path, b"v0", makepath=True)
    kazoo.set(path, b"v1")
    data, stat = kazoo.get(path)
    assert (data, stat.version) == (b"v1", 1)


def test_zookeeper_server_stops_listening_when_stopped(tmp_path: Path) -> None:
    try:
        server = ZooKeeperServer(tmp_path / "zk")
        server.start()
    except ServiceUnavailable as exc:
        service_unavailable(exc)
        return
    assert is_serving(server.host, server.port) is True
    server.stop()
    assert is_serving(server.host, server.port) is False


def test_missing_zookeeper_script_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(ServiceUnavailable, match="apt-get install zookeeperd"):
        ZooKeeperServer(tmp_path, script=tmp_path / "no-such-zkServer.sh")


def test_a_server_binary_that_cannot_run_is_reported_as_unavailable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SC_TEST_REDIS_SERVER", str(tmp_path / "no-such-redis-server"))
    server = RedisServer(tmp_path / "redis")
    with pytest.raises(ServiceUnavailable, match="cannot run .*no-such-redis-server"):
        server.start()
