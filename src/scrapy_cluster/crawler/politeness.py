"""robots.txt ``Crawl-delay`` applied cluster-wide through the frontier's domain throttle.

Scrapy's RobotsTxtMiddleware parses robots.txt (``ROBOTSTXT_OBEY``) and sends the
``robots_parsed`` signal; this extension reads the delay for our user agent and, when it is
longer than the domain's current throttle interval (QUEUE_WINDOW / QUEUE_HITS or the domain's
own configuration), sets the domain to one request per delay for every crawler. It never makes
a domain faster. ONE round trip per robots.txt parsed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib import resources
from typing import Any

import redis
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.robotstxt import RobotParser

from scrapy_cluster import keys
from scrapy_cluster.crawler.config import cluster_settings
from scrapy_cluster.frontier.codec import DomainExtractor
from scrapy_cluster.redis_conn import RedisConfig

logger = logging.getLogger(__name__)


def crawl_delay_script(client: redis.Redis) -> Any:
    source = resources.files("scrapy_cluster").joinpath("lua/crawler_crawl_delay.lua").read_text()
    return client.register_script(source)


class CrawlDelayExtension:
    """Scrapy extension: robots.txt Crawl-delay slows the domain cluster-wide."""

    def __init__(self, client: redis.Redis, *, user_agent: str, default_hits: int,
                 default_window_s: float) -> None:
        self._script = crawl_delay_script(client)
        self._domain = DomainExtractor()
        self.user_agent, self.default_hits, self.default_window_s = \
            user_agent, default_hits, default_window_s

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
        self.apply(self._domain(request.url), float(delay_s))

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
