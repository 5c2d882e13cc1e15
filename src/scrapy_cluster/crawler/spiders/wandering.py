"""The ``wandering`` spider: follows one random allowed link per page; ``attrs.step`` counts hops."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from scrapy import Request
from scrapy.http import Response

from scrapy_cluster.crawler.common.link_rules import crawl_expired, rules_for
from scrapy_cluster.crawler.spiders.base import ClusterSpider


class WanderingSpider(ClusterSpider):
    """Hops from page to page until a page has no new allowed link (maxdepth is not used)."""

    name = "wandering"
    rng = random.Random()

    def parse(self, response: Response) -> Iterator[Any]:
        step = int(response.meta.get("step") or 0)
        unchanged = self.not_modified_output(response)
        if unchanged is not None:  # a re-crawled page that did not change: no link followed
            for item in unchanged:
                item["attrs"] = {**(item.get("attrs") or {}), "step": step}
                yield item
            return
        found = self.read_links(response)
        links = found.links
        item = self.page_item(response, links, links_dropped=found.dropped)
        item["attrs"] = {**(item.get("attrs") or {}), "step": step}
        rules = rules_for(response.meta)
        candidates = [] if crawl_expired(response.meta, self.now_s()) else \
            [link for link in links if rules.allows(link.url)]
        if candidates:
            link = self.rng.choice(candidates)
            yield Request(link.url, callback=self.parse, meta={"step": step + 1},
                          priority=int(response.meta.get("priority") or 0))
        yield item
