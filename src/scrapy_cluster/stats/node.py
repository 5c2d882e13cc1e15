"""What a live node reports about itself beside its heartbeat (``keys.node_info``).

``NodeInfo`` keeps one ``psutil.Process`` of the running process: ``cpu_percent`` is measured
between two calls on the same object, so the constructor makes the priming call and each
``snapshot()`` reports the CPU used since the previous one (100 = one core busy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psutil

from scrapy_cluster import __version__


class NodeInfo:
    """Builds ``{version, engine, spiders, cpu_percent, rss_bytes, started}`` for one process.

    ``engine`` (the crawl engine, e.g. ``scrapy``) and ``spiders`` are left out when None: a
    Kafka Monitor or Redis Monitor has neither. ``started`` is the process start, epoch s.
    """

    def __init__(self, *, engine: str | None = None, spiders: Sequence[str] | None = None,
                 process: psutil.Process | None = None) -> None:
        self.engine = engine
        self.spiders = list(spiders) if spiders is not None else None
        self.process = process or psutil.Process()
        self.started = int(self.process.create_time())
        self.process.cpu_percent(None)  # priming call: the first one always says 0.0

    def snapshot(self) -> dict[str, Any]:
        """The node's description now. No Redis I/O; about 50 microseconds (two /proc reads)."""
        info: dict[str, Any] = {"version": __version__}
        if self.engine is not None:
            info["engine"] = self.engine
        if self.spiders is not None:
            info["spiders"] = list(self.spiders)
        info.update(cpu_percent=self.process.cpu_percent(None),
                    rss_bytes=int(self.process.memory_info().rss), started=self.started)
        return info

    __call__ = snapshot
