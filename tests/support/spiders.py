"""Spiders for tests (run with ``scrapy-cluster crawler --spider module:Class``).

A crawler process started from another directory imports them only with the repository on its
path: start it with ``importable_env()`` in its environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scrapy.http import Response

from scrapy_cluster.crawler.common.link_rules import links_to_follow
from scrapy_cluster.crawler.page_links import extract_links
from scrapy_cluster.crawler.spiders.base import ClusterSpider

HANDOFF_SPIDER = "tests.support.spiders:HandoffSpider"
REPOSITORY = Path(__file__).resolve().parents[2]


def importable_env() -> dict[str, str]:
    """``PYTHONPATH`` for a subprocess that must import this module (and ``tests``)."""
    paths = [str(REPOSITORY), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(path for path in paths if path)}


class HandoffSpider(ClusterSpider):
    """Like ``link``, but hands every followed link to the ``wandering`` spider."""

    name = "handoff"
    target_spider = "wandering"

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        links = extract_links(response)
        self.enqueue_links(response, links_to_follow(links, response.meta, self.now_s()),
                           spiderid=self.target_spider)
        yield self.page_item(response, links)
