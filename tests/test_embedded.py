"""The embedded Redis server keeps data across restarts; the supervisor restarts and stops children."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from scrapy_cluster.embedded import ChildSpec, EmbeddedRedis, Supervisor

pytestmark = pytest.mark.integration

TICKER = [sys.executable, "-c",
          "import time, os\nprint('hello from', os.getpid(), flush=True)\n"
          "while True: time.sleep(0.05)"]


def wait_until(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_embedded_redis_keeps_data_and_port_across_restart(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "data")
    url = server.start()
    client = redis.Redis.from_url(url)
    client.rpush("backlog", "a", "b")
    client.close()
    server.stop()
    again = EmbeddedRedis(tmp_path / "data")
    assert again.start() == url
    client = redis.Redis.from_url(url)
    assert client.lrange("backlog", 0, -1) == [b"a", b"b"]
    assert client.info("server")["redis_version"].startswith("6.2")
    client.close()
    again.stop()


def test_supervisor_prefixes_child_output(tmp_path: Path) -> None:
    lines: list[str] = []
    supervisor = Supervisor([ChildSpec("ticker", TICKER)], sink=lines.append)
    supervisor.start()
    try:
        assert wait_until(lambda: any(line.startswith("[ticker] hello from") for line in lines))
    finally:
        supervisor.stop()


def test_supervisor_restarts_a_killed_child(tmp_path: Path) -> None:
    lines: list[str] = []
    supervisor = Supervisor([ChildSpec("a", TICKER), ChildSpec("b", TICKER)], sink=lines.append,
                            backoff_initial_s=0.1)
    supervisor.start()
    runner = threading.Thread(target=supervisor.run, daemon=True)
    runner.start()
    try:
        first_pid = supervisor.pids()["a"]
        os.kill(first_pid, signal.SIGKILL)
        assert wait_until(lambda: supervisor.pids().get("a") not in (None, first_pid))
        assert supervisor.restarts() == {"a": 1, "b": 0}
        assert any("a exited with code -9" in line for line in lines)
    finally:
        supervisor.stop()
        runner.join(5)


def test_supervisor_stop_terminates_every_child() -> None:
    stubborn = [sys.executable, "-c",
                "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "print('ready', flush=True)\nwhile True: time.sleep(0.05)"]
    lines: list[str] = []
    supervisor = Supervisor([ChildSpec("polite", TICKER), ChildSpec("stubborn", stubborn)],
                            sink=lines.append)
    supervisor.start()
    assert wait_until(lambda: "[stubborn] ready" in lines)
    codes = supervisor.stop(timeout_s=1.0)
    assert codes == {"polite": -signal.SIGTERM, "stubborn": -signal.SIGKILL}
    assert supervisor.pids() == {}


def test_commands_next_to_a_running_cluster_find_its_redis(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy_cluster.embedded.discovery import clear_running_cluster, write_running_cluster
    from scrapy_cluster.settings import load_settings

    monkeypatch.setenv("SC_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("BUS_BACKEND", raising=False)
    monkeypatch.chdir(tmp_path)
    write_running_cluster(tmp_path, {"REDIS_URL": "redis://127.0.0.1:7/0", "BUS_BACKEND": "redis"})
    settings = load_settings()
    assert settings["REDIS_URL"] == "redis://127.0.0.1:7/0"
    assert settings.source("BUS_BACKEND") == f"running cluster ({tmp_path})"
    assert load_settings(overrides={"REDIS_URL": "redis://other:1/0"})["REDIS_URL"] == \
        "redis://other:1/0"
    clear_running_cluster(tmp_path)
    assert load_settings()["REDIS_URL"] is None


def test_a_dead_cluster_file_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy_cluster.embedded.discovery import CLUSTER_FILE, read_running_cluster

    (tmp_path / CLUSTER_FILE).write_text('{"pid": 999999999, "settings": {"REDIS_URL": "x"}}')
    assert read_running_cluster(tmp_path) == {}
