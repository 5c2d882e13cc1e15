"""A private ZooKeeper for the test suite, from Debian's ``zookeeperd`` package.

The server gets its own ``zoo.cfg`` (data directory under the test's temporary
directory, a free loopback client port, no admin HTTP server, no JMX) and runs
in the foreground as ``zkServer.sh start-foreground <cfg>``, which execs the
JVM, so stopping the process group stops ZooKeeper. ``SC_TEST_ZOOKEEPER``
("host:port") points the suite at an existing server instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

from tests.support.services import INSTALL_HINTS, ServerProcess, ServiceUnavailable, free_port

ZK_SERVER_SCRIPT = Path("/usr/share/zookeeper/bin/zkServer.sh")
EXTERNAL_ENV_VAR = "SC_TEST_ZOOKEEPER"

_CONFIG = """\
tickTime=2000
initLimit=10
syncLimit=5
dataDir={data_dir}
clientPort={port}
clientPortAddress={host}
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
"""


def external_zookeeper() -> str | None:
    """The "host:port" of an external server named by SC_TEST_ZOOKEEPER, if any."""
    return os.environ.get(EXTERNAL_ENV_VAR) or None


def is_serving(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when the server answers the ``ruok`` four-letter word with ``imok``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False


class ZooKeeperServer(ServerProcess):
    """A standalone ZooKeeper on a free loopback port, with its data in ``workdir``."""

    def __init__(self, workdir: Path, port: int | None = None,
                 script: Path = ZK_SERVER_SCRIPT, heap_mb: int = 128) -> None:
        if not script.exists():
            raise ServiceUnavailable(f"{script} not found; " + INSTALL_HINTS["zookeeper"])
        if shutil.which("java") is None:
            raise ServiceUnavailable("java not found on PATH (ZooKeeper needs it); "
                                     + INSTALL_HINTS["zookeeper"])
        host, port = "127.0.0.1", port or free_port()
        self.config_path = workdir / "zoo.cfg"
        env = {**os.environ, "JMXDISABLE": "true",
               "JVMFLAGS": f"-Xmx{heap_mb}m -Dzookeeper.log.dir={workdir}"}
        super().__init__(["bash", str(script), "start-foreground", str(self.config_path)],
                         workdir, host, port, env=env)

    @property
    def hosts(self) -> str:
        """The connection string clients (kazoo) take: "127.0.0.1:<port>"."""
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        """Write the config, start the JVM, and wait until it answers ``ruok``."""
        data_dir = self.workdir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(_CONFIG.format(data_dir=data_dir, port=self.port,
                                                   host=self.host))
        deadline = time.monotonic() + timeout_s
        super().start(timeout_s)
        while not is_serving(self.host, self.port):
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceUnavailable(f"ZooKeeper on {self.hosts} never answered ruok")
            time.sleep(0.05)
