"""Children that end with their parent, even when the parent is killed with SIGKILL.

``scrapy-cluster up`` stops its children itself on every ending it can see (Ctrl-C, SIGTERM,
SIGHUP, a closed terminal, an exception). SIGKILL gives it no chance, so every child it starts
asks the kernel (Linux ``prctl(PR_SET_PDEATHSIG)``) for SIGTERM when its parent dies: the
crawlers then hand their leases back and the embedded redis-server fsyncs its append-only file,
as on Ctrl-C.

The signal is tied to the *thread* that forked the child: spawn from the main thread (or one
that lives as long as the process), never from a short-lived worker thread. Elsewhere than
Linux there is no such call; ``preexec`` is then None and only the other endings are covered.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def parent_death_preexec(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that makes the child get ``signum`` when this
    process dies; None where the platform has no parent-death signal.

    libc is resolved here, in the parent: between fork and exec the child only calls the
    resolved function. A parent that died before the call (the signal would never come) is
    noticed through ``getppid`` and the child signals itself.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent_pid = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signum)

    return preexec
