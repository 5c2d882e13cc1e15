"""The loopback addresses tests serve their sites on: one block per test family, named once.

Linux routes the whole of 127.0.0.0/8 to the loopback interface, so a test that needs several
"domains" serves one site on several 127.x.y.z addresses (throttles, robots.txt and leases are
per domain). A test family takes its hosts from its own block here, so two families never share
a host by accident: a shared host would share its throttle, its robots.txt cache and its
domain statistics whenever two tests meet on one Redis. ``tests/test_addresses.py`` checks that
no two blocks overlap.

127.0.0.0/16 is not handed out: it holds the project's own defaults (servers on 127.0.0.1, the
generated site's default hosts 127.0.0.2-3 (``SiteConfig.hosts``), the demo's domains
127.0.0.21-23) and the benchmarks' hosts (127.0.0.2-5, and 127.0.1.1 onwards). The tests'
blocks are 127.1.N.0/24. A host keeps the last number it had before the registry existed
(``POLITENESS.host(41)`` is 127.1.5.41), so the hosts of one test sort as they always did.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class Block:
    """A /24 of loopback addresses owned by one test family (``owner``: where it is used)."""

    owner: str
    network: ipaddress.IPv4Network

    def host(self, number: int) -> str:
        """The address ``number`` (1-254) of the block, e.g. ``127.1.5.41`` for 41."""
        if not 0 < number < self.network.num_addresses - 1:
            raise ValueError(f"{number} is not a host number of {self.network}")
        return str(self.network.network_address + number)

    def hosts(self, *numbers: int) -> tuple[str, ...]:
        return tuple(self.host(number) for number in numbers)


def _block(owner: str, network: str) -> Block:
    return Block(owner, ipaddress.IPv4Network(network))


RESERVED = _block("the project's defaults and the benchmarks (not for tests)", "127.0.0.0/16")
CRAWLER_CLUSTER = _block("tests/test_crawler_cluster.py", "127.1.1.0/24")
FAST_ENGINE_CRAWL = _block("tests/test_fast_engine_crawl.py", "127.1.2.0/24")
SITE_NGINX = _block("tests/test_crawler_site_nginx.py", "127.1.3.0/24")
UP = _block("tests/test_up.py, tests/reliability/test_up_restart.py", "127.1.4.0/24")
POLITENESS = _block("tests/test_crawler_politeness.py", "127.1.5.0/24")
DEPLOY_SUPERVISOR = _block("tests/test_deploy_supervisor.py", "127.1.6.0/24")
PLAIN_SCRAPY = _block("tests/test_plain_scrapy.py", "127.1.7.0/24")
HOSTILE_PAGES = _block("tests/reliability/test_hostile_pages.py", "127.1.8.0/24")
LOG_FIELDS = _block("tests/test_log_fields.py", "127.1.9.0/24")
CIRCUIT_BREAKER_CRAWL = _block("tests/test_circuit_breaker_crawl.py", "127.1.11.0/24")
CRAWLER_DEPTH = _block("tests/test_crawler_depth.py", "127.1.12.0/24")
SECURITY = _block("tests/reliability/test_security.py", "127.1.13.0/24")
MIGRATE_CRAWL = _block("tests/test_migrate_crawl.py", "127.1.14.0/24")
REDIS_MONITOR_CRAWL = _block("tests/test_redis_monitor_crawl.py", "127.1.15.0/24")
MIGRATE_ORIGINAL = _block("tests/test_migrate_original.py", "127.1.16.0/24")
REST_BROWSER = _block("tests/test_rest_browser.py", "127.1.17.0/24")
FUNNEL_CRAWL = _block("tests/test_funnel_crawl.py", "127.1.18.0/24")
CRAWLER_TELEMETRY = _block("tests/test_crawler_telemetry.py", "127.1.19.0/24")
SEEN_CACHE_CRAWL = _block("tests/test_seen_cache_crawl.py", "127.1.20.0/24")
CRAWL_CONTRACT = _block("tests/contract/test_crawl_contract.py", "127.1.21.0/24")
CRAWLER_KILLED = _block("tests/contract/test_crawler_killed.py", "127.1.22.0/24")
SETTINGS_FROM_ENV = _block("tests/contract/test_settings_from_env.py", "127.1.23.0/24")
WIRE_GAPS = _block("tests/contract/test_wire_gaps.py", "127.1.24.0/24")
CRAWLER_JSON_LOGS = _block("tests/test_crawler_json_logs.py", "127.1.25.0/24")
RELATIVE_SITE_CRAWL = _block("tests/test_relative_site_crawl.py", "127.1.26.0/24")
RECRAWL_NGINX = _block("tests/test_recrawl_nginx.py", "127.1.27.0/24")
SITEMAPS = _block("tests/support/sitemap_site.py (the sitemap tests)", "127.1.28.0/24")

BLOCKS: tuple[Block, ...] = (
    RESERVED, CRAWLER_CLUSTER, FAST_ENGINE_CRAWL, SITE_NGINX, UP, POLITENESS, DEPLOY_SUPERVISOR,
    PLAIN_SCRAPY, HOSTILE_PAGES, LOG_FIELDS, CIRCUIT_BREAKER_CRAWL, CRAWLER_DEPTH, SECURITY,
    MIGRATE_CRAWL, REDIS_MONITOR_CRAWL, MIGRATE_ORIGINAL, REST_BROWSER, FUNNEL_CRAWL,
    CRAWLER_TELEMETRY, SEEN_CACHE_CRAWL, CRAWL_CONTRACT, CRAWLER_KILLED, SETTINGS_FROM_ENV,
    WIRE_GAPS, CRAWLER_JSON_LOGS, RELATIVE_SITE_CRAWL, RECRAWL_NGINX, SITEMAPS)
