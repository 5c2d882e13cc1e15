"""Run one crawler process: choose the engine CRAWLER_ENGINE names and run it.

The Scrapy engine runs in ``scrapy_engine.py``, the fast engine in ``fast/app.py``; both are
checked first (the spider, the Redis key layout) so a bad setting fails before anything starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from scrapy_cluster.crawler.common.process_logging import start_crawler_logging
from scrapy_cluster.crawler.common.resolution import resolve_spider
from scrapy_cluster.crawler.scrapy_engine import run_scrapy_crawler
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.layout import check_at_start
from scrapy_cluster.redis_conn import RedisConfig

ENGINES = ("scrapy", "fast")


def check_key_layout(cluster: Mapping[str, Any]) -> None:
    """Stamp the Redis key layout version when absent; ``SchemaVersionError`` when Redis holds
    a version this code does not know (one round trip; an unreachable Redis is only logged)."""
    client = RedisConfig.from_settings(cluster).sync_client()
    try:
        check_at_start(client, logging.getLogger(__name__))
    finally:
        client.close()


def run_crawler(cluster: Mapping[str, Any]) -> None:
    """Run the configured spider until SIGTERM/SIGINT (in-flight requests finish first), on
    the engine CRAWLER_ENGINE names (``scrapy`` or ``fast``)."""
    start_crawler_logging(cluster)
    engine = str(cluster.get("CRAWLER_ENGINE") or "scrapy")
    if engine not in ENGINES:
        raise SettingsError(f"CRAWLER_ENGINE {engine!r}: expected scrapy or fast")
    spider = str(cluster["CRAWLER_SPIDER"])
    if engine == "fast":
        # Imported only when chosen: the Scrapy engine does not load aiohttp (~0.16 s).
        from scrapy_cluster.crawler.fast.app import check_spider, run_fast_crawler

        check_spider(spider)
        check_key_layout(cluster)
        run_fast_crawler(cluster)
        return
    spider_cls = resolve_spider(spider)
    check_key_layout(cluster)
    run_scrapy_crawler(cluster, spider_cls)
