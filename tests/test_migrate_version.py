"""The key layout version in ``scrapy-cluster:schema``: stamped, checked, upgraded step by step."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from scrapy_cluster import keys, layout
from scrapy_cluster.errors import SchemaVersionError
from scrapy_cluster.migration import upgrades

pytestmark = pytest.mark.integration


def test_a_component_stamps_the_version_when_none_is_stored(redis_client: redis.Redis) -> None:
    assert (layout.ensure_schema_version(redis_client),
            redis_client.get(keys.schema_version())) == (2, b"2")


@pytest.mark.parametrize("stored", [b"3", b"1", b"abc"])
def test_an_unknown_version_is_refused(redis_client: redis.Redis, stored: bytes) -> None:
    redis_client.set(keys.schema_version(), stored)
    with pytest.raises(SchemaVersionError, match="supports version 2"):
        layout.ensure_schema_version(redis_client)


@pytest.mark.parametrize(("stored", "reasons"), [
    ("3", ("layout version 3", "supports version 2")),
    ("1.5", ("'1.5'", "scrapy-cluster migrate"))], ids=["newer-layout", "not-a-number"])
def test_the_crawler_refuses_to_start_on_a_layout_it_does_not_support(
        redis_url: str, redis_client: redis.Redis, stored: str, reasons: tuple[str, str]) -> None:
    redis_client.set(keys.schema_version(), stored)
    env = {**os.environ, "REDIS_URL": redis_url, "BUS_BACKEND": "redis"}
    done = subprocess.run([sys.executable, "-m", "scrapy_cluster", "crawler", "--spider", "link"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert reasons[0] in done.stderr and reasons[1] in done.stderr


def _steps(log: list[str]) -> dict[int, upgrades.UpgradeStep]:
    def step(name: str) -> upgrades.UpgradeStep:
        return upgrades.UpgradeStep(name, lambda client: log.append(name))

    return {0: step("zero to one"), 1: step("one to two")}


def test_upgrades_run_in_order_from_an_unversioned_layout(redis_client: redis.Redis) -> None:
    applied: list[str] = []
    lines = upgrades.upgrade(redis_client, steps=_steps(applied), target=2)
    assert (applied, len(lines), redis_client.get(keys.schema_version())) == \
        (["zero to one", "one to two"], 2, b"2")


def test_an_upgrade_resumes_at_the_stored_version(redis_client: redis.Redis) -> None:
    redis_client.set(keys.schema_version(), 1)
    applied: list[str] = []
    upgrades.upgrade(redis_client, steps=_steps(applied), target=2)
    assert applied == ["one to two"]


def test_an_upgraded_layout_needs_no_more_steps(redis_client: redis.Redis) -> None:
    applied: list[str] = []
    upgrades.upgrade(redis_client, steps=_steps(applied), target=2)
    assert upgrades.upgrade(redis_client, steps=_steps(applied), target=2) == []


def test_a_dry_run_upgrade_changes_nothing(redis_client: redis.Redis) -> None:
    applied: list[str] = []
    lines = upgrades.upgrade(redis_client, dry_run=True, steps=_steps(applied), target=2)
    assert (len(lines), applied, redis_client.get(keys.schema_version())) == (2, [], None)


def test_the_shipped_upgrades_reach_the_current_layout(redis_client: redis.Redis) -> None:
    redis_client.set(keys.schema_version(), 1)
    redis_client.rpush("link:a.com:queue:1:c1", b'1:abc {"u":"http://a.com/"}')
    lines = upgrades.upgrade(redis_client)
    assert lines == ["layout 1 -> 2: " + upgrades.UPGRADES[1].description]
    assert (layout.ensure_schema_version(redis_client),
            redis_client.lrange("link:a.com:queue:1:c1", 0, -1)) == (
        2, [b'1:abc {"u":"http://a.com/"}'])
