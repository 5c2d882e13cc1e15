"""Run component processes as children: their output handed on line by line, restart with
backoff, clean stop.

Used by ``scrapy-cluster up`` and the demo. Each child is described by a ``ChildSpec``;
adding a component to the embedded cluster is one more spec. What the supervisor has to say
(a child started, exited, stopped) and every line a child writes go to its ``output``
(``console.Console``: the terminal and the per-component log files). A child that exits with
an error code has its last output line quoted in the restart event, so the reason is on the
terminal even when the child did not log it as an error (uvicorn's "address already in use").
Children get SIGTERM when the supervisor's process dies (``parent_death``): spawn them from the
main thread, which ``run`` is meant to be called in.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol

from scrapy_cluster.embedded.console import Console
from scrapy_cluster.embedded.parent_death import parent_death_preexec

LONGEST_REASON = 200


class SupervisorOutput(Protocol):
    """Where the supervisor's events and its children's output lines go."""

    def event(self, verb: str, text: str, *, component: str | None = None) -> None: ...

    def child_line(self, name: str, line: str) -> None: ...


@dataclass(frozen=True)
class ChildSpec:
    """One supervised process: ``name`` names its log file and prefixes its echoed lines."""

    name: str
    argv: Sequence[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class _Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes] | None = None
    pump: threading.Thread | None = None
    started_at_s: float = 0.0
    restarts: int = 0
    next_start_at_s: float = 0.0
    last_line: str = ""


class Supervisor:
    """Starts children, restarts any that die (exponential backoff), stops them all on request.

    A child that stayed up for ``stable_after_s`` gets its backoff reset.
    """

    def __init__(self, specs: Sequence[ChildSpec], *, output: SupervisorOutput | None = None,
                 backoff_initial_s: float = 1.0, backoff_max_s: float = 30.0,
                 stable_after_s: float = 60.0, check_interval_s: float = 0.2) -> None:
        self._children = [_Child(spec) for spec in specs]
        self.output: SupervisorOutput = output if output is not None else Console(verbose=True)
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._stable_after_s = stable_after_s
        self._check_interval_s = check_interval_s
        self._stopping = threading.Event()
        self._preexec = parent_death_preexec()

    def pids(self) -> dict[str, int]:
        """Current pid of each running child."""
        return {c.spec.name: c.process.pid for c in self._children
                if c.process is not None and c.process.poll() is None}

    def restarts(self) -> dict[str, int]:
        return {c.spec.name: c.restarts for c in self._children}

    def start(self) -> None:
        for child in self._children:
            self._spawn(child)

    def _spawn(self, child: _Child) -> None:
        env = {**os.environ, **child.spec.env, "PYTHONUNBUFFERED": "1"}
        child.process = subprocess.Popen(list(child.spec.argv), stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True, preexec_fn=self._preexec)
        child.started_at_s = time.monotonic()
        child.last_line = ""
        stream = child.process.stdout
        assert stream is not None
        # The event first: the child's output waits in the pipe until the pump reads it, so its
        # log file always opens with the "started" line.
        self.output.event("started", f"{child.spec.name} (pid {child.process.pid})",
                          component=child.spec.name)
        child.pump = threading.Thread(target=self._pump, args=(child, stream),
                                      name=f"log-{child.spec.name}", daemon=True)
        child.pump.start()

    def _pump(self, child: _Child, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.strip():
                child.last_line = line
            self.output.child_line(child.spec.name, line)
        stream.close()

    def check_once(self) -> None:
        """Restart children that died (after their backoff); called by ``run``."""
        now = time.monotonic()
        for child in self._children:
            process = child.process
            if process is None:
                if now >= child.next_start_at_s:
                    self._spawn(child)
                continue
            code = process.poll()
            if code is None:
                continue
            _drain(child.pump)
            uptime_s = now - child.started_at_s
            streak = 0 if uptime_s >= self._stable_after_s else child.restarts
            delay_s = min(self._backoff_max_s, self._backoff_initial_s * (2 ** streak))
            child.restarts += 1
            child.process = None
            child.next_start_at_s = now + delay_s
            self.output.event("restart", f"{child.spec.name} exited with code {code}"
                              f"{_reason(code, child.last_line)}; restarting in {delay_s:.1f}s "
                              f"(restart #{child.restarts})", component=child.spec.name)

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Supervise until ``stop()`` is called (or ``until()`` turns true)."""
        while not self._stopping.is_set() and not (until and until()):
            self.check_once()
            self._stopping.wait(self._check_interval_s)

    def request_stop(self) -> None:
        self._stopping.set()

    def stop(self, timeout_s: float = 10.0) -> dict[str, int | None]:
        """SIGTERM every child, wait up to ``timeout_s`` in total, SIGKILL the rest.

        Returns each child's exit code (None when it was not running).
        """
        self._stopping.set()
        # the processes are read once: the run loop may be replacing a child meanwhile
        running = [(c, c.process, c.pump) for c in self._children
                   if c.process is not None and c.process.poll() is None]
        for _, process, _ in running:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for child, process, pump in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.output.event("killed", f"{child.spec.name} did not stop in {timeout_s:g}s",
                                  component=child.spec.name)
                _signal_group(process, signal.SIGKILL)
                process.wait(5)
            _drain(pump)
            self.output.event("stopped", f"{child.spec.name} (exit code {process.returncode})",
                              component=child.spec.name)
        return {c.spec.name: (c.process.returncode if c.process else None) for c in self._children}


def _reason(code: int, last_line: str) -> str:
    """`` (<last output line>)`` of a child that exited with an error code; '' when it was
    killed by a signal (the code says why) or said nothing."""
    if code <= 0 or not last_line.strip():
        return ""
    text = last_line.strip()
    return f" ({text[:LONGEST_REASON]}{'...' if len(text) > LONGEST_REASON else ''})"


def _drain(pump: threading.Thread | None, timeout_s: float = 5.0) -> None:
    """Let a dead child's last lines (its traceback, Scrapy's closing lines) through before the
    event about its end: the pump ends at the pipe's EOF, which comes as soon as the child is
    gone; the bound only matters when a grandchild still holds the pipe."""
    if pump is not None:
        pump.join(timeout_s)


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass
