"""What the supervisor shows a person: one line per event, the errors of its children.

Every terminal line has one shape, ``HH:MM:SS  <verb>  <text>`` (local time, the verb padded
to nine columns), e.g.::

    18:02:11  started   crawler-2 (pid 4242)
    18:02:40  restart   crawler-2 exited with code -9; restarting in 1.0s (restart #1)
    18:02:16  progress  312 pages (41.2/s)  backlog 1,204  errors 3  crawlers 2/2
    18:02:17  error     [crawler-1] 2024-05-01 18:02:17 [scrapy.core.scraper] ERROR: ...

A child's own output goes to its log file (``ComponentLogs``) when one is given; on the
terminal only its errors (``ErrorEcho``) appear, unless ``verbose``, which shows every line as
``[<name>] <line>`` as it comes.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from scrapy_cluster.embedded.logfiles import ComponentLogs

Sink = Callable[[str], None]
VERB_WIDTH = 9
LONGEST_ECHO = 400
_ERROR = re.compile(r'^Error: |\b(?:ERROR|CRITICAL):|"level":\s*"(?:ERROR|CRITICAL)"')
_TRACEBACK = "Traceback (most recent call last):"
_TRACEBACK_GLUE = ("The above exception", "During handling of the above exception", "---")


def stdout_sink(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class TerminalSink:
    """Standard output that may go away: a closed pipe (``up | head -1``) or a hung-up terminal
    (a closed window, a dropped ssh session) fail the write with EPIPE or EIO (SIGPIPE is ignored
    by Python). The first such failure makes the sink silent for good (standard output is
    pointed at /dev/null, so the interpreter's last flush cannot fail either) and calls
    ``on_closed`` once: ``up`` then stops its children as on Ctrl-C.
    """

    def __init__(self, stream: TextIO | None = None,
                 on_closed: Callable[[], None] = lambda: None) -> None:
        self._stream = stream
        self.on_closed = on_closed
        self.closed = False

    def __call__(self, line: str) -> None:
        if self.closed:
            return
        stream = self._stream or sys.stdout
        try:
            stream.write(line + "\n")
            stream.flush()
        except OSError:
            self.closed = True
            _silence(stream)
            self.on_closed()


def _silence(stream: TextIO) -> None:
    try:
        descriptor = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, descriptor)
        os.close(devnull)
    except (OSError, ValueError):
        pass


def event_line(verb: str, text: str, at_s: float) -> str:
    """``HH:MM:SS  <verb>  <text>`` in local time."""
    return f"{time.strftime('%H:%M:%S', time.localtime(at_s))}  {verb:<{VERB_WIDTH}} {text}"


@dataclass
class _Stream:
    """Where one component's output is: inside a traceback or not, and its echo budget."""

    in_traceback: bool = False
    window_start_s: float = 0.0
    echoed: int = 0
    silenced: bool = False


@dataclass
class ErrorEcho:
    """Picks the lines of a child's output a person must see, one component at a time.

    A line at ERROR or CRITICAL (``... ERROR: ...`` of the human log format, uvicorn's
    ``ERROR:``, ``"level": "ERROR"`` of a JSON line) or a command's ``Error: ...`` (a bad
    option or setting, printed before the process exits) is shown as it is; a traceback is
    shown as ONE line, its last (``Traceback: ValueError: boom``). At most ``per_window``
    lines per component in ``window_s`` seconds: beyond that, one notice and silence until
    the window ends, so a failing site does not flood the terminal (the log file has it all).
    """

    per_window: int = 10
    window_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _streams: dict[str, _Stream] = field(default_factory=dict)

    def pick(self, name: str, line: str) -> str | None:
        """The text to show for ``line`` of ``name`` (None: nothing)."""
        stream = self._streams.setdefault(name, _Stream())
        shown = self._classify(stream, line)
        return None if shown is None else self._spend(stream, name, shown)

    @staticmethod
    def _classify(stream: _Stream, line: str) -> str | None:
        if stream.in_traceback:
            if not line.strip() or line[0].isspace() or line.startswith(_TRACEBACK_GLUE):
                return None
            stream.in_traceback = False
            return f"Traceback: {line}"
        if line.startswith(_TRACEBACK):
            stream.in_traceback = True
            return None
        return line if _ERROR.search(line) else None

    def _spend(self, stream: _Stream, name: str, shown: str) -> str | None:
        now_s = self.clock()
        if now_s - stream.window_start_s >= self.window_s:
            stream.window_start_s, stream.echoed, stream.silenced = now_s, 0, False
        stream.echoed += 1
        if stream.echoed <= self.per_window:
            return shown[:LONGEST_ECHO] + ("..." if len(shown) > LONGEST_ECHO else "")
        if stream.silenced:
            return None
        stream.silenced = True
        return f"more errors of {name} in the next {self.window_s:g}s are only in its log"


class Console:
    """The supervisor's output (``Supervisor(output=...)``): events and child lines.

    ``events`` False keeps supervisor events off the terminal (the demo prints only errors);
    ``logs`` receives every child line and every event about that child.
    """

    def __init__(self, sink: Sink = stdout_sink, *, verbose: bool = False, events: bool = True,
                 logs: ComponentLogs | None = None, echo: ErrorEcho | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._sink = sink
        self.verbose = verbose
        self.events = events
        self.logs = logs
        self._echo = echo or ErrorEcho()
        self._clock = clock
        self._lock = threading.Lock()

    def event(self, verb: str, text: str, *, component: str | None = None) -> None:
        """One terminal line; also a marker in ``component``'s log file."""
        now_s = self._clock()
        if component is not None and self.logs is not None:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now_s))
            self.logs.write(component, f"--- {stamp} up: {verb} {text}")
        if self.events:
            self._write(event_line(verb, text, now_s))

    def child_line(self, name: str, line: str) -> None:
        """A line of ``name``'s output: to its file; to the terminal when verbose or an error."""
        if self.logs is not None:
            self.logs.write(name, line)
        if self.verbose:
            self._write(f"[{name}] {line}")
            return
        with self._lock:
            shown = self._echo.pick(name, line)
        if shown is not None:
            self._write(event_line("error", f"[{name}] {shown}", self._clock()))

    def _write(self, line: str) -> None:
        with self._lock:
            self._sink(line)
