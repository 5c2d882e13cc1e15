"""A page whose links cannot be queued because Redis went away is crawled again, quietly.

A real ``link`` crawler reaches Redis (and so its Redis Streams bus) through a TCP proxy the
test cuts while the seed page is being downloaded (every page of the site takes
``PAGE_DELAY_S``). The page's callback then fails to queue its links. The crawler must give
the page's lease back instead of acknowledging it: once Redis is reachable again the page is
fetched a second time, its item comes out once, every link it has is crawled, and the log
holds one warning for the outage, no "Spider error" and no traceback.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.sitegen.site import SiteConfig
from tests.support.cluster import Cluster, running_cluster
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration

PAGE_DELAY_S = 3.0
CUT_S = PAGE_DELAY_S + 2.0  # the seed's answer arrives while the proxy is cut


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def cut_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, TcpProxy, Path]]:
    with running_cluster(tmp_path, SiteConfig(page_delay_s=PAGE_DELAY_S)) as cluster:
        proxy = TcpProxy(cluster.redis_server.host, cluster.redis_server.port).start()
        try:
            cluster.start_crawler("link", REDIS_URL=f"redis://{proxy.host}:{proxy.port}/0",
                                  LEASE_TIMEOUT="20", CRAWLER_ACK_FLUSH_MS="200")
            yield cluster, proxy, tmp_path / "crawler-link-0.log"
        finally:
            proxy.stop()


def test_a_page_whose_links_cannot_be_queued_is_crawled_again_without_a_spider_error(
        cut_cluster: tuple[Cluster, TcpProxy, Path]) -> None:
    cluster, proxy, log_path = cut_cluster
    seed = cluster.site.site.url("127.0.0.2", "/p/0.html")
    expected = cluster.site.site.expected_urls(seed, 1)
    assert len(expected) > 1
    crawlid = uuid.uuid4().hex
    bus = create_bus(cluster.settings)
    consumer = bus.consumer([topics.crawled_firehose("demo")], group=crawlid,
                            from_beginning=False)
    consumer.poll(1, 0.2)
    request = {"url": seed, "appid": "test", "crawlid": crawlid, "spiderid": "link",
               "maxdepth": 1}
    assert cluster.frontier.enqueue_many([request], dedupe=True).queued == 1

    wait_for(lambda: cluster.site.hits_snapshot()[seed] == 1, 30, "the seed's download")
    proxy.cut()  # the answer comes PAGE_DELAY_S after the request: Redis is gone by then
    time.sleep(CUT_S)
    proxy.restore()

    items: list[dict] = []
    deadline = time.monotonic() + 60
    while Counter(item["url"] for item in items).keys() < expected:
        assert time.monotonic() < deadline, (
            f"pages missing: {expected - {item['url'] for item in items}}")
        items += [m.value for m in consumer.poll(200, 0.2)
                  if m.value and m.value.get("crawlid") == crawlid]
    wait_for(lambda: (cluster.frontier.crawl_info("link", "test", crawlid).total_pending,
                      cluster.frontier.crawl_info("link", "test", crawlid).in_flight) == (0, 0),
             30, "the crawl to drain")
    items += [m.value for m in consumer.poll(200, 1.0)
              if m.value and m.value.get("crawlid") == crawlid]
    consumer.close()
    bus.close()

    assert Counter(item["url"] for item in items) == Counter({url: 1 for url in expected})
    assert cluster.site.hits_snapshot()[seed] == 2, "the seed was not crawled again"
    log = log_path.read_text(errors="replace")
    assert "Spider error" not in log
    assert "Traceback" not in log
    assert log.count("queueing a page's links (the page will be crawled again) failed") == 1
