"""How `scrapy-cluster up` starts and ends, with real processes: one `up` per data directory,
what a killed `up` left is cleaned at the next start, no child outlives `up` however it ends
(SIGHUP, a closed output pipe, SIGKILL), and a wrong setting is one line before anything
starts. That `dump` follows the cluster across a restart is in
tests/reliability/test_up_restart.py (`make test-reliability`).

Every `up` runs in its own session; whatever a test leaves (its `up`, the children named in
the component logs, the embedded redis-server) is killed by the fixture, even when it fails."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from scrapy_cluster.embedded import EmbeddedRedis
from tests.support.services import free_port
from tests.support.up_process import (
    Up,
    assert_tree_gone,
    cluster_env,
    redis_servers_on,
    run_cli,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]



# --- 1. one up per data directory -----------------------------------------------------------

def test_a_second_up_in_the_same_directory_refuses_and_names_the_first(
        tmp_path: Path, start_up: Callable[..., Up]) -> None:
    data_dir = tmp_path / "data"
    env = cluster_env(data_dir)
    first = start_up(env)
    first.wait_ready()
    cluster = first.cluster()
    code, lines = start_up({**env, "FLASK_PORT": str(free_port())}).finish(30)
    assert code != 0
    assert len(lines) == 1, lines
    assert f"pid {first.process.pid}" in lines[0]
    assert f"http://127.0.0.1:{env['FLASK_PORT']}/ui" in lines[0]
    assert first.process.poll() is None
    assert first.cluster() == cluster
    request = {"url": "http://127.0.0.1:1/x", "appid": "lock", "crawlid": uuid.uuid4().hex[:8]}
    fed = run_cli(data_dir, env, "feed", json.dumps(request))
    assert fed.returncode == 0, fed.stdout + fed.stderr
    dumped = run_cli(data_dir, env, "dump", "-t", "demo.incoming", "--from-beginning",
                     "--max", "1", "--timeout", "20")
    assert dumped.returncode == 0, dumped.stderr
    assert json.loads(dumped.stdout)["crawlid"] == request["crawlid"]


def test_up_after_a_sigkilled_up_starts_cleanly_with_one_redis_server(
        tmp_path: Path, start_up: Callable[..., Up]) -> None:
    data_dir = tmp_path / "data"
    env = cluster_env(data_dir)
    first = start_up(env)
    first.wait_ready()
    port = first.redis_port()
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(10)
    second = start_up(env)
    second.wait_ready()
    assert second.cluster()["pid"] == second.process.pid
    assert second.cluster()["settings"]["REDIS_URL"] == f"redis://127.0.0.1:{port}/0"
    assert redis_servers_on(data_dir) == [second.redis_pid()]


def test_up_stops_a_redis_server_left_running_on_its_directory(
        tmp_path: Path, start_up: Callable[..., Up]) -> None:
    """A leftover of an `up` whose server outlived it (an older version, a race): the next
    `up` stops it, drops the stale cluster.json and starts its own server on the same port."""
    data_dir = tmp_path / "data"
    leftover = EmbeddedRedis(data_dir)
    leftover.start()
    assert leftover.process is not None
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait(10)  # its pid stands for the killed `up`
    (data_dir / "cluster.json").write_text(json.dumps(
        {"pid": ended.pid, "settings": {"REDIS_URL": leftover.url, "BUS_BACKEND": "redis"}}))
    up = start_up(cluster_env(data_dir))
    try:
        up.wait_ready()
        assert leftover.process.wait(20) is not None
        assert any(f"redis-server (pid {leftover.process.pid})" in line for line in up.lines)
        assert up.cluster()["pid"] == up.process.pid
        assert up.cluster()["settings"]["REDIS_URL"] == leftover.url
        assert redis_servers_on(data_dir) == [up.redis_pid()]
    finally:
        leftover.stop()


# --- 2. no orphans --------------------------------------------------------------------------

def test_sighup_stops_up_and_every_child(tmp_path: Path, start_up: Callable[..., Up]) -> None:
    up = start_up(cluster_env(tmp_path / "data"))
    up.wait_ready()
    pids, port = up.tree(), up.redis_port()
    up.process.send_signal(signal.SIGHUP)
    assert up.process.wait(40) == 0, up.output()
    assert_tree_gone(up, pids, port)
    assert any("stopped   crawler-1" in line for line in up.lines), up.output()


def test_a_closed_output_pipe_stops_up_and_every_child(
        tmp_path: Path, start_up: Callable[..., Up]) -> None:
    """`up | head -1`: the reader takes one line and goes away."""
    up = start_up(cluster_env(tmp_path / "data"), read_output=False)
    stream = up.process.stdout
    assert stream is not None
    assert stream.readline().startswith(b"scrapy-cluster up: ")
    up.wait_ready()
    pids, port = up.tree(), up.redis_port()
    stream.close()
    up.process.wait(40)
    assert_tree_gone(up, pids, port)
    assert "stopped crawler-1" in (tmp_path / "data" / "logs" / "crawler-1.log").read_text()


def test_sigkill_of_up_ends_every_child(tmp_path: Path, start_up: Callable[..., Up]) -> None:
    up = start_up(cluster_env(tmp_path / "data"))
    up.wait_ready()
    pids, port = up.tree(), up.redis_port()
    os.kill(up.process.pid, signal.SIGKILL)
    up.process.wait(10)
    assert_tree_gone(up, pids, port)


# --- 5. fast, true failures -----------------------------------------------------------------

@pytest.mark.parametrize("url", ["localhost:6390", "redis://127.0.0.1:notaport/0"])
def test_up_with_a_malformed_redis_url_says_so_in_one_line(
        tmp_path: Path, start_up: Callable[..., Up], url: str) -> None:
    code, output = start_up(cluster_env(tmp_path / "data", REDIS_URL=url)).finish(30)
    assert code != 0
    assert len(output) == 1 and output[0].startswith("Error: REDIS_URL "), output


def test_up_with_an_unreachable_redis_stops_before_starting_anything(
        tmp_path: Path, start_up: Callable[..., Up]) -> None:
    data_dir = tmp_path / "data"
    url = f"redis://127.0.0.1:{free_port()}/0"
    code, output = start_up(cluster_env(data_dir, REDIS_URL=url)).finish(15)
    assert code != 0
    assert len(output) == 1 and output[0].startswith(f"Error: Redis at {url}"), output
    assert not (data_dir / "logs").exists()


def test_up_on_a_rest_port_in_use_says_so(tmp_path: Path, start_up: Callable[..., Up]) -> None:
    data_dir = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = start_up(cluster_env(data_dir), "--port", str(port)).finish(40)
    assert code != 0
    assert len(output) == 1, output
    assert f"port {port} on 127.0.0.1 is in use" in output[0] and "--port" in output[0]
    assert redis_servers_on(data_dir) == []
