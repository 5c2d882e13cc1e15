"""Redis connection settings and client construction (sync and asyncio).

No client is created at import time: composition roots call
``RedisConfig.from_settings(settings).sync_client()`` and own the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis.connection import parse_url

from scrapy_cluster.errors import SettingsError
from scrapy_cluster.settings.masking import mask_url

REDIS_URL_SCHEMES = ("redis", "rediss", "unix")


def validate_redis_url(url: str) -> None:
    """Raise ``SettingsError`` (one line, password masked) unless ``url`` is a Redis URL that
    redis-py can parse: ``redis://``, ``rediss://`` or ``unix://``, a numeric port and db."""
    shown = mask_url(url)
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in REDIS_URL_SCHEMES:
        example = f"redis://{url}/0" if "://" not in url and "/" not in url else \
            "redis://localhost:6379/0"
        raise SettingsError(f"REDIS_URL {shown!r} is not a Redis URL: it must start with "
                            f"redis://, rediss:// or unix:// (e.g. {example})")
    try:
        _ = urlsplit(url).port
        parse_url(url)
    except ValueError as exc:
        raise SettingsError(f"REDIS_URL {shown!r} is not a valid Redis URL: {exc}") from exc


@dataclass(frozen=True)
class RedisConfig:
    url: str
    socket_timeout_s: float = 10.0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RedisConfig:
        """``REDIS_URL`` wins (``SettingsError`` when it is not a Redis URL); otherwise built
        from REDIS_HOST/PORT/DB/PASSWORD."""
        timeout = float(settings.get("REDIS_SOCKET_TIMEOUT", 10.0))
        url = settings.get("REDIS_URL")
        if url:
            validate_redis_url(str(url))
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
