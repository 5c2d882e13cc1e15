"""The cluster settings a Scrapy component reads, whichever way the crawler was started.

``scrapy-cluster crawler`` loads them once and hands them over in the Scrapy setting
``SC_CLUSTER_SETTINGS``. Under plain ``scrapy crawl``/``runspider`` they are loaded here
(defaults < localsettings.py < environment) and any cluster setting also present in the Scrapy
settings wins.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from scrapy.crawler import Crawler
from scrapy.settings import default_settings

from scrapy_cluster.settings import load_settings
from scrapy_cluster.settings.defaults import DEFAULTS

HANDOVER_SETTING = "SC_CLUSTER_SETTINGS"
COMPONENT = "crawler"


def cluster_settings(crawler: Crawler) -> Mapping[str, Any]:
    handed_over = crawler.settings.get(HANDOVER_SETTING)
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
