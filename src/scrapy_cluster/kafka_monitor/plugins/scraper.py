"""``ScraperHandler``: crawl requests go onto the frontier, with the discovery requests of their
sitemaps (``api.sitemaps``); expiring crawls get a timeout job; a request without ``recrawl``
or ``sitemaps`` gets its seed domain's default (``domain_defaults``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from scrapy_cluster.api import recrawl as recrawl_api
from scrapy_cluster.api import sitemaps as sitemaps_api
from scrapy_cluster.errors import NotConfigured
from scrapy_cluster.kafka_monitor.domain_defaults import DomainDefaults
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.kafka_monitor.plugins.base import CrawlFrontier, Failures, PipelinedHandler
from scrapy_cluster.log import request_fields


class ScraperHandler(PipelinedHandler):
    """Validates crawl requests (``scraper_schema.json``) and enqueues them, deduplicated.

    The seed URL counts as seen by its crawl: the frontier adds its fingerprint to
    ``<spiderid>:dupefilter:<crawlid>``, so the same URL fed twice to one crawl is
    queued once (this also makes a retried batch harmless). So do the discovery requests
    of a crawl's sitemaps (robots.txt, sitemap URLs), queued in the same call.
    """

    schema = "scraper_schema.json"

    def setup(self, settings: Mapping[str, Any]) -> None:
        if self.frontier is None:
            raise NotConfigured("ScraperHandler needs the frontier")
        self.crawl_frontier: CrawlFrontier = self.frontier
        self.jobs = JobWriter.from_settings(settings)
        self.domain_defaults = DomainDefaults.from_redis(self.redis, logger=self.logger)

    @classmethod
    def check_request(cls, message: dict[str, Any]) -> str | None:
        """``recrawl``: ``adaptive.min`` not above ``max``, ``until`` not past; ``sitemaps``:
        every listed URL with a host and a valid port (no I/O)."""
        recrawl = message.get(recrawl_api.FIELD)
        reason = None if recrawl is None else recrawl_api.problem(recrawl)
        return reason or sitemaps_api.problem(message)

    @classmethod
    def load_schema(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The crawl schema with ``maxdepth``'s maximum taken from CRAWL_MAXDEPTH_LIMIT."""
        schema = copy.deepcopy(super().load_schema(settings))
        schema["properties"]["maxdepth"]["maximum"] = int(settings["CRAWL_MAXDEPTH_LIMIT"])
        return schema

    def handle_batch(self, messages: Sequence[dict[str, Any]], pipe: Any) -> Failures:
        """Enqueue every request, and its sitemaps' discovery requests, in one frontier call;
        queue timeouts on ``pipe``. A request fails when the frontier refuses it or one of its
        discovery requests (the others are queued all the same).

        Round trips: 1 (``enqueue_many``) plus 0 (timeouts ride on ``pipe``), plus at most one
        or two every few seconds for the domain defaults (``DomainDefaults.apply``).
        """
        requests = [{**message, "curdepth": message.get("curdepth", 0)} for message in messages]
        given = self.domain_defaults.apply(requests)
        batch, owners = _with_discovery(requests)
        result = self.crawl_frontier.enqueue_many(batch, dedupe=True)
        failures: Failures = {}
        for index, reason in sorted(result.invalid):
            owner = owners[index]
            if owner in failures:
                continue
            what = f"sitemap request {batch[index]['url']}" \
                if sitemaps_api.REQUEST_FIELD in batch[index] else "request"
            failures[owner] = f"frontier refused the {what}: {reason}"
        for index, request in enumerate(requests):
            if index not in failures and request.get("expires", 0) > 0:
                self.jobs.queue_timeout(pipe, request["spiderid"], request["appid"],
                                        request["crawlid"], int(request["expires"]))
        self.logger.info("Added crawl to Redis", extra={
            "plugin": self.name, "requests": len(requests), "queued": result.queued,
            "duplicates": result.duplicates, "blacklisted": result.blacklisted,
            "invalid": len(failures), "sitemap_requests": len(batch) - len(requests),
            "recrawl_defaults": given[recrawl_api.FIELD],
            "sitemaps_defaults": given[sitemaps_api.FIELD], **request_fields(requests)})
        return failures


def _with_discovery(requests: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]],
                                                                  list[int]]:
    """What to enqueue: each request (without the fields not queued) followed by its discovery
    requests; and for each, the index of the request it comes from."""
    batch: list[dict[str, Any]] = []
    owners: list[int] = []
    for index, request in enumerate(requests):
        made = [sitemaps_api.queued_form(request), *sitemaps_api.discovery_requests(request)]
        batch += made
        owners += [index] * len(made)
    return batch, owners
