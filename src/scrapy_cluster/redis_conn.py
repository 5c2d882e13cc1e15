"""Redis connection settings and client construction (sync and asyncio).

No client is created at import time: composition roots call
``RedisConfig.from_settings(settings).sync_client()`` and own the result.

The asyncio client's connections pack commands with hiredis (``HiredisPacking``), as
redis-py's sync client does: redis-py's asyncio packer is pure Python, and an enqueue of a
page's links is one EVALSHA of a few hundred arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.connection
from redis.connection import parse_url
from redis.utils import HIREDIS_AVAILABLE

from scrapy_cluster.errors import SettingsError
from scrapy_cluster.settings.masking import mask_url

REDIS_URL_SCHEMES = ("redis", "rediss", "unix")

hiredis_pack_command: Callable[[tuple[Any, ...]], bytes] | None = None
if HIREDIS_AVAILABLE:  # redis-py's own test: hiredis importable, and a version it supports
    from hiredis import pack_command as hiredis_pack_command


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


HIREDIS_PACKED_TYPES = frozenset({str, bytes, int, float})
"""Argument types hiredis writes exactly as redis-py's ``Encoder`` does (str as UTF-8, int
and float as their ``repr``). Anything else (bool, memoryview, bytearray, subclasses such as
an ``IntEnum``) is packed by redis-py itself, which also raises its own errors."""


class HiredisPacking(redis.asyncio.connection.AbstractConnection):
    """An asyncio connection whose ``pack_command`` is hiredis's C packer, falling back to
    redis-py's own for anything else than UTF-8 (strict) and ``HIREDIS_PACKED_TYPES``.

    The bytes on the wire are redis-py's, byte for byte (``tests/test_redis_packing.py``);
    one buffer per command instead of redis-py's chunks, which only spares a copy of
    values over 6 KB. No round trip of its own: ~5x less CPU for a command of a few hundred
    arguments (the enqueue of a page's links).
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        encoder = self.encoder
        if (hiredis_pack_command is None or not args or type(args[0]) is not str
                or encoder.encoding != "utf-8" or encoder.encoding_errors != "strict"
                or not HIREDIS_PACKED_TYPES.issuperset(map(type, args))):
            return super().pack_command(*args)
        # As redis-py: the command name may carry words of its own ("CLIENT SETNAME").
        name = args[0]
        words = name.encode().split()
        if len(words) != 1 or len(words[0]) != len(name):
            args = (*words, *args[1:])
        try:
            return [hiredis_pack_command(args)]
        except (TypeError, UnicodeError):  # redis-py raises its own error for the same input
            return super().pack_command(*args)


class HiredisConnection(HiredisPacking, redis.asyncio.Connection):
    """TCP (``redis://``)."""


class HiredisSSLConnection(HiredisPacking, redis.asyncio.SSLConnection):
    """TLS (``rediss://``)."""


class HiredisUnixDomainSocketConnection(HiredisPacking, redis.asyncio.UnixDomainSocketConnection):
    """Unix socket (``unix://``)."""


_HIREDIS_PACKING: dict[type[Any], type[Any]] = {
    redis.asyncio.Connection: HiredisConnection,
    redis.asyncio.SSLConnection: HiredisSSLConnection,
    redis.asyncio.UnixDomainSocketConnection: HiredisUnixDomainSocketConnection,
}


def hiredis_packing(connection_class: type[Any]) -> type[Any]:
    """The ``HiredisPacking`` twin of one of redis-py's asyncio connection classes; any
    other class (or any class without hiredis) as it is."""
    if not HIREDIS_AVAILABLE or hiredis_pack_command is None:
        return connection_class
    return _HIREDIS_PACKING.get(connection_class, connection_class)


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
        """A new asyncio client (bytes responses) packing commands with hiredis.

        Built as ``redis.asyncio.Redis.from_url`` builds it (the URL's options win over
        keyword arguments), with the URL's connection class swapped for its
        ``hiredis_packing`` twin; the client owns and closes its pool."""
        kwargs: dict[str, Any] = {**self._kwargs(), **overrides,
                                  **redis.asyncio.connection.parse_url(self.url)}
        kwargs["connection_class"] = hiredis_packing(
            kwargs.get("connection_class", redis.asyncio.Connection))
        return redis.asyncio.Redis.from_pool(redis.asyncio.ConnectionPool(**kwargs))
