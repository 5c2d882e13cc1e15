"""The Scrapy engine's run: Scrapy's ``CrawlerProcess`` with the cluster settings and a spider.

``runner.run_crawler`` chooses the engine; this module runs the Scrapy one. With ``SC_LOG_JSON``
the cluster's JSON lines govern every record (``common/process_logging.py``): Scrapy installs no
root handler of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapy import Spider
from scrapy.crawler import CrawlerProcess
from scrapy.settings import Settings as ScrapySettings

from scrapy_cluster.crawler.common.process_logging import PREFIX, start_crawler_logging
from scrapy_cluster.crawler.common.resolution import scrapy_settings


def crawler_process(settings: ScrapySettings, cluster: Mapping[str, Any]) -> CrawlerProcess:
    """Scrapy's ``CrawlerProcess`` for ``settings``, logging as ``cluster`` says (see
    ``common/process_logging.py``). ``settings`` is changed in place."""
    json_lines = bool(cluster[PREFIX + "LOG_JSON"])
    if json_lines:
        settings.set("LOG_INSTALL_ROOT_HANDLER", False, priority="cmdline")
        # The cluster's LOG_STDOUT (write to stdout) is not Scrapy's (stdout becomes a logger).
        settings.set("LOG_STDOUT", False, priority="cmdline")
    process = CrawlerProcess(settings)
    if json_lines:
        # Scrapy's set-up (logging.config.dictConfig) has closed every handler: a fresh one.
        start_crawler_logging(cluster)
    return process


def run_scrapy_crawler(cluster: Mapping[str, Any], spider_cls: type[Spider]) -> None:
    """Run ``spider_cls`` on Scrapy until SIGTERM/SIGINT (in-flight requests finish first)."""
    process = crawler_process(scrapy_settings(cluster), cluster)
    process.crawl(spider_cls)
    process.start()
