"""A user's spider written as an ordinary Scrapy spider runs cluster-wide under plain
`scrapy runspider` with the package's settings; its own Request fields survive Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.addresses import PLAIN_SCRAPY
from tests.support.services import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOST = PLAIN_SCRAPY.host(41)

USER_SPIDER = textwrap.dedent('''
    from scrapy import Request
    from scrapy_cluster.crawler.spiders.base import ClusterSpider


    class TitleSpider(ClusterSpider):
        name = "titles"

        def parse(self, response):
            yield {**self.page_item(response, []), "title": response.css("title::text").get()}
            yield Request(response.urljoin("/p/1.html"), callback=self.parse_detail,
                          method="GET", headers={"X-Probe": "kept"}, priority=7,
                          cookies={"session": "abc"}, meta={"note": "from parse"})

        def parse_detail(self, response):
            request = response.request
            yield {**self.page_item(response, []), "note": response.meta.get("note"),
                   "probe_header": request.headers.get("X-Probe").decode(),
                   "cookie_header": (request.headers.get("Cookie") or b"").decode(),
                   "callback": request.callback.__name__}
''')


@pytest.fixture
def site() -> Iterator[SiteServer]:
    with SiteServer(SiteConfig(hosts=(HOST,), pages_per_host=4), free_port()) as server:
        yield server


def results(overrides: dict[str, Any], crawlid: str, want: int, timeout_s: float) -> list[dict]:
    bus = create_bus(load_settings(environ={}, overrides=overrides))
    consumer = bus.consumer([topics.crawled_firehose("demo")], f"w-{crawlid}", from_beginning=True)
    found: list[dict] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(found) < want and time.monotonic() < deadline:
            batch = consumer.poll(max_messages=50, timeout_s=0.5)
            found += [m.value for m in batch
                      if isinstance(m.value, dict) and m.value.get("crawlid") == crawlid]
            consumer.ack(batch)
    finally:
        consumer.close()
        bus.close()
    return found


def test_plain_scrapy_runspider_runs_a_user_spider_on_the_frontier(
        tmp_path: Path, site: SiteServer, redis_url: str, redis_client: redis.Redis) -> None:
    spider_file = tmp_path / "titles.py"
    spider_file.write_text(USER_SPIDER)
    overrides = {"REDIS_URL": redis_url, "BUS_BACKEND": "redis"}
    env = {**os.environ, **overrides, "SCRAPY_SETTINGS_MODULE": "scrapy_cluster.crawler.settings",
           "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "PUBLIC_IP": "127.0.0.1",
           "PUBLIC_IP_URL": "", "LOG_LEVEL": "WARNING"}
    crawler = subprocess.Popen([sys.executable, "-m", "scrapy", "runspider", str(spider_file)],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    crawlid = uuid.uuid4().hex[:8]
    seed = site.site.url(HOST, "/p/0.html")
    frontier = Frontier.from_settings(load_settings(environ={}, overrides=overrides), redis_client)
    queued = frontier.enqueue_many([{"url": seed, "appid": "plain", "crawlid": crawlid,
                                     "spiderid": "titles", "maxdepth": 1}],
                                    dedupe=True)
    assert queued.queued == 1
    try:
        items = results(overrides, crawlid, want=2, timeout_s=60)
    finally:
        crawler.send_signal(signal.SIGTERM)
        output, _ = crawler.communicate(timeout=30)
    by_url = {item["url"]: item for item in items}
    assert set(by_url) == {seed, site.site.url(HOST, "/p/1.html")}, output[-2000:]
    assert by_url[seed]["title"] == "/p/0.html"
    detail = by_url[site.site.url(HOST, "/p/1.html")]
    assert (detail["note"], detail["probe_header"], detail["callback"]) == \
        ("from parse", "kept", "parse_detail")
    assert "session=abc" in detail["cookie_header"]
    assert detail["spiderid"] == "titles" and detail["appid"] == "plain"
    assert crawler.returncode == 0, output
    assert redis_client.zcard("frontier:leases") == 0
