"""robots.txt ``Crawl-delay`` applied cluster-wide through the frontier's domain throttle.

When a robots.txt asks for a delay longer than the domain's current throttle interval
(QUEUE_WINDOW / QUEUE_HITS or the domain's own configuration), the domain is set to one request
per delay for every crawler (``lua/crawler_crawl_delay.lua``, ``domain-config:throttle``). It
never makes a domain faster. Both engines call ``CrawlDelay.apply``: the Scrapy engine from
``crawler/politeness.py``'s ``CrawlDelayExtension``, the fast engine from its domain hooks.
"""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

import redis

from scrapy_cluster import keys

logger = logging.getLogger(__name__)


def crawl_delay_script(client: redis.Redis) -> Any:
    source = resources.files("scrapy_cluster").joinpath("lua/crawler_crawl_delay.lua").read_text()
    return client.register_script(source)


class CrawlDelay:
    """The Crawl-delay rule on one Redis client; ``default_hits`` / ``default_window_s``: the
    throttle of a domain without its own configuration (QUEUE_HITS, QUEUE_WINDOW)."""

    def __init__(self, client: redis.Redis, *, default_hits: int, default_window_s: float) -> None:
        self._script = crawl_delay_script(client)
        self.default_hits, self.default_window_s = default_hits, default_window_s

    def apply(self, domain: str, delay_s: float) -> bool:
        """Raise ``domain``'s interval to ``delay_s`` when it is shorter. ONE round trip."""
        try:
            slowed = bool(self._script(keys=[keys.domain_throttle_config()],
                                       args=[domain, delay_s, self.default_hits,
                                             self.default_window_s]))
        except redis.RedisError as exc:
            logger.warning("could not apply robots.txt Crawl-delay: %s", exc,
                           extra={"domain": domain})
            return False
        if slowed:
            logger.info("robots.txt Crawl-delay slows the domain for the cluster",
                        extra={"domain": domain, "crawl_delay_s": delay_s})
        return slowed
