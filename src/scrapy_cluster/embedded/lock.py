"""One ``scrapy-cluster up`` per data directory.

``up`` holds an exclusive ``flock`` on ``SC_DATA_DIR/up.lock`` for its whole life. The kernel
releases it when the process ends, however it ends (SIGKILL and crashes included), so a lock
is never stale: a second ``up`` in the same directory is refused while the first one lives, and
starts as soon as it is gone. The file holds the owner's pid and dashboard address (JSON), so
the refusal can name the ``up`` that runs.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping
from pathlib import Path

import orjson

from scrapy_cluster.errors import ServiceError

LOCK_FILE = "up.lock"


class AlreadyRunningError(ServiceError):
    """Another ``scrapy-cluster up`` holds the data directory's lock."""


class UpLock:
    """The data directory's lock; ``acquire`` takes it or raises ``AlreadyRunningError``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._descriptor: int | None = None

    def acquire(self, owner: Mapping[str, object]) -> None:
        """Take the lock without waiting and write ``owner`` (pid, dashboard, ...) into it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by children
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            raise AlreadyRunningError(self._refusal()) from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, orjson.dumps({"pid": os.getpid(), **owner}))
        self._descriptor = descriptor

    def release(self) -> None:
        """Give the lock back (the file stays; its content no longer matters)."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None

    def _refusal(self) -> str:
        where = self.path.parent.resolve()
        try:
            owner = orjson.loads(self.path.read_bytes())
            pid, dashboard = int(owner["pid"]), str(owner["dashboard"])
        except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            return f"another scrapy-cluster up is starting in {where}; stop it first"
        return (f"another scrapy-cluster up (pid {pid}, dashboard {dashboard}) is running in "
                f"{where}; stop it first or use another --data-dir")
