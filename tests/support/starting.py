"""How every test service fixture starts its server: external if configured, else private.

With ``CI`` set, a service that cannot start is a test error; otherwise the
test is skipped with the reason and the install hint.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from tests.support.services import ServerProcess, ServiceUnavailable

Server = TypeVar("Server", bound=ServerProcess)


def service_unavailable(exc: Exception) -> None:
    """Fail under CI, skip (saying what is missing) elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"required test service unavailable under CI: {exc}", pytrace=False)
    pytest.skip(f"test service unavailable: {exc}")


def started(server: Server) -> Server:
    """``server`` started, or the test failed (CI) / skipped as ``service_unavailable`` says."""
    try:
        server.start()
    except ServiceUnavailable as exc:
        service_unavailable(exc)
        raise
    return server


def external_or_started(external: str | None, build: Callable[[], Server]) -> Iterator[str | Server]:
    """Yield ``external`` when given; else build, start, yield and finally stop a server."""
    if external:
        yield external
        return
    try:
        server = build()
        server.start()
    except ServiceUnavailable as exc:
        service_unavailable(exc)
        return
    try:
        yield server
    finally:
        server.stop()
