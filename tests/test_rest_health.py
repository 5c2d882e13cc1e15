"""``GET /`` follows the real state of Redis and the broker: a real ``scrapy-cluster rest``
process while a private redis-server and a private broker are stopped and started again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.kafka_broker import KafkaBroker
from tests.support.rest import rest_process
from tests.support.services import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _health(url: str) -> tuple[bool, bool, str]:
    body = httpx.get(url + "/", timeout=5).json()
    return body["redis_connected"], body["kafka_connected"], body["node_health"]


def wait_for_health(url: str, expected: tuple[bool, bool, str], timeout_s: float = 40) -> None:
    deadline = time.monotonic() + timeout_s
    seen: Any = None
    while time.monotonic() < deadline:
        seen = _health(url)
        if seen == expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"health stayed {seen}, expected {expected}")


def test_health_follows_redis_and_the_broker(private_redis: RedisServer, tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "kafka")
    broker.start()
    try:
        env = {"BUS_BACKEND": "kafka", "KAFKA_HOSTS": broker.bootstrap,
               "REDIS_URL": private_redis.url, "KAFKA_CONN_TIMEOUT": "1",
               "REDIS_SOCKET_TIMEOUT": "1", "REST_HEALTH_INTERVAL_S": "0.5",
               "KAFKA_TOPIC_PREFIX": "health", "LOG_LEVEL": "INFO"}
        with rest_process(env, tmp_path / "rest.log") as (url, _):
            wait_for_health(url, (True, True, "GREEN"))
            broker.stop()
            wait_for_health(url, (True, False, "YELLOW"))
            private_redis.stop()
            wait_for_health(url, (False, False, "RED"))
            private_redis.start()
            wait_for_health(url, (True, False, "YELLOW"))
            broker.start()
            wait_for_health(url, (True, True, "GREEN"))
        log = (tmp_path / "rest.log").read_text()
        # One line per change of health, not one per check.
        assert log.count("Rest service health YELLOW") == 2
        assert log.count("Rest service health RED") == 1
        assert log.count("Rest service health GREEN") == 1
    finally:
        broker.stop()


def test_health_on_the_redis_streams_bus(private_redis: RedisServer, tmp_path: Path) -> None:
    env = {"BUS_BACKEND": "redis", "REDIS_URL": private_redis.url, "REDIS_SOCKET_TIMEOUT": "1",
           "REST_HEALTH_INTERVAL_S": "0.5", "KAFKA_TOPIC_PREFIX": "health"}
    with rest_process(env, tmp_path / "rest.log") as (url, _):
        wait_for_health(url, (True, True, "GREEN"))
        private_redis.stop()
        wait_for_health(url, (False, False, "RED"))
        private_redis.start()
        wait_for_health(url, (True, True, "GREEN"))
