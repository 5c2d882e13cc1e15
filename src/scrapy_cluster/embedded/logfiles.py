"""One log file per supervised component: ``<directory>/<name>.log``, appended, size-capped.

A restarted ``crawler-2`` appends to the same ``crawler-2.log``; the supervisor marks each
start and exit in it. Only the supervisor writes these files (one writer per file), so the
stdlib ``RotatingFileHandler`` is enough: at ``max_bytes`` the file is rolled to ``.1``,
``.2``, ... and ``backups`` of them are kept (``max_bytes`` 0 never rolls).
"""

from __future__ import annotations

import logging
import threading
from logging.handlers import RotatingFileHandler
from pathlib import Path


class ComponentLogs:
    """Writes each component's output lines to its own file; thread-safe."""

    def __init__(self, directory: Path, *, max_bytes: int = 0, backups: int = 0) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.backups = backups
        self._handlers: dict[str, RotatingFileHandler] = {}
        self._lock = threading.Lock()

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def write(self, name: str, line: str) -> None:
        """Append ``line`` (without its newline) to ``name``'s file."""
        self._handler(name).handle(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))

    def _handler(self, name: str) -> RotatingFileHandler:
        with self._lock:
            handler = self._handlers.get(name)
            if handler is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                handler = RotatingFileHandler(self.path(name), maxBytes=self.max_bytes,
                                              backupCount=self.backups, encoding="utf-8")
                handler.setFormatter(logging.Formatter("%(message)s"))
                self._handlers[name] = handler
            return handler

    def close(self) -> None:
        with self._lock:
            for handler in self._handlers.values():
                handler.close()
            self._handlers.clear()
