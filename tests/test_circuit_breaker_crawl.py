"""The circuit breaker and Retry-After end to end, judged by the site's own request log.

Real redis-server, one real crawler process, the generated site on loopback hosts: one host
answers 500 to every page, one answers 429 with ``Retry-After: 5``, the others are normal. Each
host is throttled to a known rate and fed far more URLs than a test can fetch. The tests run
``CircuitBreaker.evaluate()`` in a loop themselves (the Redis Monitor's job in production).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from scrapy_cluster.redis_monitor.breaker import BreakerEvent, CircuitBreaker
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig
from tests.support.addresses import CIRCUIT_BREAKER_CRAWL
from tests.support.cluster import Cluster, running_cluster

pytestmark = pytest.mark.integration

FAILING, HEALTHY, LIMITED, BROKEN, HALTING = CIRCUIT_BREAKER_CRAWL.hosts(61, 62, 63, 64, 65)
RATE_PER_S = 10
LIMITED_RATE_PER_S = 4
RETRY_AFTER_S = 5
IN_FLIGHT_GRACE_S = 1.5
"""Requests dispatched before a pause may still reach the site this long after it."""
CRAWLER_ENV = {"STATS_CYCLE": "1", "QUEUE_WINDOW": "60", "QUEUE_HITS": "10",
               "QUEUE_MODERATED": "true", "SCHEDULER_IP_ENABLED": "false"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    site_config = SiteConfig(hosts=(FAILING, HEALTHY, LIMITED, BROKEN, HALTING), pages_per_host=400,
                             links_per_page=10, cross_host_every=1000, page_bytes=800,
                             host_status=((FAILING, 500), (LIMITED, 429), (BROKEN, 500),
                                          (HALTING, 503)),
                             host_retry_after_s=((LIMITED, RETRY_AFTER_S),))
    with running_cluster(tmp_path_factory.mktemp("breaker"), site_config) as cluster:
        config = DomainConfig(cluster.client, cluster.frontier)
        for host in (FAILING, HEALTHY, BROKEN, HALTING):
            config.set_throttle(host, DomainThrottle(window_s=1, hits=RATE_PER_S))
        config.set_throttle(LIMITED, DomainThrottle(window_s=1, hits=LIMITED_RATE_PER_S))
        cluster.start_crawler("link", **CRAWLER_ENV)
        yield cluster


def breaker_for(cluster: Cluster, **overrides: Any) -> CircuitBreaker:
    settings = load_settings("redis-monitor", environ={}, settings_file=None,
                             overrides={"REDIS_URL": cluster.redis_server.url, **overrides})
    return CircuitBreaker.from_settings(settings, cluster.client)


def feed(cluster: Cluster, host: str, count: int, crawlid: str) -> None:
    requests = [{"url": cluster.site.site.url(host, f"/p/{i}.html"), "appid": "breaker",
                 "crawlid": crawlid, "spiderid": "link", "maxdepth": 50} for i in range(count)]
    assert cluster.frontier.enqueue_many(requests, dedupe=True).queued == count


def arrivals(cluster: Cluster, host: str, start_s: float, end_s: float = float("inf")) -> list[float]:
    return sorted(t for t in cluster.site.arrivals_snapshot().get(host, []) if start_s <= t < end_s)


def evaluate_until(breaker: CircuitBreaker, domain: str, state: str,
                   timeout_s: float) -> tuple[float, BreakerEvent]:
    """Evaluate every 0.2 s until ``domain`` reaches ``state``; when (monotonic) and the event."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for event in breaker.evaluate():
            if (event.domain, event.state) == (domain, state):
                return time.monotonic(), event
        time.sleep(0.2)
    raise AssertionError(f"{domain} was not {state} within {timeout_s} s")


def test_a_failing_domain_is_paused_while_another_keeps_its_rate(cluster: Cluster) -> None:
    breaker, crawlid, started_s = breaker_for(cluster), uuid.uuid4().hex, time.monotonic()
    feed(cluster, FAILING, 300, crawlid)
    feed(cluster, HEALTHY, 1, crawlid)
    try:
        paused_s, event = evaluate_until(breaker, FAILING, "paused", timeout_s=20)
        time.sleep(IN_FLIGHT_GRACE_S + 5.0)
    finally:
        cluster.frontier.purge("link", "breaker", crawlid)
    watched = (paused_s + IN_FLIGHT_GRACE_S, paused_s + IN_FLIGHT_GRACE_S + 5.0)
    assert (event.error_share, event.responses >= 10) == (1.0, True)
    assert paused_s - arrivals(cluster, FAILING, started_s)[0] < 15  # well within one window
    assert arrivals(cluster, FAILING, *watched) == []
    assert len(arrivals(cluster, HEALTHY, *watched)) >= RATE_PER_S * 5.0 * 0.6


def test_consecutive_failures_halt_a_domain_until_it_is_resumed(cluster: Cluster) -> None:
    breaker = breaker_for(cluster, CIRCUIT_BREAKER_COOLDOWN_S=1, CIRCUIT_BREAKER_HALT_AFTER=25)
    crawlid = uuid.uuid4().hex
    feed(cluster, BROKEN, 300, crawlid)
    try:
        halted_s, event = evaluate_until(breaker, BROKEN, "halted", timeout_s=30)
        time.sleep(IN_FLIGHT_GRACE_S + 3.0)
        halted_window = (halted_s + IN_FLIGHT_GRACE_S, time.monotonic())
        assert breaker.resume(BROKEN) is True
        resumed_s = time.monotonic()
        time.sleep(2.0)
    finally:
        cluster.frontier.purge("link", "breaker", crawlid)
    assert event.consecutive_errors >= 25
    assert arrivals(cluster, BROKEN, *halted_window) == []
    assert len(arrivals(cluster, BROKEN, resumed_s, resumed_s + 2.0)) >= 5


def test_retry_after_delays_the_domain_cluster_wide(cluster: Cluster) -> None:
    crawlid, started_s = uuid.uuid4().hex, time.monotonic()
    feed(cluster, LIMITED, 100, crawlid)
    try:
        deadline = started_s + 20
        while not arrivals(cluster, LIMITED, started_s) and time.monotonic() < deadline:
            time.sleep(0.05)
        first_s = arrivals(cluster, LIMITED, started_s)[0]
        time.sleep(max(0.0, first_s + RETRY_AFTER_S + 3.0 - time.monotonic()))
    finally:
        cluster.frontier.purge("link", "breaker", crawlid)
    later = arrivals(cluster, LIMITED, first_s + 0.001)
    assert later, "the domain was never crawled again after its Retry-After"
    assert RETRY_AFTER_S - 1.0 <= later[0] - first_s <= RETRY_AFTER_S + 3.0


def test_the_redis_monitor_halts_alerts_and_resumes_through_the_api(cluster: Cluster) -> None:
    """Default HALT_AFTER (50): the Redis Monitor's breaker halts the domain, publishes the
    alert on the outbound topic, and a ``domain-resume`` job brings the domain back."""
    import logging
    import threading

    from scrapy_cluster import keys
    from scrapy_cluster.bus import create_bus
    from scrapy_cluster.kafka_monitor.jobs import JobWriter
    from scrapy_cluster.redis_monitor.app import open_monitor

    prefix = f"cb{uuid.uuid4().hex[:6]}"
    settings = load_settings("redis-monitor", environ={}, settings_file=None, overrides={
        "REDIS_URL": cluster.redis_server.url, "BUS_BACKEND": "redis", "KAFKA_TOPIC_PREFIX": prefix,
        "CIRCUIT_BREAKER_COOLDOWN_S": 1, "STATS_DUMP": 0, "REDIS_LOCK_EXPIRATION": 1})
    bus = create_bus(settings)
    reader = bus.reader([f"{prefix}.outbound_firehose"], from_beginning=True)
    answers: list[dict[str, Any]] = []

    def wait_answer(match: dict[str, Any], timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            answers.extend(message.value for message in reader.poll(100, 0.2))
            if any(all(answer.get(k) == v for k, v in match.items()) for answer in answers):
                return time.monotonic()
        raise AssertionError(f"no answer matching {match} within {timeout_s} s: {answers}")

    crawlid, stop = uuid.uuid4().hex, threading.Event()
    with open_monitor(settings, logging.getLogger("breaker-test")) as monitor:
        thread = threading.Thread(target=monitor.run, args=(stop.is_set,), daemon=True)
        thread.start()
        feed(cluster, HALTING, 300, crawlid)
        try:
            halted_s = wait_answer({"action": "domain-halted", "domain": HALTING}, 90)
            time.sleep(IN_FLIGHT_GRACE_S + 3.0)
            halted_window = (halted_s + IN_FLIGHT_GRACE_S, time.monotonic())
            pipe = cluster.client.pipeline()
            JobWriter.from_settings(settings).queue_job(
                pipe, "zk", keys.domain_config_job("domain-resume", HALTING, "testapp", "r1"),
                {"action": "domain-resume", "domain": HALTING, "appid": "testapp", "uuid": "r1"})
            pipe.execute()
            resumed_s = wait_answer({"action": "domain-resume", "uuid": "r1"}, 10)
            time.sleep(2.0)
        finally:
            stop.set()
            thread.join(10)
            cluster.frontier.purge("link", "breaker", crawlid)
            reader.close()
            bus.close()
    alert = next(a for a in answers if a.get("action") == "domain-halted")
    assert (alert["domain"], alert["consecutive_errors"], alert["error_share"]) == (HALTING, 50, 1.0)
    assert alert["reason"] == "50 consecutive errors"
    assert arrivals(cluster, HALTING, *halted_window) == []
    assert len(arrivals(cluster, HALTING, resumed_s, resumed_s + 2.0)) >= 5
