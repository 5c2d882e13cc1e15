"""Crawler telemetry as written by a real crawler process: the enqueue-to-fetch histogram, failed
downloads by exception type, the last error of a domain, and the node descriptions beside the
heartbeats of the crawler and of both monitors.

Real redis-server, Redis Streams bus, the generated site, one crawler process; the Kafka
Monitor and the Redis Monitor run in threads of this process (tests/support/monitors.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from scrapy_cluster import __version__, keys
from scrapy_cluster.sitegen.site import SiteConfig
from scrapy_cluster.stats.histogram import RedisHistogram
from tests.support.addresses import CRAWLER_TELEMETRY
from tests.support.cluster import Cluster, running_cluster
from tests.support.monitors import Api, run_crawl, running_monitors
from tests.support.services import free_port

pytestmark = pytest.mark.integration

HOST = CRAWLER_TELEMETRY.host(95)
SITE_CONFIG = SiteConfig(hosts=(HOST,), graph=(((HOST, 0), ((HOST, 1), (HOST, 2))),
                                               ((HOST, 1), ((HOST, 2),))), page_bytes=600)
NODE_FIELDS = {"version", "cpu_percent", "rss_bytes", "started"}


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A 3-page crawl and a crawl of a port nobody listens on, both over; what they left."""
    tmp = tmp_path_factory.mktemp("telemetry")
    with running_cluster(tmp, SITE_CONFIG) as cluster, \
            running_monitors(cluster, tmp / "data") as settings:
        cluster.start_crawler("link", STATS_CYCLE="1")
        api = Api(settings)
        try:
            yield crawl_both(cluster, api)
        finally:
            api.close()


def crawl_both(cluster: Cluster, api: Api) -> dict[str, Any]:
    before = cluster.site.hits_snapshot()
    pages = run_crawl(cluster, api, {
        "url": cluster.site.site.page_url((HOST, 0)), "appid": "telemetry",
        "crawlid": uuid.uuid4().hex, "spiderid": "link", "maxdepth": 1}, expected_items=3)
    hits = cluster.site.hits_snapshot() - before
    unreachable = f"http://127.0.0.1:{free_port()}/nobody-home.html"
    failed = run_crawl(cluster, api, {"url": unreachable, "appid": "telemetry",
                                      "crawlid": uuid.uuid4().hex, "spiderid": "link"},
                       expected_items=1)
    client = cluster.client
    return {"client": client, "url": unreachable,
            "pages_fetched": sum(n for url, n in hits.items() if not url.endswith("robots.txt")),
            "funnels": cluster.frontier.crawl_funnels("link", [pages, failed]),
            "pages": pages, "failed": failed}


def node_infos(client: Any, component: str) -> list[dict[str, Any]]:
    members = [m.decode() for m in client.zrange(keys.heartbeat_index(component), 0, -1)]
    return [orjson.loads(raw) for raw in
            client.mget([keys.node_info(component, member) for member in members]) if raw]


def test_every_fetched_page_is_one_enqueue_to_fetch_observation(
        telemetry: dict[str, Any]) -> None:
    snapshot = RedisHistogram(telemetry["client"], "enqueue_to_fetch_seconds").read()
    assert (snapshot.count, telemetry["pages_fetched"]) == (3, 3)


def test_failed_downloads_are_counted_by_exception_type(telemetry: dict[str, Any]) -> None:
    client = telemetry["client"]
    prefix, name = keys.crawler_error_stats(), "DownloadConnectionRefusedError"  # Scrapy's class
    names = client.smembers(keys.stats_names_index(prefix))
    lifetime = client.get(keys.stats_name(prefix, name, "lifetime"))
    assert (names, lifetime) == ({name.encode()}, b"3")  # RETRY_TIMES 2: three tries


def test_the_unreachable_domains_last_error_is_written_for_a_day(
        telemetry: dict[str, Any]) -> None:
    client = telemetry["client"]
    key = keys.crawler_domain_last_error("127.0.0.1")
    error = orjson.loads(client.get(key))
    at_ms = error.pop("at_ms")
    expected = {"status": 0, "error": "DownloadConnectionRefusedError", "url": telemetry["url"]}
    assert (error, isinstance(at_ms, int), 0 < client.ttl(key) <= 86_400) == (expected, True, True)


def test_the_unreachable_crawls_funnel_shows_retries_and_the_drop(
        telemetry: dict[str, Any]) -> None:
    assert telemetry["funnels"][telemetry["failed"]].as_dict() == {
        "submitted": 1, "queued": 1, "deduplicated": 0, "filtered": {}, "fetched": {"0": 3},
        "retried": 2, "dropped": 1, "delivered": 1}


def test_the_crawler_describes_itself_beside_its_heartbeat(telemetry: dict[str, Any]) -> None:
    (info,) = node_infos(telemetry["client"], "crawler")
    assert (set(info), info["version"], info["engine"], info["spiders"],
            info["rss_bytes"] > 0) == (NODE_FIELDS | {"engine", "spiders"}, __version__,
                                       "scrapy", ["link"], True)


@pytest.mark.parametrize("component", ["kafka-monitor", "redis-monitor"])
def test_the_monitors_describe_themselves_without_an_engine(
        telemetry: dict[str, Any], component: str) -> None:
    (info,) = node_infos(telemetry["client"], component)
    assert (set(info), info["version"], info["rss_bytes"] > 0) == (NODE_FIELDS, __version__, True)
