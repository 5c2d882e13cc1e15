"""Running `scrapy-cluster up` as a real process in tests: its environment, the `Up` handle
(its output, the pids of its children, its Redis port) and the ``start_up`` fixture that kills
whatever a test leaves (its `up`, the children named in the component logs, the embedded
redis-server), even when the test fails."""

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from tests.support.services import free_port

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
        self.reader: threading.Thread | None = None
        if read_output:
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()

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
        if self.reader is not None:
            self.reader.join(5)  # its children are gone: the pipe is at its end
        if self.process.stdout is not None and not (self.reader and self.reader.is_alive()):
            self.process.stdout.close()  # (never under a reader still blocked on it)


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
