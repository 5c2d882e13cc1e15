"""The crawler end to end: real redis-server, Redis Streams bus, generated site, crawler processes."""

from __future__ import annotations

import base64
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.sitegen.site import LATIN1_BODY, SiteConfig, SiteServer
from tests.support.addresses import CRAWLER_CLUSTER
from tests.support.cluster import (
    BUS_LIMIT_BYTES,
    COLLECT_TIMEOUT_S,
    WHOLE_GRAPH_DEPTH,
    Cluster,
    running_cluster,
)
from tests.support.services import free_port
from tests.support.spiders import HANDOFF_SPIDER, importable_env

pytestmark = pytest.mark.integration

HUGE_PAGE_BYTES = 2_000_000
CRAWL_DELAY_HOST = CRAWLER_CLUSTER.host(4)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("crawler-cluster")
    with running_cluster(tmp, SiteConfig(huge_page_bytes=HUGE_PAGE_BYTES,
                                         slow_page_s=0.2)) as cluster:
        for spider in ("link", "wandering"):
            cluster.start_crawler(spider)
        cluster.start_crawler(HANDOFF_SPIDER, **importable_env())
        yield cluster


def _urls(items: list[dict]) -> Counter[str]:
    return Counter(item["url"] for item in items)


def test_depth_two_crawl_fetches_exactly_the_expected_pages_each_once(cluster: Cluster) -> None:
    seed = cluster.site.site.url("127.0.0.2", "/p/0.html")
    expected = cluster.site.site.expected_urls(seed, 2)
    items = cluster.crawl(seed, maxdepth=2, expected=len(expected))
    assert _urls(items) == Counter({url: 1 for url in expected})


def test_allowed_domains_keep_the_crawl_on_one_host(cluster: Cluster) -> None:
    seed = cluster.site.site.url("127.0.0.2", "/p/0.html")
    expected = cluster.site.site.expected_urls(seed, 2, allowed_domains=["127.0.0.2"])
    items = cluster.crawl(seed, maxdepth=2, allowed_domains=["127.0.0.2"], expected=len(expected))
    assert set(_urls(items)) == expected


def test_deny_regex_wins_over_allow_regex(cluster: Cluster) -> None:
    seed = cluster.site.site.url("127.0.0.2", "/p/0.html")
    rules = {"allow_regex": [r"/p/\d+\.html"], "deny_regex": [r"/p/1\d*\.html"]}
    expected = cluster.site.site.expected_urls(seed, 2, **rules)
    items = cluster.crawl(seed, maxdepth=2, expected=len(expected), **rules)
    assert set(_urls(items)) == expected


@pytest.fixture(scope="module")
def special_items(cluster: Cluster) -> dict[str, dict]:
    """One depth-1 crawl of /special/index.html: every edge-case page, by path."""
    seed = cluster.site.site.url("127.0.0.2", "/special/index.html")
    items = cluster.crawl(seed, maxdepth=1, expected=7)
    return {item["url"].split(str(cluster.site.site.port), 1)[1]: item for item in items}


def test_default_deny_extensions_skip_the_pdf_link(special_items: dict[str, dict]) -> None:
    assert "/special/doc.pdf" not in special_items


def test_empty_deny_extensions_fetch_the_pdf_link(cluster: Cluster) -> None:
    seed = cluster.site.site.url("127.0.0.3", "/special/index.html")
    items = cluster.crawl(seed, maxdepth=1, deny_extensions=[], expected=8)
    assert cluster.site.site.url("127.0.0.3", "/special/doc.pdf") in _urls(items)


def test_robots_disallowed_page_is_not_fetched_and_yields_an_error_item(
        cluster: Cluster, special_items: dict[str, dict]) -> None:
    item = special_items["/private/secret.html"]
    secret = cluster.site.site.url("127.0.0.2", "/private/secret.html")
    assert (item["error"]["message"], cluster.site.hits_snapshot()[secret]) == \
        ("Forbidden by robots.txt", 0)


def test_missing_page_yields_a_404_item(special_items: dict[str, dict]) -> None:
    item = special_items["/special/missing.html"]
    assert (item["status_code"], item["status_msg"]) == (404, "Not Found")


def test_server_error_is_retried_then_yields_a_500_item(
        cluster: Cluster, special_items: dict[str, dict]) -> None:
    url = cluster.site.site.url("127.0.0.2", "/special/error500.html")
    assert (special_items["/special/error500.html"]["status_code"],
            cluster.site.hits_snapshot()[url]) == (500, 3)


def test_non_utf8_body_arrives_base64_and_intact(special_items: dict[str, dict]) -> None:
    item = special_items["/special/latin1.html"]
    assert (item["encoding_base64"], base64.b64decode(item["body"])) == (True, LATIN1_BODY)


def test_huge_page_is_sent_truncated_within_the_bus_limit(special_items: dict[str, dict]) -> None:
    item = special_items["/special/huge.html"]
    assert (item["body_truncated"], item["body_length"] > HUGE_PAGE_BYTES,
            len(orjson.dumps(item)) <= BUS_LIMIT_BYTES) == (True, True, True)


def test_connection_refused_yields_an_error_item_after_retries(cluster: Cluster) -> None:
    closed = f"http://127.0.0.2:{free_port('127.0.0.2')}/gone.html"
    items = cluster.crawl(closed, expected=1)
    assert [(i["error"]["type"], i["retry_times"]) for i in items] == \
        [("DownloadConnectionRefusedError", 2)]


def test_status_counts_and_domain_statuses_are_written(cluster: Cluster,
                                                       special_items: dict[str, dict]) -> None:
    time.sleep(0)  # stats flush every STATS_CYCLE; the special crawl ran before this test
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        last = cluster.client.lrange(keys.crawler_domain_last_statuses("127.0.0.2"), 0, -1)
        if b"404" in last:
            break
        time.sleep(0.2)
    assert b"404" in last


def test_link_crawl_hands_links_to_the_wandering_spider(cluster: Cluster) -> None:
    seed = cluster.site.site.url("127.0.0.2", "/p/0.html")
    handed = set(cluster.site.site.graph_links(seed))
    items = cluster.crawl(seed, spiderid="handoff", maxdepth=1, expected=1 + len(handed))
    wandering = {i["url"] for i in items if i["spiderid"] == "wandering"}
    assert handed <= wandering


def test_robots_crawl_delay_slows_the_domain_cluster_wide(cluster: Cluster) -> None:
    slow_site = SiteServer(SiteConfig(hosts=(CRAWL_DELAY_HOST,), crawl_delay_s=2.0), free_port())
    with slow_site:
        cluster.crawl(slow_site.site.url(CRAWL_DELAY_HOST, "/p/0.html"), expected=1)
    config = orjson.loads(cluster.client.hget(keys.domain_throttle_config(), CRAWL_DELAY_HOST) or b"{}")
    assert (config.get("window"), config.get("hits")) == (2.0, 1)


def test_two_crawler_processes_share_a_crawl_without_fetching_a_page_twice(
        cluster: Cluster) -> None:
    second = cluster.start_crawler("link")
    try:
        seed = cluster.site.site.url("127.0.0.3", "/p/0.html")
        expected = cluster.site.site.expected_urls(seed, WHOLE_GRAPH_DEPTH)
        before = cluster.site.hits_snapshot()
        items = cluster.crawl(seed, maxdepth=WHOLE_GRAPH_DEPTH, expected=len(expected))
        fetched = cluster.site.hits_snapshot() - before
    finally:
        cluster.stop(second)
    assert (_urls(items), {url: fetched[url] for url in expected}) == \
        (Counter({url: 1 for url in expected}), {url: 1 for url in expected})


def test_killed_crawler_leaves_no_page_uncrawled(tmp_path: Path) -> None:
    with running_cluster(tmp_path, SiteConfig(page_delay_s=0.4, pages_per_host=20)) as cluster:
        site = cluster.site
        victim = cluster.start_crawler("link", LEASE_TIMEOUT="2", CRAWLER_CONCURRENCY="2")
        seed = site.site.url("127.0.0.2", "/p/0.html")
        expected = site.site.expected_urls(seed, WHOLE_GRAPH_DEPTH)
        crawlid = uuid.uuid4().hex
        bus = create_bus(cluster.settings)
        consumer = bus.consumer([topics.crawled_firehose("demo")], group=crawlid)
        consumer.poll(1, 0.2)
        cluster.frontier.enqueue_many([{"url": seed, "appid": "t", "crawlid": crawlid,
                                        "spiderid": "link", "maxdepth": WHOLE_GRAPH_DEPTH}],
                                      dedupe=True)
        seen: set[str] = set()
        while len(seen) < 2:
            seen |= {m.value["url"] for m in consumer.poll(50, 0.2) if m.value}
        cluster.stop(victim, signal.SIGKILL)
        cluster.start_crawler("link", LEASE_TIMEOUT="2")
        deadline = time.monotonic() + COLLECT_TIMEOUT_S
        while not expected <= seen and time.monotonic() < deadline:
            seen |= {m.value["url"] for m in consumer.poll(50, 0.2) if m.value}
        consumer.close()
        bus.close()
    assert seen == expected
