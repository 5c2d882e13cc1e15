"""Key names and members read back by the functions beside their builders in ``keys.py``, the
one bytes-to-text conversion, and the batch of ``stats.reader``."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.stats.reader import ClusterReader, CrawlerSource
from scrapy_cluster.text import as_text


def test_crawler_stats_source_parses_back_to_host_and_spider() -> None:
    member = keys.crawler_stats_source("host-1", "link")
    assert member == "host-1:link"
    assert keys.parse_crawler_stats_source(member) == ("host-1", "link")


def test_crawler_stats_source_keeps_colons_in_the_spiderid() -> None:
    assert keys.parse_crawler_stats_source("host-1:odd:spider") == ("host-1", "odd:spider")


def test_a_source_without_separator_is_not_parsed() -> None:
    assert keys.parse_crawler_stats_source("lonely") is None


def test_crawler_source_prefix_is_the_crawler_stats_key() -> None:
    assert CrawlerSource("host-1", "link").prefix == "stats:crawler:host-1:link"
    assert keys.crawler_stats("host-1", "link") == keys.stats_key("crawler", "host-1", "link")


def test_heartbeat_member_parses_back_to_machine_and_parts() -> None:
    member = keys.heartbeat_member("host-1", "link", "crawler-1")
    assert keys.parse_heartbeat_member(member) == ("host-1", "link:crawler-1")
    assert keys.crawler_member_spider(member) == "link"
    assert keys.crawler_member_spider(keys.heartbeat_member("host-1", "11-aa")) is None


def test_heartbeat_of_member_is_the_heartbeat_key() -> None:
    assert keys.heartbeat_of_member("crawler", "host-1:link:7") == \
        keys.heartbeat("crawler", "host-1", "link", "7")


@pytest.mark.parametrize(("key", "component"), [
    ("stats:kafka-monitor", "kafka-monitor"), ("stats:crawler:host-1:link", "crawler"),
    ("stats:rest:self:host:1", "rest"), ("stat:rest", None), ("stats", None),
    ("kafka-monitor:stats", None)])
def test_stats_component_of_a_key(key: str, component: str | None) -> None:
    assert keys.stats_component(key) == component


def test_crawl_timeout_parses_back() -> None:
    key = keys.crawl_timeout("link", "app", "crawl:with:colons")
    assert keys.parse_crawl_timeout(key) == ("link", "app", "crawl:with:colons")


@pytest.mark.parametrize("key", ["timeout:link:app", "timeout:link::c", "other:link:app:c",
                                 "timeout"])
def test_malformed_crawl_timeouts_are_not_parsed(key: str) -> None:
    assert keys.parse_crawl_timeout(key) is None


def test_domain_status_member_parses_back_to_its_status() -> None:
    member = keys.crawler_domain_status_member(504, 1_700_000_000_000, "abc123", 2)
    assert member == "504:1700000000000:abc123:2"
    assert keys.crawler_domain_status_of_member(member) == 504
    assert keys.crawler_domain_status_of_member("-1:5:x:0") == -1
    assert keys.crawler_domain_status_of_member("garbage") is None


def test_migration_keys_are_recognised() -> None:
    assert keys.is_migration_key(keys.migration_journal())
    assert keys.is_migration_key(keys.migration_staging("link:example.com:queue"))
    assert not keys.is_migration_key("link:example.com:queue")


def test_as_text_decodes_bytes_and_keeps_text() -> None:
    assert as_text(b"caf\xc3\xa9") == "café"
    assert as_text("café") == "café"
    assert as_text(b"bad \xff byte") == "bad \ufffd byte"


def test_a_reply_is_not_readable_before_its_batch_ran(redis_client: redis.Redis) -> None:
    batch = ClusterReader(redis_client).batch()
    sources = batch.crawler_sources()
    with pytest.raises(RuntimeError):
        _ = sources.value
    batch.run()
    assert sources.value == []


def test_batch_replies_are_parsed(redis_client: redis.Redis) -> None:
    redis_client.sadd(keys.crawler_stats_sources(), "h-b:link", "h-a:link", "broken")
    redis_client.sadd(keys.stats_names_index("stats:crawler:h-a:link"), "404", "200")
    redis_client.set(keys.stats_name("stats:crawler:h-a:link", "200", "lifetime"), 7)
    reader = ClusterReader(redis_client)
    batch = reader.batch()
    sources = batch.crawler_sources()
    names = batch.names("stats:crawler:h-a:link")
    empty = batch.lifetimes([])
    batch.run()
    assert sources.value == [CrawlerSource("h-a", "link"), CrawlerSource("h-b", "link")]
    assert names.value == ["200", "404"]
    assert empty.value == []
    assert reader.lifetime_totals(sources.value, {}) == {
        "stats:crawler:h-a:link": {"200": 7, "404": 0}}


def test_backlog_without_frontier_is_empty(redis_client: redis.Redis) -> None:
    assert ClusterReader(redis_client).backlog() == {}
