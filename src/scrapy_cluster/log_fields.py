"""The fields of a JSON log line that log pipelines (ELK, Loki) filter on.

``ContextJsonFormatter`` adds to python-json-logger's fields (``message``, ``logger``,
``level``, ``timestamp`` and every ``extra`` field):

- ``component`` (``kafka-monitor``, ``redis-monitor``, ``crawler``, ``rest``), ``node``
  (``<hostname>:<pid>``) and ``event``, a stable name to group by: the ``event`` extra when
  the call gave one, else the message template before ``%`` formatting
  (``"plugin %s failed: %s"``);
- ``crawlid``, ``appid``, ``spiderid`` and ``url`` of the request a record is about: a
  ``request`` extra that is a dict (a crawl request as queued), or a Scrapy ``Request`` or
  ``Response`` given as the ``request`` or ``response`` extra or named argument (as Scrapy's
  own records carry them: ``logger.debug("Crawled %(request)s", {"request": request})``): its
  URL and the other fields from its ``meta``;
- ``spiderid`` from a ``spider`` extra or named argument (Scrapy's records about a spider).

An extra of the same name always wins. Fields are added to the output only: the record itself
(which other handlers also see) is not changed.
"""

from __future__ import annotations

import logging
import os
import reprlib
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from pythonjsonlogger.json import JsonFormatter

REQUEST_FIELDS = ("crawlid", "appid", "spiderid", "url")
ABOUT_REQUEST = ("request", "response")
"""Extras and named arguments that hold the request (or response) a record is about."""


def request_fields(requests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``crawlid``, ``appid``, ``spiderid`` and ``url`` shared by every request in ``requests``
    (a field the requests disagree on, or that one lacks, is left out): extras for a log call
    about one request or a batch of one crawl."""
    shared: dict[str, Any] | None = None
    for request in requests:
        fields = {key: request[key] for key in REQUEST_FIELDS if request.get(key) is not None}
        shared = fields if shared is None else {
            key: value for key, value in shared.items() if fields.get(key) == value}
    return shared or {}


def fields_of(about: Any) -> dict[str, Any]:
    """The request fields of a crawl request dict, or of a Scrapy ``Request`` or ``Response``
    (anything with a string ``url`` and a ``meta`` mapping: its URL, the rest from ``meta``);
    nothing for anything else."""
    if isinstance(about, Mapping):
        return request_fields([about])
    url = getattr(about, "url", None)
    if not isinstance(url, str):
        return {}
    meta = getattr(about, "meta", None)  # a Response without its request has none
    known = {key: meta.get(key) for key in REQUEST_FIELDS} if isinstance(meta, Mapping) else {}
    return request_fields([{**known, "url": url}])


def record_context(record: logging.LogRecord) -> dict[str, Any]:
    """The request fields of what ``record`` is about: its ``request``/``response`` extras
    first, then the named arguments of the same names, then a spider's name as ``spiderid``."""
    named = record.args if isinstance(record.args, Mapping) else {}
    context: dict[str, Any] = {}
    for source in (record.__dict__, named):
        for key in ABOUT_REQUEST:
            for field, value in fields_of(source.get(key)).items():
                context.setdefault(field, value)
    for source in (record.__dict__, named):
        name = getattr(source.get("spider"), "name", None)
        if isinstance(name, str):
            context.setdefault("spiderid", name)
    return context


def process_node() -> str:
    """``<hostname>:<pid>``: names this process in log lines."""
    return f"{socket.gethostname()}:{os.getpid()}"


class ContextJsonFormatter(JsonFormatter):
    """JSON lines with ``component``, ``node``, ``event`` and the request fields (see the
    module docstring)."""

    def __init__(self, component: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.component = component
        self._node_pid, self._node = -1, ""

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord,
                   message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        log_data.setdefault("component", self.component)
        log_data.setdefault("node", self._current_node())
        log_data.setdefault("event", str(record.msg))
        for key, value in record_context(record).items():
            log_data.setdefault(key, value)

    def jsonify_log_record(self, log_data: dict[str, Any]) -> str:
        """The JSON line; a field nested too deeply for the encoder (a crawl request's ``attrs``
        may nest up to the 1,024 levels orjson reads) is written as a short repr instead:
        logging re-raises a RecursionError into the code that logged."""
        try:
            return super().jsonify_log_record(log_data)
        except RecursionError:
            return super().jsonify_log_record({
                key: reprlib.repr(value) if isinstance(value, Mapping | list | tuple) else value
                for key, value in log_data.items()})

    def _current_node(self) -> str:
        if self._node_pid != os.getpid():  # a forked child names itself
            self._node_pid, self._node = os.getpid(), process_node()
        return self._node
