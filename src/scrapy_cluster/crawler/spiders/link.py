"""The ``link`` spider: one raw-response item per page, links followed to ``maxdepth``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.http import Response

from scrapy_cluster.crawler.links import extract_links, links_to_follow
from scrapy_cluster.crawler.spiders.base import ClusterSpider


class LinkSpider(ClusterSpider):
    """Follows every allowed link (priority -10 per level) and yields one item per page.

    Per page: ONE frontier round trip for all its links (deduplicated per crawl there).
    """

    name = "link"

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        links = extract_links(response)
        self.enqueue_links(response, links_to_follow(links, response.meta, self.now_s()))
        yield self.page_item(response, links)
