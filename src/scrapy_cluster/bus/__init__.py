"""The message bus: one interface (``MessageBus``), two backends (Kafka, Redis Streams).

``create_bus(settings)`` picks the backend named by ``BUS_BACKEND``. See
``base`` for the contract both backends keep, and ``topics`` for topic names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

from scrapy_cluster.bus import topics
from scrapy_cluster.bus.base import Consumer, Message, MessageBus, Producer
from scrapy_cluster.errors import SettingsError

BACKENDS = ("kafka", "redis")


def create_bus(settings: Mapping[str, Any], *, redis_client: redis.Redis | None = None) -> MessageBus:
    """The bus named by ``BUS_BACKEND``.

    The Redis backend uses ``redis_client`` when given (the caller keeps
    owning it), else a client built from the Redis settings (closed by
    ``bus.close()``).
    """
    backend = settings["BUS_BACKEND"]
    if backend == "kafka":
        from scrapy_cluster.bus.kafka import KafkaBus

        return KafkaBus.from_settings(settings)
    if backend == "redis":
        from scrapy_cluster.bus.redis_streams import RedisStreamsBus

        return RedisStreamsBus.from_settings(settings, client=redis_client)
    raise SettingsError(f"BUS_BACKEND must be one of {', '.join(BACKENDS)}; got {backend!r}")


__all__ = ["BACKENDS", "Consumer", "Message", "MessageBus", "Producer", "create_bus", "topics"]
