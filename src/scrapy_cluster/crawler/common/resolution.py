"""What a crawler process runs with, for both engines: the cluster settings, the Scrapy
settings built from them, and the spider.

``scrapy-cluster crawler`` loads the cluster settings once and hands them over in the Scrapy
setting ``SC_CLUSTER_SETTINGS``. Under plain ``scrapy crawl``/``runspider`` they are loaded by
``cluster_settings`` (defaults < localsettings.py < environment) and any cluster setting also
present in the Scrapy settings wins. ``scrapy_settings`` is the one Scrapy settings object both
engines read Scrapy-named settings (RETRY_TIMES, USER_AGENT, ...) from, so they obey the same
values and defaults.
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Mapping
from typing import Any

from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.settings import Settings as ScrapySettings
from scrapy.settings import default_settings

from scrapy_cluster.crawler import settings as crawler_settings
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.settings import load_settings
from scrapy_cluster.settings.defaults import DEFAULTS, SCRAPY_SECTION, SPECS

HANDOVER_SETTING = "SC_CLUSTER_SETTINGS"
COMPONENT = "crawler"


def cluster_settings(crawler: Crawler) -> Mapping[str, Any]:
    handed_over: Mapping[str, Any] | None = crawler.settings.get(HANDOVER_SETTING)
    if handed_over is not None:
        return handed_over
    overrides = {name: crawler.settings[name] for name in DEFAULTS
                 if name in crawler.settings and not hasattr(default_settings, name)}
    return load_settings(COMPONENT, overrides=overrides)


def scrapy_overrides(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Cluster settings that are not also Scrapy settings (Scrapy's own LOG_* stay Scrapy's)."""
    return {name: value for name, value in settings.items()
            if name.isupper() and not hasattr(default_settings, name)}


def hostname() -> str:
    return socket.gethostname()


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


BUILTIN_SPIDERS = {
    "link": "scrapy_cluster.crawler.spiders.link:LinkSpider",
    "wandering": "scrapy_cluster.crawler.spiders.wandering:WanderingSpider",
}


def resolve_spider(name: str) -> type[Spider]:
    """The Scrapy engine's spider class: ``link``, ``wandering`` or ``package.module:Class``
    (imported by name, as Scrapy loads its components); SettingsError when it is none."""
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

