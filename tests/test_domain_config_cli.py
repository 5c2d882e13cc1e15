"""``scrapy-cluster config push / show / sync`` on the Redis backend against a real Redis."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from scrapy_cluster.cli import main
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from tests.test_frontier_helpers import make_frontier

pytestmark = pytest.mark.integration


def run(redis_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--redis-url", redis_url, "config", *args],
                              catch_exceptions=False)


def write(tmp_path: Path, text: str, name: str = "domains.yml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_push_stores_applies_and_prints_the_changes(
        redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    result = run(redis_url, "push", "-f", write(tmp_path, "domains: {www.a.com: {window: 60, "
                                                          "hits: 2}}\nblacklist: [b.com]"))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["+ blacklist b.com", "+ domain a.com: 2 per 60s",
                                          "version 1"]
    config = DomainConfig(redis_client, make_frontier(redis_client))
    assert (config.throttles(), config.blacklist()) == \
        ({"a.com": DomainThrottle(window_s=60.0, hits=2)}, {"b.com"})


def test_an_invalid_file_is_refused_and_the_previous_document_stays(
        redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    assert run(redis_url, "push", "-f", write(tmp_path, "blacklist: [b.com]")).exit_code == 0
    result = run(redis_url, "push", "-f", write(tmp_path, "domains: {a.com: {hits: 1}}", "bad.yml"))
    assert result.exit_code == 1
    assert "bad.yml: domain 'a.com': 'window' is required" in result.output
    shown = run(redis_url, "show")
    assert shown.output.startswith("# version 1\n") and "- b.com" in shown.output


def test_dry_run_shows_the_changes_and_stores_nothing(
        redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    result = run(redis_url, "push", "--dry-run", "-f", write(tmp_path, "blacklist: [c.com]"))
    assert (result.exit_code, result.output) == (0, "+ blacklist c.com\n")
    assert run(redis_url, "show").output.startswith("# version 0\n")


def test_pushing_the_same_document_again_changes_nothing(
        redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    path = write(tmp_path, "blacklist: [c.com]")
    run(redis_url, "push", "-f", path)
    assert run(redis_url, "push", "-f", path).output == "no changes; version 1\n"


def test_sync_refuses_the_redis_backend(redis_url: str, redis_client: redis.Redis) -> None:
    result = run(redis_url, "sync")
    assert result.exit_code == 1 and "DOMAIN_CONFIG_BACKEND=zookeeper" in result.output


def test_up_runs_the_config_mirror_only_with_the_zookeeper_backend() -> None:
    from scrapy_cluster.cli.up_cmd import cluster_environment, embedded_components
    from scrapy_cluster.settings import load_settings

    names = [name for name, _ in embedded_components(1, "link", config_sync=True)]
    assert names == ["kafka-monitor", "config-sync", "crawler-1"]
    assert [name for name, _ in embedded_components(1, "link")] == ["kafka-monitor", "crawler-1"]
    settings = load_settings(environ={}, overrides={"DOMAIN_CONFIG_BACKEND": "zookeeper",
                                                    "ZOOKEEPER_HOSTS": "127.0.0.1:2199"})
    env = cluster_environment(settings, "redis://127.0.0.1:1/0")
    assert (env["DOMAIN_CONFIG_BACKEND"], env["ZOOKEEPER_HOSTS"]) == ("zookeeper", "127.0.0.1:2199")
    assert "ZOOKEEPER_HOSTS" not in cluster_environment(load_settings(environ={}), "redis://x")
