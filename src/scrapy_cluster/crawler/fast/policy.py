"""The settings one fast-engine page reads, resolved once (``PagePolicy.from_settings``).

Scrapy-named settings (RETRY_TIMES, DOWNLOAD_TIMEOUT, USER_AGENT, ...) are read through the
same Scrapy settings object the Scrapy crawler builds (``common/resolution.scrapy_settings``), so both
engines obey the same values and defaults.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scrapy.downloadermiddlewares.httpcompression import ACCEPTED_ENCODINGS

from scrapy_cluster.crawler.common.address_guard import IpNetwork
from scrapy_cluster.crawler.common.resolution import scrapy_settings
from scrapy_cluster.crawler.common.sitemap_flow import limits_from_settings
from scrapy_cluster.crawler.common.sitemaps import DEFAULT_LIMITS, SitemapLimits

ENVELOPE_MARGIN_BYTES = 1024
"""As ``pipelines.BusPipeline``: room for the bus envelope under BUS_MAX_MESSAGE_BYTES."""


@dataclass(frozen=True)
class PagePolicy:
    """``allowed_networks`` None: the SSRF guard is off (CRAWLER_ALLOW_PRIVATE_NETWORKS)."""

    base64_body: bool = False
    max_links: int = 1000
    retry_times: int = 2
    retry_http_codes: frozenset[int] = frozenset({500, 502, 503, 504, 522, 524, 408, 429})
    retry_priority_adjust: int = -1
    redirect_max_times: int = 20
    redirect_priority_adjust: int = 2
    download_timeout_s: float = 180.0
    download_maxsize: int = 32 * 1024 * 1024
    robots_obey: bool = True
    robots_user_agent: str | None = None
    default_headers: tuple[tuple[str, str], ...] = ()
    user_agent: str = "Scrapy"
    accept_encoding: str = "gzip, deflate, br, zstd"
    allowed_networks: tuple[IpNetwork, ...] | None = ()
    max_item_bytes: int = 1024 * 1024 - ENVELOPE_MARGIN_BYTES
    sitemap_limits: SitemapLimits = DEFAULT_LIMITS

    @classmethod
    def from_settings(cls, cluster: Mapping[str, Any]) -> PagePolicy:
        scrapy = scrapy_settings(cluster)
        private_ok = bool(cluster["CRAWLER_ALLOW_PRIVATE_NETWORKS"])
        networks = tuple(ipaddress.ip_network(str(n), strict=False)
                         for n in cluster["CRAWLER_ALLOWED_PRIVATE_NETWORKS"])
        return cls(
            base64_body=bool(cluster["KAFKA_BASE_64_ENCODE"]),
            max_links=int(cluster["CRAWLER_MAX_LINKS_PER_PAGE"]),
            retry_times=scrapy.getint("RETRY_TIMES"),
            retry_http_codes=frozenset(int(c) for c in scrapy.getlist("RETRY_HTTP_CODES")),
            retry_priority_adjust=scrapy.getint("RETRY_PRIORITY_ADJUST"),
            redirect_max_times=scrapy.getint("REDIRECT_MAX_TIMES"),
            redirect_priority_adjust=scrapy.getint("REDIRECT_PRIORITY_ADJUST"),
            download_timeout_s=scrapy.getfloat("DOWNLOAD_TIMEOUT"),
            download_maxsize=scrapy.getint("DOWNLOAD_MAXSIZE"),
            robots_obey=scrapy.getbool("ROBOTSTXT_OBEY"),
            robots_user_agent=scrapy.get("ROBOTSTXT_USER_AGENT") or None,
            default_headers=tuple((str(k), str(v)) for k, v in
                                  scrapy.getdict("DEFAULT_REQUEST_HEADERS").items()),
            user_agent=str(scrapy.get("USER_AGENT")),
            accept_encoding=b", ".join(ACCEPTED_ENCODINGS).decode("latin-1"),
            allowed_networks=None if private_ok else networks,
            max_item_bytes=max(4096, int(cluster["BUS_MAX_MESSAGE_BYTES"])
                               - ENVELOPE_MARGIN_BYTES),
            sitemap_limits=limits_from_settings(cluster),
        )
