"""Request heads bounded before they are parsed (REST_MAX_HEADER_BYTES, REST_MAX_HEADERS).

httptools keeps a header line in memory however long it is, and the API key is only checked
once the head is parsed, so one request could make the process hold a 100 MB header. The
protocol classes here count the bytes and lines of each request head as it arrives, before
uvicorn's parser (httptools or h11) sees them, and answer ``431 Request Header Fields Too
Large`` and close the connection as soon as a head is over a limit: the rest is never read
into memory. A head ends at its empty line; the count starts again when the parser reports the
message (head and body) complete, so a body is never counted as a head.

Known bound: with httptools, a request pipelined behind another in the same read of the socket
is counted from the next read on, so the parser may hold one read (at most 256 KiB with asyncio
and uvloop) of it beyond the limit. h11 hands back what it has not consumed, and its own buffer
is held to the same size (``h11_max_incomplete_event_size``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from scrapy_cluster.rest.wire import MSG_HEAD_TOO_LARGE

_END_OF_HEAD = re.compile(rb"\n\r?\n")  # what both parsers accept as the empty line
LINGER_S = 1.0
"""After a 431, the connection's input is read and dropped for this long (so the client, still
sending, reads the answer instead of a reset), then it is closed."""


OnRefused = Callable[[Any], None]
"""Called with the client's ``(host, port)`` (or None) of each refused head."""


@dataclass(frozen=True)
class HeadLimits:
    max_bytes: int
    max_headers: int
    on_refused: OnRefused | None = field(default=None, compare=False)


class HeadCounter:
    """Counts one request head as it arrives in chunks (sans-I/O).

    ``feed`` returns the offset in the chunk just after the head's empty line, or None while
    the head goes on; ``too_large`` is True once the head is over a limit. Empty lines before
    the request line (which HTTP lets a server skip) count as head bytes but do not end it.
    """

    def __init__(self, limits: HeadLimits) -> None:
        self.limits = limits
        self.reset()

    def reset(self) -> None:
        self.size = 0
        self.newlines = 0
        self.complete = False
        self._started = False
        self._tail = b""

    def feed(self, chunk: bytes) -> int | None:
        start = 0
        if not self._started:
            start = len(chunk) - len(chunk.lstrip(b"\r\n"))
            self._started = start < len(chunk)
        window = self._tail + chunk[start:]
        match = _END_OF_HEAD.search(window)
        end = None if match is None else start + match.end() - len(self._tail)
        head = chunk if end is None else chunk[:end]
        self.size += len(head)
        self.newlines += head.count(b"\n", start)
        self.complete = end is not None
        self._tail = window[-3:]
        return end

    @property
    def headers(self) -> int:
        """Header lines so far: every line ended but the request line (and the empty line)."""
        return max(0, self.newlines - (2 if self.complete else 1))

    @property
    def too_large(self) -> bool:
        return self.size > self.limits.max_bytes or self.headers > self.limits.max_headers


def refusal_bytes() -> bytes:
    """The 431 answer, in the API's ``{status, data, error}`` wrapper."""
    body = orjson.dumps({"data": None, "error": {"message": MSG_HEAD_TOO_LARGE},
                         "status": "FAILURE"})
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\nx-content-type-options: nosniff\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
            + body)


class RefusalLog:
    """Logs refused heads as warnings, at most one per ``every_s`` with the number since."""

    def __init__(self, logger: logging.Logger, *, clock: Callable[[], float],
                 every_s: float = 60.0) -> None:
        self.logger = logger
        self.clock = clock
        self.every_s = every_s
        self._logged_at = -math.inf
        self._unlogged = 0

    def refused(self, client: Any) -> None:
        now = self.clock()
        if now - self._logged_at < self.every_s:
            self._unlogged += 1
            return
        host = client[0] if client else "unknown"
        self.logger.warning("request head over REST_MAX_HEADER_BYTES or REST_MAX_HEADERS from "
                            "%s refused with 431 (%d more refused since the last warning)",
                            host, self._unlogged, extra={"client": host})
        self._logged_at, self._unlogged = now, 0


class HeadLimitMixin:
    """Put before a uvicorn HTTP protocol class (``limited_protocol`` does, with ``limits``).
    The subclass calls ``_message_finished`` when its parser has read a
    whole request, head and body."""

    limits: ClassVar[HeadLimits]
    transport: asyncio.Transport
    client: tuple[str, int] | None
    cycle: Any
    loop: asyncio.AbstractEventLoop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._counter = HeadCounter(self.limits)
        self._reading_head = True
        self._refused = False

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering after a 431: dropped unread
        if self._reading_head:
            end = self._counter.feed(data)
            if self._counter.too_large:
                self._refuse()
                return
            self._reading_head = end is None
        super().data_received(data)  # type: ignore[misc]

    def _message_finished(self, pending: bytes = b"") -> None:
        """The parser read a whole request; ``pending`` is what it holds of the next one."""
        self._counter.reset()
        self._reading_head = True
        if pending and not self._refused:
            end = self._counter.feed(pending)
            if self._counter.too_large:
                self._refuse()
            self._reading_head = end is None

    def _refuse(self) -> None:
        self._refused = True
        if self.limits.on_refused is not None:
            self.limits.on_refused(self.client)
        transport = self.transport
        if self.cycle is not None and not self.cycle.response_complete:
            transport.close()  # the answer to the request before is being written: just close
            return
        transport.write(refusal_bytes())
        if transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(LINGER_S, transport.close)
        else:  # pragma: no cover - TLS transports
            transport.close()


class LimitedHttpToolsProtocol(HeadLimitMixin, HttpToolsProtocol):
    def on_message_complete(self) -> None:
        self._message_finished()
        super().on_message_complete()


class LimitedH11Protocol(HeadLimitMixin, H11Protocol):
    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._after_h11_events()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._after_h11_events()

    def _after_h11_events(self) -> None:
        """h11 reads a whole request when, after its head was seen, it is no longer reading a
        body; what it buffered beyond is the start of the next head."""
        if self._refused or self._reading_head or self.transport.is_closing():
            return
        if self.conn.their_state is not h11.SEND_BODY:
            self._message_finished(self.conn.trailing_data[0])


PARSERS: dict[str, type[asyncio.Protocol]] = {"httptools": LimitedHttpToolsProtocol,
                                              "h11": LimitedH11Protocol}


def limited_protocol(parser: str, limits: HeadLimits) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn's ``Config(http=...)``: ``parser`` is ``httptools``,
    ``h11`` or ``auto`` (httptools)."""
    base = PARSERS.get("httptools" if parser == "auto" else parser)
    if base is None:
        raise ValueError(f"unknown HTTP parser {parser!r}; use auto, httptools or h11")
    return type(base.__name__, (base,), {"limits": limits})
