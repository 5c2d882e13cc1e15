"""``ScraperHandler``: crawl requests go onto the frontier; expiring crawls get a timeout job;
a request without ``recrawl`` gets its seed domain's re-crawl default (``recrawl_defaults``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from scrapy_cluster.api import recrawl as recrawl_api
from scrapy_cluster.errors import NotConfigured
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.kafka_monitor.plugins.base import CrawlFrontier, Failures, PipelinedHandler
from scrapy_cluster.kafka_monitor.recrawl_defaults import RecrawlDefaults
from scrapy_cluster.log import request_fields


class ScraperHandler(PipelinedHandler):
    """Validates crawl requests (``scraper_schema.json``) and enqueues them, deduplicated.

    The seed URL counts as seen by its crawl: the frontier adds its fingerprint to
    ``<spiderid>:dupefilter:<crawlid>``, so the same URL fed twice to one crawl is
    queued once (this also makes a retried batch harmless).
    """

    schema = "scraper_schema.json"

    def setup(self, settings: Mapping[str, Any]) -> None:
        if self.frontier is None:
            raise NotConfigured("ScraperHandler needs the frontier")
        self.crawl_frontier: CrawlFrontier = self.frontier
        self.jobs = JobWriter.from_settings(settings)
        self.recrawl_defaults = RecrawlDefaults.from_redis(self.redis, logger=self.logger)

    @classmethod
    def check_request(cls, message: dict[str, Any]) -> str | None:
        """``recrawl``: ``adaptive.min`` not above ``max``, ``until`` not past (no I/O)."""
        recrawl = message.get(recrawl_api.FIELD)
        return None if recrawl is None else recrawl_api.problem(recrawl)

    @classmethod
    def load_schema(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The crawl schema with ``maxdepth``'s maximum taken from CRAWL_MAXDEPTH_LIMIT."""
        schema = copy.deepcopy(super().load_schema(settings))
        schema["properties"]["maxdepth"]["maximum"] = int(settings["CRAWL_MAXDEPTH_LIMIT"])
        return schema

    def handle_batch(self, messages: Sequence[dict[str, Any]], pipe: Any) -> Failures:
        """Enqueue every request in one frontier call; queue timeouts on ``pipe``.

        Round trips: 1 (``enqueue_many``) plus 0 (timeouts ride on ``pipe``), plus at most one
        or two every few seconds for the re-crawl defaults (``RecrawlDefaults.apply``).
        """
        requests = [{**message, "curdepth": message.get("curdepth", 0)} for message in messages]
        given = self.recrawl_defaults.apply(requests)
        result = self.crawl_frontier.enqueue_many(requests, dedupe=True)
        failures: Failures = {index: f"frontier refused the request: {reason}"
                              for index, reason in result.invalid}
        for index, request in enumerate(requests):
            if index not in failures and request.get("expires", 0) > 0:
                self.jobs.queue_timeout(pipe, request["spiderid"], request["appid"],
                                        request["crawlid"], int(request["expires"]))
        self.logger.info("Added crawl to Redis", extra={
            "plugin": self.name, "requests": len(requests), "queued": result.queued,
            "duplicates": result.duplicates, "blacklisted": result.blacklisted,
            "invalid": len(failures), "recrawl_defaults": given, **request_fields(requests)})
        return failures
