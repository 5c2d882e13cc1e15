"""The version of our Redis key layout: the stamp in ``scrapy-cluster:schema`` and its check.

``scrapy-cluster:schema`` holds an integer. An absent key is version 0: "our layout, from before
versions were stamped" (or an empty Redis). The Kafka Monitor and the crawlers stamp
``SCHEMA_VERSION`` at start when none is stored and refuse any other version
(``check_at_start``: one round trip). The upgrades from one version to the next are
``scrapy-cluster migrate``'s (``migration/upgrades.py``).
"""

from __future__ import annotations

import logging

import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import SchemaVersionError

SCHEMA_VERSION = 2
"""The layout this code reads and writes. 2: re-crawl schedules (due buckets, the ``~scheduled``
count, items whose head carries a re-crawl state); a release that knows only 1 would pop such
items and acknowledge them without scheduling them again, ending their schedules silently, so
it must not run on a layout 2 Redis."""


def parse_version(raw: bytes | str | None) -> int:
    """The stored version; 0 when absent. ``SchemaVersionError`` when it is not an integer."""
    if raw is None:
        return 0
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    try:
        version = int(text)
    except ValueError:
        raise SchemaVersionError(
            f"Redis key {keys.schema_version()} holds {text!r}, not a layout version; this "
            f"scrapy-cluster supports version {SCHEMA_VERSION}. Run `scrapy-cluster migrate` "
            "with the release that wrote it, or fix the key.") from None
    if version < 0:
        raise SchemaVersionError(f"Redis key {keys.schema_version()} holds {version}: "
                                 "versions are never negative")
    return version


def refuse_unknown(version: int, supported: int = SCHEMA_VERSION) -> None:
    """``SchemaVersionError`` when ``version`` is not the one this code reads."""
    if version > supported:
        raise SchemaVersionError(
            f"Redis holds key layout version {version} but this scrapy-cluster supports "
            f"version {supported}: it was written by a newer release. Upgrade scrapy-cluster "
            "on this machine (or point it at another Redis).")
    if version < supported:
        raise SchemaVersionError(
            f"Redis holds key layout version {version} but this scrapy-cluster supports "
            f"version {supported}. Run `scrapy-cluster migrate` to upgrade it.")


def read_version(client: redis.Redis) -> int:
    """The stored version (0 when absent). One round trip."""
    return parse_version(client.get(keys.schema_version()))


def ensure_schema_version(client: redis.Redis) -> int:
    """Stamp ``SCHEMA_VERSION`` when no version is stored, then refuse any other version.

    Called by components at start. One round trip (SET NX and GET pipelined).
    """
    pipe = client.pipeline(transaction=False)
    pipe.set(keys.schema_version(), SCHEMA_VERSION, nx=True)
    pipe.get(keys.schema_version())
    version = parse_version(pipe.execute()[1])
    refuse_unknown(version)
    return version


def check_at_start(client: redis.Redis, logger: logging.Logger) -> None:
    """``ensure_schema_version`` for a component starting up: an unknown version raises, but
    an unreachable Redis only logs a warning (the component waits out outages itself)."""
    try:
        ensure_schema_version(client)
    except redis.RedisError as exc:
        logger.warning("could not check the Redis key layout version: %s", exc)
