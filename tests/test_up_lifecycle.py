"""How `scrapy-cluster up` starts and ends, with real processes: one `up` per data directory,
what a killed `up` left is cleaned at the next start, no child outlives `up` however it ends
(SIGHUP, a closed output pipe, SIGKILL), `dump` follows the cluster across a restart, and a
wrong setting is one line before anything starts.

Every `up` runs in its own session; whatever a test leaves (its `up`, the children named in
the component logs, the embedded redis-server) is killed by the fixture, even when it fails."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from scrapy_cluster.embedded import EmbeddedRedis
from scrapy_cluster.testing.site import SiteConfig, SiteServer
from tests.support.services import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STARTED_MARKER = re.compile(r"up: started (\S+) \(pid (\d+)\)")
COMPONENTS = {"kafka-monitor", "redis-monitor", "rest", "crawler-1"}
CLUSTER_SETTINGS = ("REDIS_URL", "BUS_BACKEND", "KAFKA_HOSTS", "SC_SETTINGS")


def child_env(extra: dict[str, str]) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if k not in CLUSTER_SETTINGS}
    return {**inherited, **extra}


def cluster_env(data_dir: Path, **extra: str) -> dict[str, str]:
    return child_env({"SC_DATA_DIR": str(data_dir), "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true",
                      "PUBLIC_IP": "127.0.0.1", "PUBLIC_IP_URL": "", "LEASE_TIMEOUT": "4",
                      "QUEUE_HITS": "50", "QUEUE_WINDOW": "1", "LOG_LEVEL": "WARNING",
                      "SC_LOG_LEVEL": "WARNING", "FLASK_PORT": str(free_port()), **extra})


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str,
               output: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s:g}s: {what}\n{output()}")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def ours(pid: int) -> bool:
    """A live process of a cluster (not a pid reused by something else)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return alive(pid) and (b"scrapy_cluster" in command or b"redis-server" in command)


def redis_servers_on(data_dir: Path) -> list[int]:
    """Pids of the redis-server processes running in ``data_dir``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if b"redis-server" in command and cwd == data_dir.resolve() and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class Up:
    """One `scrapy-cluster up` (its own session), its terminal lines, its process tree."""

    def __init__(self, data_dir: Path, env: dict[str, str], *args: str,
                 read_output: bool = True) -> None:
        self.data_dir, self.env, self.lines = data_dir, env, []
        logs = data_dir / "logs"
        self._log_offsets = {path.name: path.stat().st_size
                             for path in (logs.glob("*.log") if logs.is_dir() else [])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "scrapy_cluster", "up", "--crawlers", "1",
             "--progress-interval", "0.5", *args],
            cwd=data_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.known_pids: set[int] = set()
        if read_output:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream: IO[bytes] | None = self.process.stdout
        assert stream is not None
        for raw in stream:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def output(self) -> str:
        return "up output:\n" + "\n".join(self.lines[-40:])

    def children(self) -> dict[str, int]:
        """Latest pid of each component this `up` started, from the markers it writes in their
        log files (after what an earlier `up` wrote there)."""
        found: dict[str, int] = {}
        logs = self.data_dir / "logs"
        for path in sorted(logs.glob("*.log")) if logs.is_dir() else []:
            text = path.read_bytes()[self._log_offsets.get(path.name, 0):].decode(errors="replace")
            for match in STARTED_MARKER.finditer(text):
                found[match.group(1)] = int(match.group(2))
        self.known_pids.update(found.values())
        return found

    def redis_pid(self) -> int:
        """The embedded redis-server's pid, from the line its log opens each start with."""
        log = (self.data_dir / "redis.log").read_text(errors="replace")
        pid = int(re.findall(r"pid=(\d+), just started", log)[-1])
        self.known_pids.add(pid)
        return pid

    def finish(self, timeout_s: float) -> tuple[int, list[str]]:
        """Wait for this `up` to end by itself; its exit code and terminal lines."""
        wait_until(lambda: self.process.poll() is not None, timeout_s, "up ended", self.output)
        time.sleep(0.2)  # the reader thread takes the last lines
        return self.process.wait(), [line for line in self.lines if line.strip()]

    def redis_port(self) -> int:
        return int((self.data_dir / "redis.port").read_text())

    def wait_ready(self, timeout_s: float = 60) -> None:
        wait_until(lambda: COMPONENTS <= set(self.children())
                   and self.cluster().get("pid") == self.process.pid,
                   timeout_s, "every component started", self.output)
        self.redis_pid()

    def cluster(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.data_dir / "cluster.json").read_text()))
        except (OSError, ValueError):
            return {}

    def tree(self) -> set[int]:
        self.children()
        return {self.process.pid, *self.known_pids}

    def kill_all(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        for pid in self.tree() - {self.process.pid}:
            if ours(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def start_up(tmp_path: Path) -> Iterator[Callable[..., Up]]:
    started: list[Up] = []

    def start(env: dict[str, str], *args: str, read_output: bool = True) -> Up:
        up = Up(tmp_path / "data", env, *args, read_output=read_output)
        started.append(up)
        return up

    yield start
    for up in reversed(started):
        up.kill_all()


def run_cli(data_dir: Path, env: dict[str, str], *args: str,
            timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy_cluster", *args], cwd=data_dir.parent,
                          env=env, capture_output=True, text=True, timeout=timeout_s)


def assert_tree_gone(up: Up, pids: set[int], redis_port: int, timeout_s: float = 30) -> None:
    wait_until(lambda: not [pid for pid in pids if alive(pid)], timeout_s,
               f"every process of up's tree ended; alive: {[p for p in pids if alive(p)]}",
               up.output)
    assert not answers(redis_port)


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


# --- 4. clients follow the cluster ----------------------------------------------------------

class Dump:
    """`scrapy-cluster dump` of the crawled firehose, found through SC_DATA_DIR."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "scrapy_cluster", "dump", "-t", "demo.crawled_firehose"],
            cwd=data_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        for stream, lines in ((self.process.stdout, self.lines),
                              (self.process.stderr, self.errors)):
            threading.Thread(target=self._read, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _read(stream: IO[str] | None, lines: list[str]) -> None:
        assert stream is not None
        lines.extend(line.rstrip("\n") for line in stream)

    def crawlids(self) -> set[str]:
        return {json.loads(line).get("crawlid", "") for line in list(self.lines)
                if line.startswith("{")}

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


@pytest.fixture
def site() -> Iterator[SiteServer]:
    config = SiteConfig(hosts=("127.0.0.33",), pages_per_host=3, links_per_page=1)
    with SiteServer(config, free_port()) as server:
        yield server


@pytest.mark.parametrize("old_port", ["free", "taken"])
def test_dump_prints_pages_crawled_after_up_restarted(
        tmp_path: Path, start_up: Callable[..., Up], site: SiteServer, old_port: str) -> None:
    """The port is free: `up` takes it again (the TIME_WAIT connections of the old server do
    not count) and `dump` reconnects. It is taken: `up` chooses another and `dump` finds it in
    cluster.json."""
    data_dir = tmp_path / "data"
    env = cluster_env(data_dir)
    first = start_up(env)
    first.wait_ready()
    port = first.redis_port()
    dump = Dump(data_dir, env)
    squatter = socket.socket()
    try:
        wait_until(lambda: any(e.startswith("dumping ") for e in dump.errors), 30, "dump reads")
        first.process.send_signal(signal.SIGINT)
        assert first.process.wait(40) == 0, first.output()
        if old_port == "taken":
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
        second = start_up(env)
        second.wait_ready()
        assert (second.redis_port() == port) == (old_port == "free")
        if old_port == "taken":
            wait_until(lambda: any("the cluster moved to" in e for e in dump.errors), 30,
                       "dump follows the cluster", lambda: "\n".join(dump.errors))
        crawlid = uuid.uuid4().hex[:10]
        request = {"url": site.site.url("127.0.0.33", "/p/0.html"), "appid": "follow",
                   "crawlid": crawlid, "maxdepth": 0}
        fed = run_cli(data_dir, env, "feed", json.dumps(request))
        assert fed.returncode == 0, fed.stdout + fed.stderr
        wait_until(lambda: crawlid in dump.crawlids(), 60, "dump prints the new page",
                   lambda: "dump stderr:\n" + "\n".join(dump.errors[-20:]))
    finally:
        squatter.close()
        dump.close()


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
