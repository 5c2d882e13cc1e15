"""``StatsHandler``: stats requests become Redis Monitor jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scrapy_cluster import keys
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.kafka_monitor.plugins.base import Failures, PipelinedHandler


class StatsHandler(PipelinedHandler):
    """Writes ``statsrequest:<stats>:<appid>:<uuid>`` jobs (``stats_schema.json``)."""

    schema = "stats_schema.json"

    def setup(self, settings: Mapping[str, Any]) -> None:
        self.jobs = JobWriter.from_settings(settings)

    def handle_batch(self, messages: Sequence[dict[str, Any]], pipe: Any) -> Failures:
        """Queue one job per request on ``pipe``. Round trips: 0."""
        for message in messages:
            key = keys.stats_job(message["stats"], message["appid"], message["uuid"])
            self.jobs.queue_job(pipe, "statsrequest", key, message)
            self.logger.info("Added stats request to Redis",
                             extra={"plugin": self.name, "key": key})
        return {}
