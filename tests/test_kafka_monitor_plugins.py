"""Plugins against a real Redis: loading by rank, job writing, crawl enqueueing, the example plugin."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.api.validation import Accepted
from scrapy_cluster.errors import NotConfigured, PluginError
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.kafka_monitor.loader import build_plugins, build_validator, plugin_classes
from scrapy_cluster.kafka_monitor.plugins import (
    ActionHandler,
    BaseHandler,
    ScraperHandler,
    StatsHandler,
    ZookeeperHandler,
)
from scrapy_cluster.settings import Settings, load_settings

REPO_ROOT = Path(__file__).resolve().parent.parent
LOGGER = logging.getLogger("test-kafka-monitor")


def km_settings(**overrides: Any) -> Settings:
    return load_settings("kafka-monitor", environ={}, overrides=overrides)


def make(cls: type[BaseHandler], client: redis.Redis, settings: Settings | None = None) -> Any:
    frontier = Frontier.from_settings(settings or km_settings(), client)
    return cls.from_settings(settings or km_settings(), logger=LOGGER, redis_client=client,
                             frontier=frontier)


def run_batch(plugin: BaseHandler, client: redis.Redis, messages: list[dict[str, Any]]) -> dict:
    pipe = client.pipeline(transaction=True)
    failures = plugin.handle_batch(messages, pipe)
    pipe.execute()
    return failures


def job_entries(client: redis.Redis) -> list[dict[str, Any]]:
    return [{k.decode(): v.decode() for k, v in fields.items()}
            for _, fields in client.xrange(keys.redis_monitor_jobs())]


# --- loading -----------------------------------------------------------------------------

def test_default_plugins_load_in_rank_order() -> None:
    assert plugin_classes(km_settings()) == [ScraperHandler, ActionHandler, StatsHandler,
                                             ZookeeperHandler]


def test_rank_none_disables_a_plugin() -> None:
    settings = km_settings(PLUGINS={"scrapy_cluster.kafka_monitor.plugins.StatsHandler": None})
    assert StatsHandler not in plugin_classes(settings)


def test_lower_rank_is_validated_first() -> None:
    settings = km_settings(PLUGINS={"scrapy_cluster.kafka_monitor.plugins.ZookeeperHandler": 1})
    assert plugin_classes(settings)[0] is ZookeeperHandler


def test_unknown_dotted_path_is_a_plugin_error() -> None:
    with pytest.raises(PluginError, match="no.such.Plugin"):
        plugin_classes(km_settings(PLUGINS={"no.such.Plugin": 5}))


def test_non_plugin_class_is_refused() -> None:
    with pytest.raises(PluginError, match="not a BaseHandler subclass"):
        plugin_classes(km_settings(PLUGINS={"collections.OrderedDict": 5}))


def test_non_numeric_rank_is_refused() -> None:
    with pytest.raises(PluginError, match="must be a number"):
        plugin_classes(km_settings(PLUGINS={"scrapy_cluster.kafka_monitor.plugins."
                                            "StatsHandler": "high"}))


class _SwitchedOff(StatsHandler):
    def setup(self, settings: Any) -> None:
        raise NotConfigured("switched off for the test")


@pytest.mark.integration
def test_not_configured_plugin_is_skipped(redis_client: redis.Redis) -> None:
    plugins = build_plugins([ActionHandler, _SwitchedOff], km_settings(), logger=LOGGER,
                            redis_client=redis_client, frontier=None)
    assert [type(p) for p in plugins] == [ActionHandler]


@pytest.mark.integration
def test_scraper_without_frontier_is_skipped(redis_client: redis.Redis) -> None:
    plugins = build_plugins([ScraperHandler], km_settings(), logger=LOGGER,
                            redis_client=redis_client, frontier=None)
    assert plugins == []


def test_missing_schema_file_is_a_plugin_error() -> None:
    class NoFile(BaseHandler):
        schema = "does_not_exist.json"

    with pytest.raises(PluginError, match="does_not_exist.json"):
        NoFile.load_schema(km_settings())


# --- jobs --------------------------------------------------------------------------------

ACTION = {"action": "info", "appid": "testapp", "crawlid": "ABC123", "uuid": "u1",
          "spiderid": "link"}


@pytest.mark.integration
def test_info_action_writes_job_key_with_seed_shape(redis_client: redis.Redis) -> None:
    run_batch(make(ActionHandler, redis_client), redis_client, [ACTION])
    assert orjson.loads(redis_client.get("info:link:testapp:ABC123:u1")) == ACTION


@pytest.mark.integration
def test_job_key_has_a_ttl(redis_client: redis.Redis) -> None:
    run_batch(make(ActionHandler, redis_client), redis_client, [ACTION])
    assert 3590 < redis_client.ttl("info:link:testapp:ABC123:u1") <= 3600


@pytest.mark.integration
def test_job_is_indexed_in_the_job_stream(redis_client: redis.Redis) -> None:
    run_batch(make(ActionHandler, redis_client), redis_client, [{**ACTION, "action": "stop"}])
    assert job_entries(redis_client) == [{
        "key": "stop:link:testapp:ABC123:u1", "type": "stop",
        "payload": orjson.dumps({**ACTION, "action": "stop"}).decode()}]


@pytest.mark.integration
def test_info_without_crawlid_leaves_the_crawlid_segment_empty(redis_client: redis.Redis) -> None:
    request = {k: v for k, v in ACTION.items() if k != "crawlid"}
    run_batch(make(ActionHandler, redis_client), redis_client, [request])
    assert redis_client.exists("info:link:testapp::u1") == 1


@pytest.mark.integration
def test_two_requests_for_one_crawl_keep_two_jobs(redis_client: redis.Redis) -> None:
    run_batch(make(ActionHandler, redis_client), redis_client,
              [ACTION, {**ACTION, "uuid": "u2"}])
    assert [entry["key"] for entry in job_entries(redis_client)] == [
        "info:link:testapp:ABC123:u1", "info:link:testapp:ABC123:u2"]
    assert redis_client.exists("info:link:testapp:ABC123:u1", "info:link:testapp:ABC123:u2") == 2


@pytest.mark.integration
def test_stats_request_writes_statsrequest_job(redis_client: redis.Redis) -> None:
    request = {"appid": "testapp", "uuid": "s1", "stats": "kafka-monitor"}
    run_batch(make(StatsHandler, redis_client), redis_client, [request])
    assert job_entries(redis_client)[0]["key"] == "statsrequest:kafka-monitor:testapp:s1"
    assert orjson.loads(redis_client.get("statsrequest:kafka-monitor:testapp:s1")) == request


@pytest.mark.integration
def test_domain_request_writes_zk_job(redis_client: redis.Redis) -> None:
    request = {"uuid": "z1", "appid": "madisonTest", "action": "blacklist-update",
               "domain": "ebay.com", "scale": 1.0}
    run_batch(make(ZookeeperHandler, redis_client), redis_client, [request])
    assert job_entries(redis_client)[0]["type"] == "zk"
    assert orjson.loads(redis_client.get("zk:blacklist-update:ebay.com:madisonTest:z1")) == request


@pytest.mark.integration
def test_single_handle_writes_without_a_caller_pipeline(redis_client: redis.Redis) -> None:
    make(ActionHandler, redis_client).handle(ACTION)
    assert redis_client.exists("info:link:testapp:ABC123:u1") == 1


# --- crawl requests ------------------------------------------------------------------------

CRAWL = {"url": "http://www.dmoz.org/", "appid": "testapp", "crawlid": "abc123",
         "spiderid": "link", "maxdepth": 0, "priority": 1, "expires": 0, "attrs": {}}


@pytest.mark.integration
def test_crawl_request_is_queued_on_the_frontier(redis_client: redis.Redis) -> None:
    run_batch(make(ScraperHandler, redis_client), redis_client, [CRAWL])
    info = Frontier.from_settings(km_settings(), redis_client).crawl_info("link", "testapp",
                                                                         "abc123")
    assert info.total_pending == 1


@pytest.mark.integration
def test_same_seed_twice_in_one_crawl_is_queued_once(redis_client: redis.Redis) -> None:
    plugin = make(ScraperHandler, redis_client)
    run_batch(plugin, redis_client, [CRAWL])
    run_batch(plugin, redis_client, [CRAWL])
    info = Frontier.from_settings(km_settings(), redis_client).crawl_info("link", "testapp",
                                                                         "abc123")
    assert info.total_pending == 1


@pytest.mark.integration
def test_expiring_crawl_writes_timeout_key_and_index(redis_client: redis.Redis) -> None:
    run_batch(make(ScraperHandler, redis_client), redis_client,
              [{**CRAWL, "expires": 1900000000}])
    assert redis_client.get("timeout:link:testapp:abc123") == b"1900000000"
    assert redis_client.zrange(keys.crawl_timeouts(), 0, -1, withscores=True) == [
        (b"timeout:link:testapp:abc123", 1900000000.0)]


@pytest.mark.integration
def test_crawl_without_expiry_writes_no_timeout(redis_client: redis.Redis) -> None:
    run_batch(make(ScraperHandler, redis_client), redis_client, [CRAWL])
    assert redis_client.exists("timeout:link:testapp:abc123", keys.crawl_timeouts()) == 0


# --- the documented example plugin ----------------------------------------------------------

@pytest.mark.integration
def test_example_plugin_loads_through_plugins_and_enqueues(
        redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    settings = km_settings(PLUGINS={"examples.kafka_monitor_plugin.SitemapHandler": 50})
    classes = plugin_classes(settings)
    plugins = build_plugins(classes, settings, logger=LOGGER, redis_client=redis_client,
                            frontier=Frontier.from_settings(settings, redis_client))
    match = build_validator(classes, settings).match(
        {"sitemap_url": "https://example.com/sitemap.xml", "appid": "testapp",
         "crawlid": "sm-1"})
    assert isinstance(match, Accepted) and match.plugin == "SitemapHandler"
    sitemap = next(p for p in plugins if p.name == "SitemapHandler")
    assert run_batch(sitemap, redis_client, [match.message]) == {}
    info = Frontier.from_settings(settings, redis_client).crawl_info("sitemap", "testapp", "sm-1")
    assert info.total_pending == 1
