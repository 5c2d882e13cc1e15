"""More of the crawler end to end: crawl expiry and the SSRF guard in a real crawler process."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from scrapy_cluster.sitegen.site import SiteConfig
from tests.support.cluster import Cluster, running_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """``link`` may fetch loopback pages; ``wandering`` runs with the SSRF guard on."""
    tmp = tmp_path_factory.mktemp("crawler-e2e-extra")
    with running_cluster(tmp, SiteConfig()) as cluster:
        cluster.start_crawler("link")
        cluster.start_crawler("wandering", CRAWLER_ALLOW_PRIVATE_NETWORKS="false")
        yield cluster


def _graph_hits(cluster: Cluster, host: str) -> dict[str, int]:
    prefix = cluster.site.site.url(host, "/p/")
    return {url: count for url, count in cluster.site.hits_snapshot().items()
            if url.startswith(prefix)}


def test_crawl_expired_at_its_seed_fetches_the_seed_and_follows_no_link(cluster: Cluster) -> None:
    seed = cluster.site.site.url("127.0.0.2", "/p/0.html")
    items = cluster.crawl(seed, expected=1, maxdepth=3, expires=int(time.time()) - 60)
    assert [item["url"] for item in items] == [seed]
    assert _graph_hits(cluster, "127.0.0.2") == {seed: 1}
    info = cluster.frontier.crawl_info("link", "test", items[0]["crawlid"])
    assert (info.total_pending, info.in_flight) == (0, 0)


def test_crawl_expiring_later_follows_links(cluster: Cluster) -> None:
    seed = cluster.site.site.url("127.0.0.3", "/p/0.html")
    expected = cluster.site.site.expected_urls(seed, 1)
    items = cluster.crawl(seed, expected=len(expected), maxdepth=1,
                          expires=int(time.time()) + 3600)
    assert {item["url"] for item in items} == expected
    assert len(expected) > 1


def test_guarded_crawler_refuses_a_loopback_url_with_an_error_item(cluster: Cluster) -> None:
    url = cluster.site.site.url("127.0.0.2", "/special/index.html")
    items = cluster.crawl(url, spiderid="wandering", expected=1)
    assert len(items) == 1
    item = items[0]
    assert (item["url"], item["status_code"], item["error"]["type"]) == \
        (url, None, "ForbiddenAddress")
    assert "127.0.0.2 is a loopback address (127.0.0.2)" in item["error"]["message"]
    assert "CRAWLER_ALLOW_PRIVATE_NETWORKS" in item["error"]["message"]
    assert cluster.site.hits_snapshot()[url] == 0
