"""The version of our Redis key layout, and the registry of upgrades between versions.

``scrapy-cluster:schema`` holds an integer. An absent key is version 0: "our layout, from before
versions were stamped" (or an empty Redis). ``UPGRADES[n]`` turns version n into n + 1;
``upgrade`` applies them in order and stamps each new version, so an interrupted upgrade resumes
at the step that did not finish (every step must be safe to repeat).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import SchemaVersionError

SCHEMA_VERSION = 1
"""The layout this code reads and writes."""


@dataclass(frozen=True)
class UpgradeStep:
    """Turns layout ``n`` into ``n + 1``; ``apply`` must be idempotent (a re-run repeats it)."""

    description: str
    apply: Callable[[redis.Redis], None]


def _nothing_to_change(client: redis.Redis) -> None:
    """Version 0 is our layout without the stamp: stamping is the whole upgrade."""


UPGRADES: Mapping[int, UpgradeStep] = {
    0: UpgradeStep("stamp the layout version (the keys are already version 1)", _nothing_to_change),
}


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


def upgrade(client: redis.Redis, *, dry_run: bool = False,
            steps: Mapping[int, UpgradeStep] = UPGRADES,
            target: int = SCHEMA_VERSION) -> list[str]:
    """Apply ``steps`` from the stored version up to ``target``; returns one line per step
    (applied, or that would be applied with ``dry_run``). Bounded: at most ``target`` steps.
    Round trips: 1 to read, then per step its own plus 1 to stamp."""
    current = read_version(client)
    if current > target:
        refuse_unknown(current, target)
    done = []
    for version in range(current, target):
        step = steps.get(version)
        if step is None:
            raise SchemaVersionError(f"no upgrade from layout version {version} to {version + 1}")
        if not dry_run:
            step.apply(client)
            client.set(keys.schema_version(), version + 1)
        done.append(f"layout {version} -> {version + 1}: {step.description}")
    return done
