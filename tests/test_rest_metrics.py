"""``/metrics``: the cluster read from a real Redis filled by the real components, the Rest
process's own counters, and the names used by the bundled alert rules, Grafana dashboard and
docs/metrics.md checked against a live exposition."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.crawler.common.response_stats import ResponseStats
from scrapy_cluster.frontier import DispatchView, Frontier
from scrapy_cluster.frontier.pause import DomainPauses
from scrapy_cluster.rest.metrics import ENQUEUE_TO_FETCH, RestMetrics
from scrapy_cluster.settings import Settings, load_settings
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.stats.histogram import RedisHistogram
from tests.support.rest import running_rest
from tests.support.services import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "scrapy-cluster.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"
METRIC_NAME = re.compile(r"\bscrapy_cluster_[a-z0-9_]+")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def rest_settings(redis_url: str, tmp_path: Path, **extra: Any) -> Settings:
    return load_settings("rest", environ={}, overrides={
        "REDIS_URL": redis_url, "SC_DATA_DIR": str(tmp_path / "no-cluster"), **extra})


def samples_of(body: bytes) -> Samples:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def series(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: found for (sample, labels), found in samples.items() if sample == name}


def exposed_names(body: bytes) -> set[str]:
    """Every metric name a query may use: family names with ``_total`` for counters and
    ``_bucket``/``_sum``/``_count`` for histograms (prometheus-client's ``_created`` left out)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(body.decode()):
        if family.name.endswith("_created"):
            continue
        suffixes = {"counter": ["_total"], "histogram": ["", "_bucket", "_sum", "_count"]}
        names.update(family.name + suffix for suffix in suffixes.get(family.type, [""]))
    return names


def documented_names() -> set[str]:
    return {match.group(0) for line in METRICS_DOC.read_text().splitlines()
            if line.startswith("| `scrapy_cluster_") for match in [METRIC_NAME.search(line)]
            if match}


def alert_names() -> set[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return {name for group in rules["groups"] for rule in group["rules"]
            for name in METRIC_NAME.findall(str(rule["expr"]))}


def dashboard_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in METRIC_NAME.findall(target["expr"])}


def assert_names_match(body: bytes) -> None:
    exposed = exposed_names(body)
    assert alert_names() - exposed == set()
    assert dashboard_names() - exposed == set()
    assert documented_names() - exposed == set()
    assert {name for name in exposed if not name.endswith(("_bucket", "_sum", "_count"))
            } - documented_names() == set()


# --- a cluster filled by its real components ------------------------------------------------

def crawl(spiderid: str, domain: str, count: int) -> list[dict[str, Any]]:
    return [{"url": f"http://{domain}/{spiderid}/{index}", "appid": "app", "crawlid": "c1",
             "spiderid": spiderid} for index in range(count)]


def fill_queues(settings: Settings, client: redis.Redis) -> Frontier:
    """link: alpha.com 5, beta.org 3, gamma.net 3, delta.io 1; wiki: 2 queued of which one
    is then leased."""
    frontier = Frontier.from_settings(settings, client)
    frontier.enqueue_many([*crawl("link", "alpha.com", 5), *crawl("link", "beta.org", 3),
                           *crawl("link", "gamma.net", 3), *crawl("link", "delta.io", 1),
                           *crawl("wiki", "wiki.example", 2)])
    assert len(frontier.pop(DispatchView("wiki"), 1).requests) == 1
    return frontier


def fill_crawler_stats(settings: Settings, client: redis.Redis) -> None:
    """Two crawler hosts of spider link; 500 is not in STATUS_RESPONSE_CODES (not counted)."""
    for host, statuses in (("host1", [200, 200, 200, 404, 500]), ("host2", [200, 200, 504])):
        stats = ResponseStats.from_settings(settings, client, hostname=host, spiderid="link")
        for status in statuses:
            stats.record("alpha.com", status)
        stats.flush()
    errors = WindowedStats.from_settings(settings, client, key_prefix=keys.crawler_error_stats())
    errors.increment("TimeoutError", amount=2)
    errors.increment("ConnectionRefusedError")
    histogram = RedisHistogram(client, ENQUEUE_TO_FETCH)
    for seconds in (0.3, 2.0, 7200.0):
        histogram.observe(seconds)
    pipe = client.pipeline()
    histogram.queue_flush(pipe)
    pipe.execute()


def fill_monitor_stats(settings: Settings, client: redis.Redis) -> None:
    """Kafka Monitor: one live node, one dead; Redis Monitor: one live node."""
    kafka_monitor = WindowedStats.from_settings(settings, client,
                                                key_prefix=keys.stats_key("kafka-monitor"))
    for name, amount in (("total", 7), ("fail", 2), ("ScraperHandler", 4), ("ActionHandler", 1)):
        kafka_monitor.increment(name, amount=amount)
    kafka_monitor.heartbeat("km-host", "1-live")
    dead = WindowedStats.from_settings(settings, client, key_prefix=keys.stats_key("kafka-monitor"),
                                       clock=lambda: time.time() - 1000)
    dead.heartbeat("km-host", "2-dead")
    redis_monitor = WindowedStats.from_settings(settings, client,
                                                key_prefix=keys.stats_key("redis-monitor"))
    redis_monitor.increment("total", amount=3)
    redis_monitor.increment("InfoMonitor", amount=3)
    redis_monitor.heartbeat("rm-host", "3-live")


def fill_pauses(client: redis.Redis) -> None:
    """Two pauses in force, one halt, one pause that ended an hour ago (not yet removed)."""
    pauses = DomainPauses(client)
    pauses.pause("p1.com", 600_000)
    pauses.pause("p2.com", 600_000)
    pauses.halt("h1.com")
    DomainPauses(client, clock=lambda: (time.time() - 3600) * 1000).pause("old.com", 1000)
    for domain, state in (("p1.com", "paused"), ("h1.com", "halted")):
        client.hset(keys.circuit_breaker_state(), domain,
                    orjson.dumps({"state": state, "since_ms": 0, "until_ms": 0,
                                  "reason": "test", "errors": 5, "responses": 5}))


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return rest_settings(redis_url, tmp_path, METRICS_TOP_DOMAINS=2)


@pytest.fixture
def filled(settings: Settings, redis_client: redis.Redis) -> RestMetrics:
    frontier = fill_queues(settings, redis_client)
    fill_crawler_stats(settings, redis_client)
    fill_monitor_stats(settings, redis_client)
    fill_pauses(redis_client)
    return RestMetrics(settings, redis_client, frontier=frontier,
                       bus_lag=lambda: {"demo.incoming": 4, "other.incoming": None})


@pytest.fixture
def scraped(filled: RestMetrics) -> Samples:
    body, content_type = filled.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    return samples_of(body)


def test_backlog_is_exposed_per_spider_with_the_number_of_domains(scraped: Samples) -> None:
    assert series(scraped, "scrapy_cluster_backlog_requests") == {
        (("spider", "link"),): 12, (("spider", "wiki"),): 1}
    assert series(scraped, "scrapy_cluster_backlog_domains") == {
        (("spider", "link"),): 4, (("spider", "wiki"),): 1}
    assert value(scraped, "scrapy_cluster_leased_requests") == 1


def test_only_the_top_domains_of_each_spider_get_a_series(scraped: Samples) -> None:
    assert series(scraped, "scrapy_cluster_domain_backlog_requests") == {
        (("domain", "alpha.com"), ("spider", "link")): 5,
        (("domain", "beta.org"), ("spider", "link")): 3,  # ties by name: gamma.net left out
        (("domain", "wiki.example"), ("spider", "wiki")): 1}


def test_live_nodes_count_only_fresh_heartbeats(scraped: Samples) -> None:
    assert series(scraped, "scrapy_cluster_live_nodes") == {
        (("component", "crawler"),): 2, (("component", "kafka-monitor"),): 1,
        (("component", "redis-monitor"),): 1, (("component", "rest"),): 0}


def test_scraping_writes_nothing_and_leaves_dead_heartbeats_to_the_stats_reader(
        filled: RestMetrics, redis_client: redis.Redis) -> None:
    filled.render()
    assert redis_client.zcard(keys.heartbeat_index("kafka-monitor")) == 2


def test_paused_and_halted_domains_are_counted_apart(scraped: Samples) -> None:
    assert value(scraped, "scrapy_cluster_paused_domains") == 2
    assert value(scraped, "scrapy_cluster_halted_domains") == 1
    assert series(scraped, "scrapy_cluster_circuit_breaker_domains") == {
        (("state", "halted"),): 1, (("state", "paused"),): 1}


def test_crawled_pages_are_counted_by_spider_and_status_over_hosts(scraped: Samples) -> None:
    assert series(scraped, "scrapy_cluster_crawled_pages_total") == {
        (("spider", "link"), ("status", "200")): 5,
        (("spider", "link"), ("status", "404")): 1,
        (("spider", "link"), ("status", "504")): 1}


def test_crawler_errors_are_counted_by_exception(scraped: Samples) -> None:
    assert series(scraped, "scrapy_cluster_crawler_errors_total") == {
        (("exception", "ConnectionRefusedError"),): 1, (("exception", "TimeoutError"),): 2}


def test_monitor_requests_failures_and_plugins_are_counters(scraped: Samples) -> None:
    assert series(scraped, "scrapy_cluster_monitor_requests_total") == {
        (("component", "kafka-monitor"),): 7, (("component", "redis-monitor"),): 3}
    assert series(scraped, "scrapy_cluster_monitor_failures_total") == {
        (("component", "kafka-monitor"),): 2, (("component", "redis-monitor"),): 0}
    assert series(scraped, "scrapy_cluster_monitor_plugin_requests_total") == {
        (("component", "kafka-monitor"), ("plugin", "ActionHandler")): 1,
        (("component", "kafka-monitor"), ("plugin", "ScraperHandler")): 4,
        (("component", "redis-monitor"), ("plugin", "InfoMonitor")): 3}


def test_enqueue_to_fetch_is_a_cumulative_histogram(scraped: Samples) -> None:
    buckets = series(scraped, "scrapy_cluster_enqueue_to_fetch_seconds_bucket")
    assert buckets[(("le", "0.25"),)] == 0
    assert buckets[(("le", "0.5"),)] == 1
    assert buckets[(("le", "2.5"),)] == 2
    assert buckets[(("le", "3600.0"),)] == 2
    assert buckets[(("le", "+Inf"),)] == 3
    assert value(scraped, "scrapy_cluster_enqueue_to_fetch_seconds_count") == 3
    assert value(scraped, "scrapy_cluster_enqueue_to_fetch_seconds_sum") == 7202.3


def test_an_empty_cluster_still_exposes_the_histogram_at_zero(
        settings: Settings, redis_client: redis.Redis) -> None:
    metrics = RestMetrics(settings, redis_client, frontier=Frontier.from_settings(
        settings, redis_client))
    scraped = samples_of(metrics.render()[0])
    assert value(scraped, "scrapy_cluster_enqueue_to_fetch_seconds_bucket", le="+Inf") == 0
    assert value(scraped, "scrapy_cluster_enqueue_to_fetch_seconds_count") == 0
    assert series(scraped, "scrapy_cluster_backlog_requests") == {}
    assert value(scraped, "scrapy_cluster_redis_up") == 1


def test_lag_is_exposed_per_topic_and_left_out_when_unknown(scraped: Samples) -> None:
    assert series(scraped, "scrapy_cluster_kafka_monitor_lag_messages") == {
        (("topic", "demo.incoming"),): 4}


def test_a_failing_lag_reader_only_hides_the_lag(
        settings: Settings, redis_client: redis.Redis) -> None:
    def broken() -> dict[str, int | None]:
        raise RuntimeError("broker gone")
    metrics = RestMetrics(settings, redis_client, bus_lag=broken,
                          frontier=Frontier.from_settings(settings, redis_client))
    scraped = samples_of(metrics.render()[0])
    assert series(scraped, "scrapy_cluster_kafka_monitor_lag_messages") == {}
    assert value(scraped, "scrapy_cluster_redis_up") == 1


def test_redis_outage_gives_redis_up_zero_and_is_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    settings = rest_settings(url, tmp_path)
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    metrics = RestMetrics(settings, client, frontier=Frontier.from_settings(settings, client),
                          bus_lag=lambda: {"demo.incoming": 1},
                          logger=logging.getLogger("test-metrics"))
    metrics.observe_request("/feed", 200)
    with caplog.at_level(logging.INFO, logger="test-metrics"):
        scraped = samples_of(metrics.render()[0])
        metrics.render()
    assert value(scraped, "scrapy_cluster_redis_up") == 0
    assert series(scraped, "scrapy_cluster_backlog_requests") == {}
    assert series(scraped, "scrapy_cluster_live_nodes") == {}
    assert value(scraped, "scrapy_cluster_kafka_monitor_lag_messages", topic="demo.incoming") == 1
    assert value(scraped, "scrapy_cluster_rest_requests_total", endpoint="/feed", code="200") == 1
    assert [record.getMessage().split(":")[1].strip() for record in caplog.records] == [
        "cluster metrics skipped, Redis read failed"]
    client.close()


# --- the Rest process's own metrics ---------------------------------------------------------

def test_rest_requests_are_counted_by_endpoint_and_code(filled: RestMetrics) -> None:
    for endpoint, code in (("/feed", 200), ("/feed", 200), ("/poll", 404), ("/etc/passwd", 404)):
        filled.observe_request(endpoint, code)
    scraped = samples_of(filled.render()[0])
    assert series(scraped, "scrapy_cluster_rest_requests_total") == {
        (("code", "200"), ("endpoint", "/feed")): 2, (("code", "404"), ("endpoint", "/poll")): 1,
        (("code", "404"), ("endpoint", "other")): 1}


def test_feed_requests_are_counted_by_plugin_and_outcome(filled: RestMetrics) -> None:
    filled.observe_feed("ScraperHandler", "accepted")
    filled.observe_feed("ActionHandler", "answered")
    filled.observe_feed("ActionHandler", "answered")
    filled.observe_feed("ActionHandler", "something-new")
    scraped = samples_of(filled.render()[0])
    assert series(scraped, "scrapy_cluster_rest_feed_requests_total") == {
        (("outcome", "accepted"), ("plugin", "ScraperHandler")): 1,
        (("outcome", "answered"), ("plugin", "ActionHandler")): 2,
        (("outcome", "other"), ("plugin", "ActionHandler")): 1}


def test_answer_times_are_a_histogram(filled: RestMetrics) -> None:
    filled.observe_answer(0.2)
    filled.observe_answer(3.0)
    scraped = samples_of(filled.render()[0])
    assert value(scraped, "scrapy_cluster_rest_answer_seconds_bucket", le="0.25") == 1
    assert value(scraped, "scrapy_cluster_rest_answer_seconds_bucket", le="5.0") == 2
    assert value(scraped, "scrapy_cluster_rest_answer_seconds_count") == 2
    assert value(scraped, "scrapy_cluster_rest_answer_seconds_sum") == 3.2


# --- names used by the alert rules, the dashboard and the docs ------------------------------

def test_deploy_files_name_metrics_at_all() -> None:
    assert len(alert_names()) >= 6
    assert len(dashboard_names()) >= 15
    assert len(documented_names()) >= 20


def test_every_metric_of_alerts_dashboard_and_docs_is_exposed_and_documented(
        filled: RestMetrics) -> None:
    filled.observe_request("/feed", 200)
    filled.observe_feed("ScraperHandler", "accepted")
    assert_names_match(filled.render()[0])


@pytest.fixture
def rest_overrides(redis_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    name = uuid.uuid4().hex[:8]
    yield {"BUS_BACKEND": "redis", "REDIS_URL": redis_url, "KAFKA_TOPIC_PREFIX": f"m-{name}",
           "KAFKA_INCOMING_TOPIC": f"m-{name}.incoming", "KAFKA_GROUP": f"m-{name}",
           "KAFKA_PRODUCER_TOPIC": f"m-{name}.incoming", "STATS_DUMP": 0,
           "LOG_LEVEL": "WARNING", "SC_DATA_DIR": str(tmp_path / "no-cluster"),
           "REST_API_KEYS": ["metrics-key-4e1f9a3b"]}


def test_a_running_rest_service_serves_every_metric_to_a_bearer_token(
        rest_overrides: dict[str, Any], redis_client: redis.Redis) -> None:
    bus = create_bus(load_settings(environ={}, overrides=rest_overrides))
    producer = bus.producer()
    for index in range(2):  # waiting for a Kafka Monitor that is not running
        producer.produce(rest_overrides["KAFKA_INCOMING_TOPIC"], {"n": index})
    producer.close()
    bus.close()
    with running_rest(rest_overrides) as rest:
        assert httpx.get(rest.url + "/metrics", timeout=30).status_code == 401
        answer = httpx.get(rest.url + "/metrics", timeout=30,
                           headers={"Authorization": "Bearer metrics-key-4e1f9a3b"})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    scraped = samples_of(answer.content)
    assert value(scraped, "scrapy_cluster_redis_up") == 1
    assert value(scraped, "scrapy_cluster_kafka_monitor_lag_messages",
                 topic=rest_overrides["KAFKA_INCOMING_TOPIC"]) == 2
    assert value(scraped, "scrapy_cluster_rest_requests_total", endpoint="/metrics",
                 code="401") == 1
    assert_names_match(answer.content)
