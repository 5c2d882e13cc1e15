"""``ZookeeperHandler``: domain throttle and blacklist changes become Redis Monitor jobs.

The name is kept from the original API; where the domain configuration lives
(Redis or ZooKeeper) is the Redis Monitor's concern (DOMAIN_CONFIG_BACKEND).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scrapy_cluster import keys
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.kafka_monitor.plugins.base import Failures, PipelinedHandler


class ZookeeperHandler(PipelinedHandler):
    """Writes ``zk:<action>:<domain>:<appid>:<uuid>`` jobs (``zookeeper_schema.json``)."""

    schema = "zookeeper_schema.json"

    def setup(self, settings: Mapping[str, Any]) -> None:
        self.jobs = JobWriter.from_settings(settings)

    def handle_batch(self, messages: Sequence[dict[str, Any]], pipe: Any) -> Failures:
        """Queue one job per request on ``pipe``. Round trips: 0."""
        for message in messages:
            key = keys.domain_config_job(message["action"], message["domain"],
                                         message["appid"], message["uuid"])
            self.jobs.queue_job(pipe, "zk", key, message)
            self.logger.info("Added domain configuration to Redis",
                             extra={"plugin": self.name, "key": key})
        return {}
