"""Spiders for tests and the demo (run with ``scrapy-cluster crawler --spider module:Class``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.http import Response

from scrapy_cluster.crawler.links import extract_links, links_to_follow
from scrapy_cluster.crawler.spiders.base import ClusterSpider


class HandoffSpider(ClusterSpider):
    """Like ``link``, but hands every followed link to the ``wandering`` spider."""

    name = "handoff"
    target_spider = "wandering"

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        links = extract_links(response)
        self.enqueue_links(response, links_to_follow(links, response.meta, self.now_s()),
                           spiderid=self.target_spider)
        yield self.page_item(response, links)
