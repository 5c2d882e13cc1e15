"""Serve a ``GeneratedSite`` with nginx, for benchmarks where the site server must not compete
with the crawler for the Python interpreter.

The pages are written as static files (``GeneratedSite.write_static``) under a work directory
and one nginx master + ``workers`` worker processes (a child process in its own session)
listens on the site's port on every host of its config. ``hits()`` reads nginx's own request
counter (``stub_status`` on a separate loopback port) minus the status reads themselves, so it
counts every request the site answered, robots.txt included, like ``SiteServer.hits``.
Needs the ``nginx`` binary (Debian: ``apt-get install nginx-light``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from scrapy_cluster.sitegen.site import GeneratedSite

STATUS_HOST = "127.0.0.1"
NGINX_PATHS = ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx")


def find_nginx() -> str | None:
    """The nginx binary on PATH or in a usual place, or None."""
    found = shutil.which("nginx")
    if found:
        return found
    return next((path for path in NGINX_PATHS if os.access(path, os.X_OK)), None)


def nginx_version(binary: str) -> str:
    """``nginx/1.22.1`` (nginx prints it on stderr)."""
    answer = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    return (answer.stderr or answer.stdout).strip().rsplit(" ", 1)[-1]


class StaticSite(Protocol):
    """A site nginx can serve: its hosts and port, its files, and the ``server`` block lines
    that answer them (``GeneratedSite``, ``RelativeSite``)."""

    port: int

    @property
    def config(self) -> Any: ...

    def write_static(self, root: Path) -> list[str]: ...

    def nginx_locations(self) -> str: ...


class NginxSite:
    """nginx serving ``site`` as static files (see module docstring). With ``access_log``,
    each request is logged in ``log_format`` (a subclass may log more fields, and parse them),
    buffered as ``log_buffer`` says."""

    log_format = "'$msec $request_time $server_addr $request_uri'"
    log_buffer = " buffer=256k flush=1s"

    def __init__(self, site: GeneratedSite | StaticSite, workdir: Path, *, binary: str, status_port: int,
                 workers: int = 1, access_log: Path | None = None) -> None:
        self.site, self.workdir, self.binary = site, workdir, binary
        self.status_port, self.workers = status_port, workers
        self.access_log = access_log
        self.process: subprocess.Popen[bytes] | None = None
        self._status_reads = 0

    def config_text(self) -> str:
        www, temp = self.workdir / "www", self.workdir / "temp"
        servers = "".join(
            f"  server {{ listen {host}:{self.site.port}; root {www / host}; "
            f"{self.site.nginx_locations()} }}\n"
            for host in self.site.config.hosts)
        temp_paths = "".join(f"  {name}_temp_path {temp / name};\n"
                             for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        user = "user root root;\n" if os.geteuid() == 0 else ""
        return (
            f"{user}worker_processes {self.workers};\ndaemon off;\n"
            f"pid {self.workdir / 'nginx.pid'};\nerror_log {self.workdir / 'error.log'} warn;\n"
            "events { worker_connections 4096; }\n"
            f"http {{\n{self._access_log_text()}  sendfile on;\n  keepalive_requests 1000000;\n"
            "  types { text/html html; text/plain txt; }\n"
            "  default_type application/octet-stream;\n"
            "  charset utf-8;\n  charset_types text/html text/plain;\n"
            f"{temp_paths}{servers}"
            f"  server {{ listen {STATUS_HOST}:{self.status_port}; "
            "location / { stub_status; } }\n}\n")

    def _access_log_text(self) -> str:
        if self.access_log is None:
            return "  access_log off;\n"
        return (f"  log_format arrivals {self.log_format};\n"
                f"  access_log {self.access_log} arrivals{self.log_buffer};\n")

    def arrivals(self) -> dict[str, list[float]]:
        """With ``access_log``: arrival times (epoch s, ms precision) of every request per
        host, robots.txt excepted: the log's time (the answer's end) minus the request time.
        nginx writes the log at least once a second."""
        found: dict[str, list[float]] = {}
        if self.access_log is None or not self.access_log.exists():
            return found
        for line in self.access_log.read_text().splitlines():
            finished, took, host, path = line.split(" ", 3)
            if path != "/robots.txt":
                found.setdefault(host, []).append(float(finished) - float(took))
        return found

    def start(self, timeout_s: float = 10.0) -> NginxSite:
        self.site.write_static(self.workdir / "www")
        (self.workdir / "temp").mkdir(parents=True, exist_ok=True)
        config = self.workdir / "nginx.conf"
        config.write_text(self.config_text())
        log = open(self.workdir / "nginx.out", "ab")  # noqa: SIM115 - closed once the child has it
        self.process = subprocess.Popen(
            [self.binary, "-p", str(self.workdir), "-c", str(config), "-e", "stderr"],
            stdout=log, stderr=log, start_new_session=True)
        log.close()  # the child keeps its own copy
        self._wait_listening(timeout_s)
        return self

    def _wait_listening(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("nginx exited: " + (self.workdir / "nginx.out").read_text())
            try:
                with socket.create_connection((STATUS_HOST, self.status_port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nginx not listening after {timeout_s} s")

    def hits(self) -> int:
        """Requests answered by the site so far (status reads excluded)."""
        url = f"http://{STATUS_HOST}:{self.status_port}/"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        self._status_reads += 1
        # "Active connections: N \nserver accepts handled requests\n A B C \nReading: ..."
        requests = int(text.splitlines()[2].split()[2])
        return requests - self._status_reads

    def pids(self) -> list[int]:
        """The master's and its workers' process ids (for CPU accounting)."""
        if self.process is None:
            return []
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            workers = [int(pid) for pid in children.read_text().split()]
        except OSError:
            workers = []
        return [self.process.pid, *workers]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGQUIT)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def __enter__(self) -> NginxSite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
