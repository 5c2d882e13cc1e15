"""The ``link`` spider: one raw-response item per page, links followed to ``maxdepth``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.http import Response

from scrapy_cluster.crawler.common.link_rules import select_links
from scrapy_cluster.crawler.spiders.base import ClusterSpider


class LinkSpider(ClusterSpider):
    """Follows every allowed link (priority -10 per level) and yields one item per page.

    Per page: ONE frontier round trip for all its links (deduplicated per crawl there); the
    links the crawl's rules drop, and those past ``CRAWLER_MAX_LINKS_PER_PAGE``, are counted in
    its URL funnel.
    """

    name = "link"

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        unchanged = self.not_modified_output(response)
        if unchanged is not None:  # a re-crawled page that did not change: no link read
            yield from unchanged
            return
        found = self.read_links(response)
        selection = select_links(found.links, response.meta, self.now_s(), dropped=found.dropped)
        self.enqueue_links(response, selection.follow, filtered=selection.filtered)
        yield self.page_item(response, found.links, links_dropped=found.dropped)
