"""The Scrapy settings the cluster crawler runs with.

Use with plain Scrapy as ``SCRAPY_SETTINGS_MODULE=scrapy_cluster.crawler.settings``
(``scrapy crawl link`` / ``scrapy runspider``); ``scrapy-cluster crawler`` loads it too.
Cluster settings (REDIS_URL, KAFKA_*, ...) come from localsettings.py / the environment.
"""

from __future__ import annotations

BOT_NAME = "scrapy-cluster"
SPIDER_MODULES = ["scrapy_cluster.crawler.spiders"]
TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"

SCHEDULER = "scrapy_cluster.crawler.scheduler.DistributedScheduler"
# Tells the scheduler when each request really leaves (late sends, see crawler/send_clock.py)
DOWNLOAD_HANDLERS = {
    "http": "scrapy_cluster.crawler.send_clock.SendClockedDownloadHandler",
    "https": "scrapy_cluster.crawler.send_clock.SendClockedDownloadHandler",
}

# The SSRF guard's second step: only allowed addresses reach a connection (crawler/ssrf.py)
TWISTED_DNS_RESOLVER = "scrapy_cluster.crawler.ssrf.GuardedNameResolver"  # ssrf.RESOLVER_PATH

# Responsible crawling
ROBOTSTXT_OBEY = True
DNSCACHE_ENABLED = False
DOWNLOAD_MAXSIZE = 32 * 1024 * 1024
DOWNLOAD_WARNSIZE = 8 * 1024 * 1024
DOWNLOAD_TIMEOUT = 30
CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 4
COOKIES_ENABLED = False  # CrawlCookiesMiddleware sends each request's own cookies
HTTPERROR_ALLOW_ALL = True  # 404 and 500 pages become items too
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False
LOG_LEVEL = "INFO"

# Per-page CPU that buys nothing in the cluster (docs/crawler.md, "Throughput"):
CONCURRENT_ITEMS = 1  # Scrapy starts this many asyncio tasks per page; one item per page here
DOWNLOADER_STATS = False  # byte counts of every request/response in the local stats only

SPIDER_MIDDLEWARES = {
    "scrapy_cluster.crawler.middlewares.LeaseFinishMiddleware": 1,
    "scrapy_cluster.crawler.middlewares.MetaPassthroughMiddleware": 100,
    "scrapy.spidermiddlewares.depth.DepthMiddleware": None,
}
DOWNLOADER_MIDDLEWARES = {
    "scrapy_cluster.crawler.ssrf.SsrfGuardMiddleware": 50,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "scrapy_cluster.crawler.middlewares.FrontierRetryMiddleware": 550,
    "scrapy_cluster.crawler.middlewares.RecrawlMiddleware": 540,
    "scrapy.downloadermiddlewares.cookies.CookiesMiddleware": None,
    "scrapy_cluster.crawler.middlewares.CrawlCookiesMiddleware": 700,
    "scrapy_cluster.crawler.middlewares.ResponseStatsMiddleware": 860,
}
ITEM_PIPELINES = {
    "scrapy_cluster.crawler.pipelines.BusPipeline": 900,
}
EXTENSIONS = {
    "scrapy_cluster.crawler.politeness.CrawlDelayExtension": 500,
}
