"""``StatsMonitor``: answers stats requests of every type (``stats.cluster.ClusterStats``).

Answer: ``{stats, appid, uuid, server_time, ...body}`` where the body is the type's shape
(``nodes``/``total``/``fail``/``plugins`` for a component, ``spiders``, ``machines``,
``queues``, or one object per component for ``all``). Round trips: see ``ClusterStats``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapy_cluster.errors import JobError
from scrapy_cluster.redis_monitor.jobs import Job
from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor
from scrapy_cluster.stats.cluster import STATS_TYPES, ClusterStats


class StatsMonitor(BaseMonitor):
    job_types = ("statsrequest",)
    regex = r"^statsrequest:"
    required = {"appid": str, "uuid": str}
    optional = {"stats": str}

    def setup(self, settings: Mapping[str, Any]) -> None:
        self.cluster = ClusterStats(self.redis, settings, frontier=self.frontier, clock=self.clock)

    def handle(self, job: Job) -> None:
        request = self.validate(job)
        stats_type = request.get("stats", "all")
        if stats_type not in STATS_TYPES:
            raise JobError(f"unknown stats type {stats_type!r}; expected one of "
                           f"{', '.join(STATS_TYPES)}")
        body = self.cluster.answer(stats_type)
        self.send({"stats": stats_type, "appid": request["appid"], "uuid": request["uuid"],
                   "server_time": self.server_time(), **body})
        self.logger.info("Sent stats to bus", extra={"key": job.key, "stats": stats_type})
