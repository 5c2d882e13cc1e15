"""``ActionHandler``: ``info`` and ``stop`` requests become Redis Monitor jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scrapy_cluster import keys
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.kafka_monitor.plugins.base import Failures, PipelinedHandler


class ActionHandler(PipelinedHandler):
    """Writes ``info:...`` / ``stop:...`` jobs (``action_schema.json``)."""

    schema = "action_schema.json"

    def setup(self, settings: Mapping[str, Any]) -> None:
        self.jobs = JobWriter.from_settings(settings)

    def handle_batch(self, messages: Sequence[dict[str, Any]], pipe: Any) -> Failures:
        """Queue one job per request on ``pipe``. Round trips: 0."""
        for message in messages:
            build = keys.info_job if message["action"] == "info" else keys.stop_job
            key = build(message["spiderid"], message["appid"], message.get("crawlid"),
                        message["uuid"])
            self.jobs.queue_job(pipe, message["action"], key, message)
            self.logger.info("Added action to Redis", extra={"plugin": self.name, "key": key})
        return {}
