"""What ``scrapy-cluster up`` checks before it starts a component: each failure is one line
naming the setting to change, instead of components that crash-loop without saying why.

- the Rest service's port is free (FLASK_PORT, ``up --port``);
- the Redis in REDIS_URL answers PING (the embedded one is checked by its own start);
- on Kafka, the brokers in KAFKA_HOSTS answer a metadata request.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from typing import Any

import redis

from scrapy_cluster.bus import create_bus
from scrapy_cluster.errors import BusError, ServiceError
from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.settings.masking import mask_url

CHECK_TIMEOUT_S = 5.0


def check_port_free(host: str, port: int) -> None:
    """``ServiceError`` when nothing could listen on ``host:port`` (SO_REUSEADDR, as uvicorn
    binds: connections a stopped server left in TIME_WAIT do not count)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            reason = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc})"
            raise ServiceError(
                f"the Rest service's port {port} on {host} {reason}; stop what listens there "
                "or choose another port with `up --port N` (FLASK_PORT)") from exc


def check_redis(settings: Mapping[str, Any], timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """``ServiceError`` unless the Redis of ``settings`` answers PING within ``timeout_s``."""
    config = RedisConfig.from_settings(settings)
    client = config.sync_client(socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise ServiceError(f"Redis at {mask_url(config.url)} (REDIS_URL) does not answer: "
                           f"{exc}; start it, fix REDIS_URL, or unset it to use the embedded "
                           "Redis") from exc
    finally:
        client.close()


def check_bus(settings: Mapping[str, Any]) -> None:
    """``ServiceError`` unless the bus of ``settings`` answers (Kafka: a metadata request
    within KAFKA_CONN_TIMEOUT; Redis Streams: its Redis, see ``check_redis``)."""
    if settings["BUS_BACKEND"] != "kafka":
        return
    bus = create_bus(settings)
    try:
        bus.list_topics()
    except BusError as exc:
        raise ServiceError(f"Kafka at {settings['KAFKA_HOSTS']} (KAFKA_HOSTS) does not answer: "
                           f"{exc}") from exc
    finally:
        bus.close()
