"""``scrapy-cluster migrate`` on queues exactly as the original 1.2/1.3 wrote them, then crawled.

Every member is built the way the original's code built it and written with ujson 1.35's bytes
(``tests/support/migration.py``): Kafka-Monitor seeds with the crawl schema's defaults and the
stats hook's ``ts``, and crawler-written Scrapy request dicts (links through the meta
passthrough, a retry, a followed redirect) with the runtime meta Scrapy put on them. All are
imported, none refused; the summary counts each mapped and dropped field; a real crawler then
fetches each of them from the local test site once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from scrapy_cluster import keys
from scrapy_cluster.sitegen.site import SiteConfig
from tests.support.addresses import MIGRATE_ORIGINAL
from tests.support.cluster import Cluster
from tests.support.migration import (
    LoggingSite,
    OriginalRedis,
    crawl_until_quiet,
    crawler_link,
    crawler_redirect,
    crawler_retry,
    fetched_meta,
    kafka_monitor_seed,
    popped_meta,
    run_migrate,
    ujson_dumps,
)
from tests.support.services import RedisServer, free_port
from tests.support.starting import started

SEEDS, LINKS = MIGRATE_ORIGINAL.hosts(85, 86)
GRAPH = tuple(((host, n), ()) for host, count in ((SEEDS, 2), (LINKS, 7)) for n in range(count))
MAPPED = ("  mapped fields: meta.priority → queue score × 5, meta.redirect_times → "
          "redirect_times × 1, null values → unset × 55, priority → queue score × 2")
DROPPED = ("  dropped fields: _encoding × 5, flags × 5, meta.download_latency × 4, "
           "meta.download_slot × 5, meta.download_timeout × 5, meta.redirect_ttl × 1, "
           "meta.redirect_urls × 1, meta.ts × 5, meta.url × 2, priority × 5, ts × 2")


def test_the_fixture_writer_writes_the_bytes_of_ujson_1_35() -> None:
    # Written by ujson 1.35 itself (the original's pinned version) from the same dicts.
    seed = kafka_monitor_seed({"url": "http://shop.example.com/a/b?q=1", "appid": "app",
                               "crawlid": "c1", "attrs": {"note": "caf\xe9 \u2603/\U0001f600"}},
                              ts=1490817600.1234567)
    assert ujson_dumps(seed) == (
        '{"url":"http:\\/\\/shop.example.com\\/a\\/b?q=1","appid":"app","crawlid":"c1",'
        '"attrs":{"note":"caf\\u00e9 \\u2603\\/\\ud83d\\ude00"},"spiderid":"link",'
        '"priority":1,"maxdepth":0,"allowed_domains":null,"allow_regex":null,'
        '"deny_regex":null,"deny_extensions":null,"expires":0,"useragent":null,'
        '"cookie":null,"ts":1490817600.1234567165}')
    assert ujson_dumps({"download_latency": 0.0731204509735, "download_timeout": 10,
                        "r": [b"http://a/"]}) == \
        '{"download_latency":0.073120451,"download_timeout":10,"r":["http:\\/\\/a\\/"]}'




@dataclass
class Migrated:
    site: LoggingSite
    imported: list[str]
    summary: list[str]
    rejected: int


def _original_queues(original: OriginalRedis, site: LoggingSite) -> list[str]:
    """Fills the original's queues; returns the URLs of every member written."""
    page = site.site.page_url
    seeds = [kafka_monitor_seed({"url": page((SEEDS, 0)), "appid": "app", "crawlid": "seeds",
                                 "maxdepth": 0, "priority": 60}, version="1.2"),
             kafka_monitor_seed({"url": page((SEEDS, 1)), "appid": "app", "crawlid": "seeds",
                                 "priority": 50, "useragent": "migrated-agent/1.0",
                                 "attrs": {"owner": "ops/\xe9"}}, version="1.3")]
    parent = kafka_monitor_seed({"url": page((LINKS, 0)), "appid": "app", "crawlid": "links",
                                 "maxdepth": 2, "priority": 70}, version="1.2")
    fetched = fetched_meta(popped_meta(parent), LINKS, 0.0731204509735)
    link_1_2 = crawler_link(page((LINKS, 0)), fetched, page((LINKS, 1)), version="1.2")
    link_1_3 = crawler_link(page((LINKS, 0)), fetched, page((LINKS, 2)), version="1.3")
    grandchild = crawler_link(page((LINKS, 2)),
                              fetched_meta(popped_meta(link_1_3), LINKS, 0.0212), page((LINKS, 3)))
    retried = crawler_retry(kafka_monitor_seed(
        {"url": page((LINKS, 4)), "appid": "app", "crawlid": "links", "priority": 40},
        version="1.3"), LINKS)
    redirected = crawler_redirect(crawler_link(page((LINKS, 0)), fetched, page((LINKS, 6))),
                                  LINKS, page((LINKS, 5)), 0.0123)
    links = [link_1_2, link_1_3, grandchild, retried, redirected]
    original.queue("link", f"{SEEDS}.", *seeds)
    original.queue("link", f"{LINKS}.", *links)
    return [request["url"] for request in (*seeds, *links)]




@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Migrated]:
    tmp = tmp_path_factory.mktemp("migrate-original")
    server = started(RedisServer(tmp / "redis"))
    site = LoggingSite(SiteConfig(hosts=(SEEDS, LINKS), graph=GRAPH), free_port()).start()
    cluster = Cluster(tmp, server, site)
    try:
        imported = _original_queues(OriginalRedis(cluster.client), site)
        result = run_migrate("--from", server.url)
        rejected = int(cluster.client.llen(keys.migration_rejected()))
        cluster.start_crawler("link", CRAWLER_CONCURRENCY="1")
        crawl_until_quiet(site, set(imported))
        yield Migrated(site, imported, result.stdout.splitlines(), rejected)
    finally:
        for process in cluster.processes:
            cluster.stop(process)
        site.stop()
        server.stop()


@pytest.mark.integration
def test_every_request_the_original_queued_is_imported_none_refused(migrated: Migrated) -> None:
    assert "  requests queued: 7 from 2 original queue(s)" in migrated.summary
    assert (migrated.rejected, [line for line in migrated.summary if "rejected" in line]) == \
        (0, [])


@pytest.mark.integration
def test_the_summary_counts_every_mapped_and_dropped_field(migrated: Migrated) -> None:
    assert (MAPPED in migrated.summary, DROPPED in migrated.summary) == (True, True), \
        "\n".join(migrated.summary)


@pytest.mark.integration
def test_every_imported_request_arrives_at_the_site_once(migrated: Migrated) -> None:
    hits = migrated.site.hits_snapshot()
    assert {url: hits[url] for url in migrated.imported} == {url: 1 for url in migrated.imported}


@pytest.mark.integration
def test_pages_the_original_had_already_fetched_are_not_fetched_again(
        migrated: Migrated) -> None:
    # The links' page and the redirect's source were fetched by the original, not queued.
    page = migrated.site.site.page_url
    assert set(migrated.site.requested) == set(migrated.imported)
    assert [migrated.site.hits_snapshot()[page((LINKS, n))] for n in (0, 6)] == [0, 0]

