"""Hostile web pages against one real crawler process (docs/crawler.md, "Hostile pages").

Real redis-server, Redis Streams bus, the generated site's ``/hostile/`` pages
(``tests/support/hostile.py``) and one ``link`` crawler process with the SSRF guard ON. The site
listens on loopback, which the guard refuses, so ``CRAWLER_ALLOWED_PRIVATE_NETWORKS`` lets
exactly the site's address (``SITE_HOST``/32) through; 127.0.0.1 and 169.254.169.254 stay refused.
Every hostile page is its own crawl (maxdepth 0), all fed at once; each must end in exactly
one item on the crawled topic with the fields below, the crawl must finish (nothing queued
or leased), and afterwards the same process must crawl a normal page, keep its heartbeat, stay
under a generous memory bound and have logged no traceback.
"""

from __future__ import annotations

import base64
import codecs
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from typing import Any

import orjson
import pytest

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.sitegen.site import SiteConfig
from tests.support.addresses import HOSTILE_PAGES
from tests.support.cluster import Cluster, running_cluster
from tests.support.hostile import (
    BAD_UTF8_BODY,
    BOGUS_CHARSET,
    BOGUS_CHARSET_BODY,
    HOSTILE_PATHS,
    METADATA_URL,
    MIXED_ENCODING_BODY,
    HostilePages,
    HostileSizes,
    gzip_bomb,
)

SITE_HOST = HOSTILE_PAGES.host(50)
DOWNLOAD_TIMEOUT_S = 3
MAXSIZE_BYTES = 32 * 1024 * 1024  # the crawler's DOWNLOAD_MAXSIZE (crawler/settings.py)
MAX_LINKS = 1000  # CRAWLER_MAX_LINKS_PER_PAGE's default
RETRY_TIMES = 2  # Scrapy's default
REDIRECT_MAX_TIMES = 20  # Scrapy's default
COLLECT_TIMEOUT_S = 120.0
SETTLE_TIMEOUT_S = 20.0
RSS_BOUND_BYTES = 500 * 1024 * 1024
SIZES = HostileSizes()


@dataclass
class HostileRun:
    cluster: Cluster
    process: Popen[bytes]
    items: dict[str, dict[str, Any]]
    """The one item of each hostile path's crawl."""
    crawlids: dict[str, str]
    rss_before_bytes: int
    log: Path


def _url(cluster: Cluster, path: str) -> str:
    return cluster.site.site.url(SITE_HOST, path)


def vm_rss_bytes(pid: int) -> int:
    """The process's resident set size, from /proc/<pid>/status (VmRSS, in kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def crawl_each(cluster: Cluster, paths: tuple[str, ...]) -> tuple[dict[str, dict], dict[str, str]]:
    """Feed one crawl per path at once; return each crawl's items (exactly one expected) by
    path once every crawl has one and the topic stayed quiet for a second."""
    bus = create_bus(cluster.settings)
    consumer = bus.consumer([topics.crawled_firehose("demo")], group=uuid.uuid4().hex,
                            from_beginning=False)
    consumer.poll(1, 0.2)
    crawlids = {path: uuid.uuid4().hex for path in paths}
    by_crawlid = {crawlid: path for path, crawlid in crawlids.items()}
    requests = [{"url": _url(cluster, path), "appid": "test", "crawlid": crawlid,
                 "spiderid": "link", "priority": 5, "maxdepth": 0}
                for path, crawlid in crawlids.items()]
    assert cluster.frontier.enqueue_many(requests, dedupe=True).queued == len(paths)
    found: dict[str, list[dict]] = {path: [] for path in paths}
    deadline, quiet_until = time.monotonic() + COLLECT_TIMEOUT_S, None
    while time.monotonic() < deadline:
        for message in consumer.poll(200, 0.2):
            if message.value and message.value.get("crawlid") in by_crawlid:
                found[by_crawlid[message.value["crawlid"]]].append(message.value)
        if quiet_until is None and all(found.values()):
            quiet_until = time.monotonic() + 1.0
        if quiet_until is not None and time.monotonic() >= quiet_until:
            break
    consumer.close()
    bus.close()
    assert {path: len(items) for path, items in found.items()} == dict.fromkeys(paths, 1)
    return {path: items[0] for path, items in found.items()}, crawlids


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileRun]:
    tmp = tmp_path_factory.mktemp("hostile-pages")
    # Scrapy settings reach the crawler from localsettings.py; the environment then overrides
    # them (the cluster harness sets DOWNLOAD_TIMEOUT=10, hence the env value below too).
    (tmp / "localsettings.py").write_text(f"DOWNLOAD_TIMEOUT = {DOWNLOAD_TIMEOUT_S}\n")
    gzip_bomb(SIZES.bomb_bytes)  # compressed once, before any download timeout runs
    with running_cluster(tmp, SiteConfig(hosts=(SITE_HOST,), streamed=HostilePages(SIZES))) as cluster:
        process = cluster.start_crawler(
            "link", CRAWLER_ALLOW_PRIVATE_NETWORKS="false",
            CRAWLER_ALLOWED_PRIVATE_NETWORKS=orjson.dumps([f"{SITE_HOST}/32"]).decode(),
            DOWNLOAD_TIMEOUT=str(DOWNLOAD_TIMEOUT_S), SC_LOG_LEVEL="INFO")
        rss_before = vm_rss_bytes(process.pid)
        items, crawlids = crawl_each(cluster, HOSTILE_PATHS)
        yield HostileRun(cluster, process, items, crawlids, rss_before,
                         tmp / "crawler-link-0.log")


def _error(item: dict[str, Any]) -> tuple[Any, ...]:
    return (item["status_code"], item["response_url"], item["error"]["type"],
            item["error"]["reason"], item["links"])


def test_gzip_bomb_is_refused_once_it_inflates_past_download_maxsize(hostile: HostileRun) -> None:
    item = hostile.items["/hostile/gzip-bomb.html"]
    assert _error(item) == (None, None, "IgnoreRequest", "too_large", [])
    assert f"exceeded DOWNLOAD_MAXSIZE ({MAXSIZE_BYTES} B) during decompression" \
        in item["error"]["message"]
    assert item["retry_times"] == 0


def test_endless_response_times_out_after_its_retries(hostile: HostileRun) -> None:
    item = hostile.items["/hostile/endless.html"]
    assert _error(item) == (None, None, "DownloadTimeoutError", "timeout", [])
    assert item["error"]["message"].endswith(f"took longer than {DOWNLOAD_TIMEOUT_S}.0 seconds.")
    assert item["retry_times"] == RETRY_TIMES
    assert hostile.cluster.site.hits_snapshot()[_url(hostile.cluster, "/hostile/endless.html")] \
        == RETRY_TIMES + 1


def test_page_of_100000_links_keeps_the_first_thousand(hostile: HostileRun) -> None:
    item = hostile.items["/hostile/many-links.html"]
    expected = [{"url": _url(hostile.cluster, f"/hostile/links/{n}.html"), "text": f"link {n}"}
                for n in range(MAX_LINKS)]
    assert (item["status_code"], item["links"], item["links_dropped"]) == \
        (200, expected, SIZES.many_links - MAX_LINKS)
    assert (item["body_truncated"], item["body_length"] > 4_000_000) == (True, True)


def test_links_past_the_limit_are_counted_as_filtered_in_the_funnel(hostile: HostileRun) -> None:
    crawlid = hostile.crawlids["/hostile/many-links.html"]
    funnel = hostile.cluster.frontier.crawl_funnels("link", [crawlid])[crawlid]
    assert (funnel.submitted, funnel.queued, funnel.filtered, funnel.fetched) == \
        (1 + SIZES.many_links, 1,
         {"max_links": SIZES.many_links - MAX_LINKS, "maxdepth": MAX_LINKS}, {"200": 1})


def test_redirect_loop_ends_with_an_error_item_after_redirect_max_times(
        hostile: HostileRun) -> None:
    item = hostile.items["/hostile/redirect-loop-a.html"]
    assert _error(item) == (None, None, "IgnoreRequest", "too_many_redirects", [])
    assert item["error"]["message"] == "max redirections reached"
    hits = hostile.cluster.site.hits_snapshot()
    assert (hits[_url(hostile.cluster, "/hostile/redirect-loop-a.html")],
            hits[_url(hostile.cluster, "/hostile/redirect-loop-b.html")]) == \
        (REDIRECT_MAX_TIMES // 2 + 1, REDIRECT_MAX_TIMES // 2)


@pytest.mark.parametrize(("path", "target", "why"), [
    ("/hostile/redirect-loopback.html", "http://127.0.0.1:{port}/hostile/admin.html",
     "127.0.0.1 is a loopback address (127.0.0.1)"),
    ("/hostile/redirect-metadata.html", METADATA_URL,
     "169.254.169.254 is a cloud metadata address (169.254.169.254)"),
])
def test_redirect_to_an_internal_address_is_refused_by_the_ssrf_guard(
        hostile: HostileRun, path: str, target: str, why: str) -> None:
    item = hostile.items[path]
    target = target.format(port=hostile.cluster.site.site.port)
    assert (item["url"], *_error(item)) == (target, None, None, "ForbiddenAddress", "ssrf", [])
    assert item["error"]["message"].startswith(f"refused {target}: {why}")


@pytest.mark.parametrize(("path", "body", "links"), [
    ("/hostile/bad-utf8.html", BAD_UTF8_BODY, ["/p/0.html"]),
    ("/hostile/bogus-charset.html", BOGUS_CHARSET_BODY, ["/p/0.html"]),
    # the header's UTF-8 wins over <meta>: the latin-1 byte of the second href becomes U+FFFD
    ("/hostile/mixed-encoding.html", MIXED_ENCODING_BODY,
     ["/p/caf%C3%A9.html", "/p/cr%EF%BF%BDme.html"]),
])
def test_broken_encoding_arrives_intact_as_base64_with_its_links(
        hostile: HostileRun, path: str, body: bytes, links: list[str]) -> None:
    item = hostile.items[path]
    assert (item["status_code"], item["encoding_base64"], base64.b64decode(item["body"]),
            [link["url"] for link in item["links"]]) == \
        (200, True, body, [_url(hostile.cluster, link) for link in links])
    assert codecs.lookup(item["encoding"]).name != BOGUS_CHARSET


@pytest.mark.parametrize(("path", "message"), [
    ("/hostile/large.html", f"Expected to receive {HostileSizes().large_body_bytes} bytes which "
                            f"is larger than download max size ({MAXSIZE_BYTES})"),
    ("/hostile/large-chunked.html", f"download cancelled: the body grew past DOWNLOAD_MAXSIZE "
                                    f"({MAXSIZE_BYTES} bytes) with no Content-Length"),
])
def test_50_mb_body_is_cancelled_at_download_maxsize(
        hostile: HostileRun, path: str, message: str) -> None:
    item = hostile.items[path]
    assert (*_error(item), item["retry_times"]) == \
        (None, None, "DownloadCancelledError", "too_large", [], 0)
    assert item["error"]["message"].startswith(message)


def test_every_hostile_crawl_finishes_with_nothing_queued_or_leased(hostile: HostileRun) -> None:
    def unfinished() -> dict[str, tuple[int, int]]:
        infos = {path: hostile.cluster.frontier.crawl_info("link", "test", crawlid)
                 for path, crawlid in hostile.crawlids.items()}
        return {path: (info.total_pending, info.in_flight) for path, info in infos.items()
                if (info.total_pending, info.in_flight) != (0, 0)}

    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while unfinished() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert unfinished() == {}


def test_crawler_stays_healthy_after_the_hostile_pages(
        hostile: HostileRun, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = hostile.cluster
    heartbeats = sorted(cluster.client.scan_iter(keys.heartbeat("crawler", "*")))
    assert len(heartbeats) == 1
    beat_before = float(cluster.client.get(heartbeats[0]) or 0)
    normal, _ = crawl_each(cluster, ("/p/0.html",))
    assert (normal["/p/0.html"]["status_code"], len(normal["/p/0.html"]["links"])) == (200, 3)
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while float(cluster.client.get(heartbeats[0]) or 0) <= beat_before \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert float(cluster.client.get(heartbeats[0]) or 0) > beat_before
    rss_after = vm_rss_bytes(hostile.process.pid)
    with capsys.disabled():
        print(f"\ncrawler VmRSS: {hostile.rss_before_bytes / 2**20:.0f} MiB before the hostile "
              f"pages, {rss_after / 2**20:.0f} MiB after")
    assert (hostile.process.poll(), rss_after < RSS_BOUND_BYTES) == (None, True)
    assert "Traceback" not in hostile.log.read_text(errors="replace")
