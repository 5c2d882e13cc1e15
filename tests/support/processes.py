"""Stopping the component processes a test started."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence


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
