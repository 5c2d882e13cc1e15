"""Stopping the component processes a test started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def stop_processes(processes: Sequence[subprocess.Popen[bytes]]) -> list[int | None]:
    """SIGTERM every live process (SIGCONT first, in case a test paused it), wait up to 20 s
    each, SIGKILL stragglers; returns the exit codes in order."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for process in processes:
        try:
            codes.append(process.wait(20))
        except subprocess.TimeoutExpired:
            process.kill()
            codes.append(process.wait(5))
    return codes


class Processes:
    """``python -m scrapy_cluster ...`` subprocesses, always stopped at the end of the test."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.commands: dict[int, str] = {}

    def start(self, env: dict[str, str], *command: str) -> subprocess.Popen[bytes]:
        path = self.log_dir / f"{'-'.join(command)}-{len(self.processes)}.log"
        with open(path, "wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "scrapy_cluster", *command],
                                       env={**os.environ, **env}, stdout=log, stderr=log)
        self.processes.append((process, path))
        self.commands[process.pid] = " ".join(command)
        return process

    def log(self, process: subprocess.Popen[bytes]) -> str:
        path = next(path for started, path in self.processes if started is process)
        return path.read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {self.commands[process.pid]} (pid {process.pid}):\n"
                         f"{self.log(process)[-3000:]}" for process, _ in self.processes)

    def stop_all(self) -> list[int | None]:
        return stop_processes([process for process, _ in self.processes])
