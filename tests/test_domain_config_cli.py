"""``scrapy-cluster config push / show / sync`` on the Redis backend against a real Redis."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from scrapy_cluster.cli import main
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from tests.support.frontier import make_frontier

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
    assert names == ["kafka-monitor", "redis-monitor", "rest", "config-sync", "crawler-1"]
    assert [name for name, _ in embedded_components(1, "link")] == [
        "kafka-monitor", "redis-monitor", "rest", "crawler-1"]
    settings = load_settings(environ={}, overrides={"DOMAIN_CONFIG_BACKEND": "zookeeper",
                                                    "ZOOKEEPER_HOSTS": "127.0.0.1:2199"})
    env = cluster_environment(settings, "redis://127.0.0.1:1/0")
    assert (env["DOMAIN_CONFIG_BACKEND"], env["ZOOKEEPER_HOSTS"]) == ("zookeeper", "127.0.0.1:2199")
    assert "ZOOKEEPER_HOSTS" not in cluster_environment(load_settings(environ={}), "redis://x")


class Watching:
    """``scrapy-cluster config watch`` in a subprocess; its output lines, read as they come."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "scrapy_cluster", *args], env={**os.environ, **env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, wanted: str, timeout_s: float = 30.0) -> list[str]:
        """Lines read until ``wanted`` (inclusive); fails after ``timeout_s``."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            seen.append(line)
            if line == wanted:
                return seen
        raise AssertionError(f"{wanted!r} not printed; got {seen}")

    def stop(self) -> int:
        """SIGTERM, then the exit code once the output is read to its end and closed."""
        os.killpg(self.process.pid, signal.SIGTERM)
        code = self.process.wait(20)
        self.reader.join(5)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code


def test_watch_prints_each_new_version_with_its_changes(
        redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    watching = Watching(["--redis-url", redis_url, "config", "watch"], {})
    try:
        assert watching.wait_for("version 0") == ["version 0"]
        run(redis_url, "push", "-f", write(tmp_path, "blacklist: [a.com]"))
        assert watching.wait_for("+ blacklist a.com") == ["version 1", "+ blacklist a.com"]
    finally:
        assert watching.stop() == 0


def test_watch_pointer_follows_the_pointer_and_the_pointed_node(zookeeper_hosts: str) -> None:
    from kazoo.client import KazooClient

    root = f"/sc-pointer-{uuid.uuid4().hex}"
    client = KazooClient(hosts=zookeeper_hosts)
    client.start(timeout=30)
    client.create(f"{root}/real1", b"blacklist: [a.com]", makepath=True)
    client.create(f"{root}/real2", b"blacklist: [b.com]")
    client.create(f"{root}/assign/all", f"{root}/real1".encode(), makepath=True)
    env = {"DOMAIN_CONFIG_BACKEND": "zookeeper", "ZOOKEEPER_HOSTS": zookeeper_hosts,
           "ZOOKEEPER_ASSIGN_PATH": f"{root}/assign/", "ZOOKEEPER_ID": "all"}
    watching = Watching(["config", "watch", "--pointer"], env)
    try:
        watching.wait_for("+ blacklist a.com")
        client.set(f"{root}/real1", b"blacklist: [a.com, c.com]")
        watching.wait_for("+ blacklist c.com")
        client.set(f"{root}/assign/all", f"{root}/real2".encode())
        lines = watching.wait_for("- blacklist c.com")
        assert lines[-3:] == ["+ blacklist b.com", "- blacklist a.com", "- blacklist c.com"]
    finally:
        assert watching.stop() == 0
        client.stop()
        client.close()


def test_an_unknown_backend_is_refused_by_name(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOMAIN_CONFIG_BACKEND", "etcd")
    result = run(redis_url, "show")
    assert result.exit_code == 1
    assert "DOMAIN_CONFIG_BACKEND must be one of redis, zookeeper, got 'etcd'" in result.output
