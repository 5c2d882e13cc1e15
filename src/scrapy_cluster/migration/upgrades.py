"""Upgrades of our Redis key layout, one version to the next (``scrapy-cluster migrate``).

``UPGRADES[n]`` turns layout version n into n + 1; ``upgrade`` applies them in order and stamps
each new version (``layout.py`` holds the stamp), so an interrupted upgrade resumes at the step
that did not finish (every step must be safe to repeat).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import SchemaVersionError
from scrapy_cluster.layout import SCHEMA_VERSION, read_version, refuse_unknown


@dataclass(frozen=True)
class UpgradeStep:
    """Turns layout ``n`` into ``n + 1``; ``apply`` must be idempotent (a re-run repeats it)."""

    description: str
    apply: Callable[[redis.Redis], None]


def _nothing_to_change(client: redis.Redis) -> None:
    """Version 0 is our layout without the stamp: stamping is the whole upgrade."""


def _recrawl_keys_are_new(client: redis.Redis) -> None:
    """Layout 2 adds keys (re-crawl schedules) and an optional part of item heads; every
    layout 1 key and item is read as it is."""


UPGRADES: Mapping[int, UpgradeStep] = {
    0: UpgradeStep("stamp the layout version (the keys are already version 1)", _nothing_to_change),
    1: UpgradeStep("re-crawl schedules: new keys only, nothing to rewrite (the version keeps "
                   "releases that do not know re-crawls off this Redis)", _recrawl_keys_are_new),
}


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
