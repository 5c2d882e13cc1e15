"""Redis connection settings and client construction (sync and asyncio).

No client is created at import time: composition roots call
``RedisConfig.from_settings(settings).sync_client()`` and own the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio


@dataclass(frozen=True)
class RedisConfig:
    url: str
    socket_timeout_s: float = 10.0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RedisConfig:
        """``REDIS_URL`` wins; otherwise built from REDIS_HOST/PORT/DB/PASSWORD."""
        timeout = float(settings.get("REDIS_SOCKET_TIMEOUT", 10.0))
        url = settings.get("REDIS_URL")
        if url:
            return cls(url=str(url), socket_timeout_s=timeout)
        password = settings.get("REDIS_PASSWORD")
        auth = f":{password}@" if password else ""
        host = settings.get("REDIS_HOST", "localhost")
        port = int(settings.get("REDIS_PORT", 6379))
        db = int(settings.get("REDIS_DB", 0))
        return cls(url=f"redis://{auth}{host}:{port}/{db}", socket_timeout_s=timeout)

    def _kwargs(self) -> dict[str, Any]:
        return {
            "socket_timeout": self.socket_timeout_s,
            "socket_connect_timeout": min(self.socket_timeout_s, 5.0),
            "health_check_interval": 30,
        }

    def sync_client(self, **overrides: Any) -> redis.Redis:
        """A new synchronous client (bytes responses)."""
        return redis.Redis.from_url(self.url, **{**self._kwargs(), **overrides})

    def async_client(self, **overrides: Any) -> redis.asyncio.Redis:
        """A new asyncio client (bytes responses)."""
        return redis.asyncio.Redis.from_url(self.url, **{**self._kwargs(), **overrides})
