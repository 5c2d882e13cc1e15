"""Run one crawler process: Scrapy's ``CrawlerProcess`` with the cluster settings and a spider."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any

from scrapy import Spider
from scrapy.settings import Settings as ScrapySettings
from scrapy.settings import default_settings

from scrapy_cluster.crawler import settings as crawler_settings
from scrapy_cluster.crawler.config import HANDOVER_SETTING, scrapy_overrides
from scrapy_cluster.crawler.logging_setup import crawler_process, start_crawler_logging
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.migration.version import check_at_start
from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.settings.defaults import SCRAPY_SECTION, SPECS

BUILTIN_SPIDERS = {
    "link": "scrapy_cluster.crawler.spiders.link:LinkSpider",
    "wandering": "scrapy_cluster.crawler.spiders.wandering:WanderingSpider",
}


def resolve_spider(name: str) -> type[Spider]:
    """``link``, ``wandering`` or ``package.module:Class``; SettingsError when it is none."""
    target = BUILTIN_SPIDERS.get(name, name)
    module_name, _, class_name = target.partition(":")
    if not class_name:
        raise SettingsError(f"spider {name!r}: expected link, wandering or package.module:Class")
    try:
        spider_cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise SettingsError(f"spider {name!r} cannot be loaded: {exc}") from exc
    if not (isinstance(spider_cls, type) and issubclass(spider_cls, Spider)):
        raise SettingsError(f"spider {name!r} is not a scrapy.Spider subclass")
    return spider_cls


CLUSTER_ONLY = frozenset(spec.name for spec in SPECS if spec.section != SCRAPY_SECTION)
"""Cluster settings whose names Scrapy also has with another meaning (LOG_FILE, LOG_STDOUT,
LOG_LEVEL, STATS_DUMP): never handed to Scrapy."""


def scrapy_settings(cluster: Mapping[str, Any]) -> ScrapySettings:
    """Scrapy settings: this package's crawler settings, then the cluster settings."""
    result = ScrapySettings()
    result.setmodule(crawler_settings, priority="project")
    result.update(scrapy_overrides(cluster), priority="project")
    for name, value in cluster.items():
        if name not in CLUSTER_ONLY and hasattr(default_settings, name) \
                and _explicit(cluster, name):
            result.set(name, value, priority="cmdline")
    result.set("CONCURRENT_REQUESTS", int(cluster["CRAWLER_CONCURRENCY"]), priority="cmdline")
    result.set("CONCURRENT_REQUESTS_PER_DOMAIN", int(cluster["CRAWLER_PER_DOMAIN_CONCURRENCY"]),
               priority="cmdline")
    result.set("LOG_LEVEL", str(cluster.get("SC_LOG_LEVEL", "INFO")), priority="cmdline")
    result.set(HANDOVER_SETTING, cluster, priority="cmdline")
    return result


def _explicit(cluster: Mapping[str, Any], name: str) -> bool:
    source = getattr(cluster, "source", None)
    return source is None or not str(source(name)).startswith("default")


def check_key_layout(cluster: Mapping[str, Any]) -> None:
    """Stamp the Redis key layout version when absent; ``SchemaVersionError`` when Redis holds
    a version this code does not know (one round trip; an unreachable Redis is only logged)."""
    client = RedisConfig.from_settings(cluster).sync_client()
    try:
        check_at_start(client, logging.getLogger(__name__))
    finally:
        client.close()


ENGINES = ("scrapy", "fast")


def run_crawler(cluster: Mapping[str, Any]) -> None:
    """Run the configured spider until SIGTERM/SIGINT (in-flight requests finish first), on
    the engine CRAWLER_ENGINE names (``scrapy`` or ``fast``)."""
    start_crawler_logging(cluster)
    engine = str(cluster.get("CRAWLER_ENGINE") or "scrapy")
    if engine not in ENGINES:
        raise SettingsError(f"CRAWLER_ENGINE {engine!r}: expected scrapy or fast")
    if engine == "fast":
        from scrapy_cluster.crawler.fast.app import check_spider, run_fast_crawler

        check_spider(str(cluster["CRAWLER_SPIDER"]))
        check_key_layout(cluster)
        run_fast_crawler(cluster)
        return
    spider_cls = resolve_spider(str(cluster["CRAWLER_SPIDER"]))
    check_key_layout(cluster)
    process = crawler_process(scrapy_settings(cluster), cluster)
    process.crawl(spider_cls)
    process.start()
