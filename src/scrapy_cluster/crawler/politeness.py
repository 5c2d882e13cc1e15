"""robots.txt ``Crawl-delay`` in the Scrapy engine: the rule is ``common/crawl_delay.py``'s.

Scrapy's RobotsTxtMiddleware parses robots.txt (``ROBOTSTXT_OBEY``) and sends the
``robots_parsed`` signal; this extension reads the delay for our user agent and applies it
cluster-wide (only ever slower). ONE round trip per robots.txt parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.robotstxt import RobotParser

from scrapy_cluster.crawler.common.crawl_delay import CrawlDelay
from scrapy_cluster.crawler.common.resolution import cluster_settings
from scrapy_cluster.frontier.codec import DomainExtractor
from scrapy_cluster.redis_conn import RedisConfig


class CrawlDelayExtension:
    """Scrapy extension: robots.txt Crawl-delay slows the domain cluster-wide."""

    def __init__(self, client: redis.Redis, *, user_agent: str, default_hits: int,
                 default_window_s: float) -> None:
        self.rule = CrawlDelay(client, default_hits=default_hits,
                               default_window_s=default_window_s)
        self._domain = DomainExtractor()
        self.user_agent = user_agent

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CrawlDelayExtension:
        if not crawler.settings.getbool("ROBOTSTXT_OBEY"):
            raise NotConfigured("ROBOTSTXT_OBEY is off")
        settings: Mapping[str, Any] = cluster_settings(crawler)
        extension = cls(RedisConfig.from_settings(settings).sync_client(),
                        user_agent=crawler.settings.get("ROBOTSTXT_USER_AGENT")
                        or crawler.settings["USER_AGENT"],
                        default_hits=int(settings["QUEUE_HITS"]),
                        default_window_s=float(settings["QUEUE_WINDOW"]))
        crawler.signals.connect(extension.robots_parsed, signal=signals.robots_parsed)
        return extension

    def robots_parsed(self, robotparser: RobotParser, request: Request) -> None:
        delay_s = robotparser.crawl_delay(self.user_agent)
        if not delay_s or delay_s <= 0:
            return
        self.rule.apply(self._domain(request.url), float(delay_s))
