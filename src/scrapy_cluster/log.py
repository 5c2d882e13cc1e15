"""Logging for every component: stdlib ``logging`` configured from settings.

``configure_logging(settings)`` sets up the component's named logger once per
call (calling it again replaces, never duplicates, its handlers):

- ``LOG_LEVEL`` — lowest level written (``DEBUG`` ... ``CRITICAL``; ``WARN`` is
  accepted for ``WARNING``);
- ``LOG_JSON`` — one JSON object per line with ``message``, ``logger``,
  ``level``, ``timestamp`` (ISO-8601, UTC), the context fields of
  ``scrapy_cluster.log_fields`` (``component``, ``node``, ``event``, and
  ``crawlid``/``appid``/``spiderid``/``url`` of the request a line is about)
  and every ``extra`` field; otherwise the human format
  ``%(asctime)s [%(name)s] %(levelname)s: %(message)s``;
- ``LOG_STDOUT`` — standard output, or else ``LOG_DIR/LOG_FILE``, rolled over
  to ``.1``, ``.2``, ... (``LOG_BACKUPS`` kept) once it has reached
  ``LOG_MAX_BYTES``; a file may exceed that by at most one record.

``configure_root_logging(settings)`` does the same for the root logger when
``LOG_JSON`` is on, so that every other logger of the process (the component's
modules, Scrapy, Twisted, asyncio, redis-py...) writes the same JSON lines to
the same output; without ``LOG_JSON`` it leaves the root logger alone.

Several processes may append to, and roll, the same file: the file handler is
``concurrent_log_handler.ConcurrentRotatingFileHandler``, which takes an
exclusive lock (a ``.__<file>.lock`` file beside the log) around every write
and every rollover, so no process writes into a file another has just renamed.

The crawler passes ``prefix="SC_"`` and so reads ``SC_LOG_LEVEL``,
``SC_LOGGER_NAME`` and the other ``SC_LOG_*`` twins.

``LogCallbackHandler`` calls functions for records whose level matches an
expression (``'INFO'``, ``'<=INFO'``, ``'>DEBUG'``, ``'*'``) and whose extras
contain a criteria dict; add it to a logger with ``logger.addHandler``.
"""

from __future__ import annotations

import logging
import operator
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from concurrent_log_handler import ConcurrentRotatingFileHandler
from pythonjsonlogger.core import RESERVED_ATTRS

from scrapy_cluster.errors import InvalidLevelExpressionError, SettingsError
from scrapy_cluster.log_fields import REQUEST_FIELDS, ContextJsonFormatter
from scrapy_cluster.log_fields import process_node as process_node
from scrapy_cluster.log_fields import request_fields as request_fields

HUMAN_FORMAT = "%(asctime)s [%(name)s] %(levelname)s: %(message)s"
_JSON_FIELDS = "%(message)s %(name)s %(levelname)s"
_JSON_RENAMES = {"name": "logger", "levelname": "level"}
_OWNED_MARK = "_scrapy_cluster_owned"
_LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}
_NOT_EXTRAS = frozenset(RESERVED_ATTRS) | {"message", "asctime"}
_CRAWLER_PREFIX_COMPONENT = {"SC_": "crawler"}

__all__ = ["HUMAN_FORMAT", "REQUEST_FIELDS", "LevelMatcher", "LogCallbackHandler",
           "configure_logging", "configure_root_logging", "parse_level", "process_node",
           "record_extras", "request_fields"]

LogCallback = Callable[[str, dict[str, Any]], Any]


def configure_logging(settings: Mapping[str, Any], prefix: str = "") -> logging.Logger:
    """Configure and return ``logging.getLogger(settings[prefix + "LOGGER_NAME"])``.

    Handlers installed by an earlier call for the same logger are closed and
    replaced; handlers added by others (e.g. a ``LogCallbackHandler``) stay.
    The logger does not propagate, so a root handler (Scrapy's, or
    ``configure_root_logging``'s) does not write its records a second time.
    Raises ``SettingsError`` for an unknown level name.
    """
    logger = logging.getLogger(str(settings[prefix + "LOGGER_NAME"]))
    level = parse_level(settings[prefix + "LOG_LEVEL"])
    _replace_owned_handler(logger, _owned_handler(settings, prefix, level))
    logger.setLevel(level)
    logger.propagate = False
    return logger


def configure_root_logging(settings: Mapping[str, Any], prefix: str = "") -> bool:
    """With ``LOG_JSON``: the root logger writes JSON lines like ``configure_logging``'s (same
    fields, same output, same ``LOG_LEVEL``), and Python warnings are logged; returns True.

    Every logger that propagates then writes through it: the component's modules and its
    libraries. The handler's own level filters too, so a library that sets its logger to
    DEBUG (Scrapy does) writes nothing below ``LOG_LEVEL``. Calling again replaces the handler
    an earlier call installed; handlers added by others stay. Without ``LOG_JSON`` nothing
    changes and the result is False: the process keeps its human format.
    """
    if not settings[prefix + "LOG_JSON"]:
        return False
    level = parse_level(settings[prefix + "LOG_LEVEL"])
    _replace_owned_handler(logging.root, _owned_handler(settings, prefix, level))
    logging.root.setLevel(level)
    logging.captureWarnings(True)
    return True


def parse_level(name: Any) -> int:
    """The numeric level of a level name (case-insensitive) or number."""
    if isinstance(name, int) and not isinstance(name, bool):
        return name
    upper = str(name).strip().upper()
    upper = _LEVEL_ALIASES.get(upper, upper)
    level = logging.getLevelNamesMapping().get(upper)
    if level is None or upper == "NOTSET":
        raise SettingsError(
            f"unknown log level {name!r}; use one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
    return level


def record_extras(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller passed with ``extra={...}`` when logging ``record``."""
    return {key: value for key, value in record.__dict__.items()
            if key not in _NOT_EXTRAS and not key.startswith("_")}


def _component_of(settings: Mapping[str, Any], prefix: str) -> str:
    component = getattr(settings, "component", None)
    return str(component or _CRAWLER_PREFIX_COMPONENT.get(prefix)
               or settings[prefix + "LOGGER_NAME"])


def _owned_handler(settings: Mapping[str, Any], prefix: str, level: int) -> logging.Handler:
    handler = _output_handler(settings, prefix)
    handler.setFormatter(_formatter(bool(settings[prefix + "LOG_JSON"]),
                                    _component_of(settings, prefix)))
    handler.setLevel(level)
    setattr(handler, _OWNED_MARK, True)
    return handler


def _replace_owned_handler(logger: logging.Logger, handler: logging.Handler) -> None:
    for old in [h for h in logger.handlers if getattr(h, _OWNED_MARK, False)]:
        logger.removeHandler(old)
        old.close()
    logger.addHandler(handler)


def _output_handler(settings: Mapping[str, Any], prefix: str) -> logging.Handler:
    if settings[prefix + "LOG_STDOUT"]:
        return logging.StreamHandler(sys.stdout)
    directory = Path(str(settings[prefix + "LOG_DIR"]))
    directory.mkdir(parents=True, exist_ok=True)
    return ConcurrentRotatingFileHandler(
        str(directory / str(settings[prefix + "LOG_FILE"])), mode="a",
        maxBytes=int(settings[prefix + "LOG_MAX_BYTES"]),
        backupCount=int(settings[prefix + "LOG_BACKUPS"]), encoding="utf-8")


def _formatter(json_lines: bool, component: str) -> logging.Formatter:
    if not json_lines:
        return logging.Formatter(HUMAN_FORMAT)
    return ContextJsonFormatter(component, _JSON_FIELDS, rename_fields=_JSON_RENAMES,
                                timestamp="timestamp", json_ensure_ascii=False)


# --- callbacks ------------------------------------------------------------------

_EXPRESSION = re.compile(r"^\s*(<=|>=|==|<|>)?\s*([A-Za-z]+)\s*$")
_COMPARATORS: dict[str, Callable[[int, int], bool]] = {
    "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt,
    "==": operator.eq, "": operator.eq,
}


@dataclass(frozen=True)
class LevelMatcher:
    """A parsed level expression: ``'*'``, ``'INFO'`` (exactly), ``'<=INFO'``, ``'>DEBUG'``..."""

    expression: str
    compare: Callable[[int, int], bool] | None
    level: int

    @classmethod
    def parse(cls, expression: str) -> LevelMatcher:
        if expression.strip() == "*":
            return cls(expression, None, logging.NOTSET)
        match = _EXPRESSION.match(expression)
        if match is None:
            raise InvalidLevelExpressionError(
                f"bad level expression {expression!r}; expected '*', a level name, "
                "or a level name after one of <, <=, >, >=, ==")
        try:
            level = parse_level(match.group(2))
        except SettingsError as exc:
            raise InvalidLevelExpressionError(f"bad level expression {expression!r}: {exc}") from exc
        return cls(expression, _COMPARATORS[match.group(1) or ""], level)

    def matches(self, levelno: int) -> bool:
        return self.compare is None or self.compare(levelno, self.level)


@dataclass(frozen=True)
class _Registration:
    matcher: LevelMatcher
    callback: LogCallback
    criteria: Mapping[str, Any]


class LogCallbackHandler(logging.Handler):
    """Calls ``fn(message, extras)`` for each record whose level and extras match.

    It sees what its logger lets through (records under the logger's level
    never reach it). A callback that raises is reported like any handler
    error (``logging.Handler.handleError``) and does not stop the others.
    """

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self._registrations: list[_Registration] = []

    def add_callback(self, level_expr: str, fn: LogCallback,
                     criteria: Mapping[str, Any] | None = None) -> None:
        """Call ``fn`` for records matching ``level_expr`` whose extras include ``criteria``.

        Raises ``InvalidLevelExpressionError`` for an expression it cannot parse.
        """
        registration = _Registration(LevelMatcher.parse(level_expr), fn, dict(criteria or {}))
        self.acquire()
        try:
            self._registrations.append(registration)
        finally:
            self.release()

    def emit(self, record: logging.LogRecord) -> None:
        extras = record_extras(record)
        for registration in list(self._registrations):
            if not registration.matcher.matches(record.levelno):
                continue
            if not _is_subset(registration.criteria, extras):
                continue
            try:
                registration.callback(record.getMessage(), dict(extras))
            except Exception:
                self.handleError(record)


def _is_subset(criteria: Mapping[str, Any], extras: Mapping[str, Any]) -> bool:
    missing = object()
    return all(extras.get(key, missing) == value for key, value in criteria.items())
