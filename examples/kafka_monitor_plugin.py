"""An example Kafka Monitor plugin: a "sitemap" API that starts a crawl with the sitemap spider.

Request (``sitemap_schema.json``, beside this file)::

    {"sitemap_url": "https://example.com/sitemap.xml", "appid": "testapp",
     "crawlid": "sm-1", "priority": 50}

Enable it next to the default plugins in ``localsettings.py``::

    PLUGINS = {"examples.kafka_monitor_plugin.SitemapHandler": 50}
    SITEMAP_SPIDER = "sitemap"      # optional; read in setup()

(the directory holding ``examples/`` must be importable, e.g. on PYTHONPATH).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapy_cluster.errors import NotConfigured
from scrapy_cluster.kafka_monitor.plugins import BaseHandler


class SitemapHandler(BaseHandler):
    """Turns a sitemap request into a crawl request for the sitemap spider."""

    schema = "sitemap_schema.json"

    def setup(self, settings: Mapping[str, Any]) -> None:
        if self.frontier is None:
            raise NotConfigured("SitemapHandler needs the frontier")
        self.crawl_frontier = self.frontier
        self.spiderid = str(settings.get("SITEMAP_SPIDER", "sitemap"))

    def handle(self, message: dict[str, Any]) -> None:
        request = {"url": message["sitemap_url"], "appid": message["appid"],
                   "crawlid": message["crawlid"], "spiderid": self.spiderid,
                   "priority": message["priority"], "maxdepth": 1, "curdepth": 0}
        result = self.crawl_frontier.enqueue_many([request], dedupe=True)
        if result.invalid:
            raise ValueError(f"frontier refused the sitemap request: {result.invalid[0][1]}")
        self.logger.info("Added sitemap crawl to Redis",
                         extra={"url": request["url"], "crawlid": request["crawlid"]})
