"""The consume loop in-process, on both bus backends and a real Redis.

The monitor under test is wired from the same public pieces as
``kafka-monitor run``; only the Redis it writes to may differ from the bus's,
so a Redis outage can be staged while the bus keeps receiving.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import confluent_kafka
import orjson
import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.bus import MessageBus, create_bus
from scrapy_cluster.frontier import DispatchView, Frontier
from scrapy_cluster.kafka_monitor.loader import build_plugins, build_validator, plugin_classes
from scrapy_cluster.kafka_monitor.monitor import BatchAbandoned, KafkaMonitor
from scrapy_cluster.kafka_monitor.plugins import StatsHandler
from scrapy_cluster.settings import Settings, load_settings
from tests.support.services import RedisServer

pytestmark = pytest.mark.integration
LOGGER = logging.getLogger("test-kafka-monitor-loop")
CRAWL = {"url": "http://www.dmoz.org/", "appid": "testapp", "crawlid": "abc123"}


class ExplodingStatsHandler(StatsHandler):
    """Raises for the stats request with uuid "boom"; handles the others normally."""

    def handle_batch(self, messages: Any, pipe: Any) -> dict[int, str]:
        if any(message["uuid"] == "boom" for message in messages):
            raise RuntimeError("boom")
        return super().handle_batch(messages, pipe)


@dataclass
class Rig:
    """A monitor, a producer on its topic, and the Redis it writes to."""

    settings: Settings
    monitor: KafkaMonitor
    bus: MessageBus
    redis: redis.Redis
    clock: list[float]

    def produce(self, *values: Any) -> None:
        producer = self.bus.producer()
        for value in values:
            producer.produce(self.settings["KAFKA_INCOMING_TOPIC"], value)
        producer.close()

    def drain_until(self, done: Callable[[], bool], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, "monitor did not get there in time"
            self.monitor.run_once()

    def lifetime(self, name: str) -> int:
        return int(self.redis.get(f"stats:kafka-monitor:{name}:lifetime") or 0)


def produce_raw(settings: Settings, raw: bytes) -> None:
    """Put bytes that are not JSON on the incoming topic (the bus's producer only sends JSON)."""
    topic = settings["KAFKA_INCOMING_TOPIC"]
    if settings["BUS_BACKEND"] == "kafka":
        producer = confluent_kafka.Producer({"bootstrap.servers": settings["KAFKA_HOSTS"]})
        producer.produce(topic, raw)
        assert producer.flush(10) == 0
    else:
        client = redis.Redis.from_url(settings["REDIS_URL"])
        client.xadd(keys.bus_stream(topic), {"v": raw})
        client.close()


@contextmanager
def open_rig(bus_overrides: dict[str, Any], redis_url: str, **extra: Any) -> Iterator[Rig]:
    name = uuid.uuid4().hex[:8]
    settings = load_settings("kafka-monitor", environ={}, overrides={
        **bus_overrides, "KAFKA_INCOMING_TOPIC": f"km-{name}.incoming",
        "KAFKA_GROUP": f"km-{name}", "STATS_DUMP": 0, **extra})
    bus = create_bus(settings)
    client = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=1)
    consumer = bus.consumer([settings["KAFKA_INCOMING_TOPIC"]], settings["KAFKA_GROUP"],
                            from_beginning=True)
    frontier = Frontier.from_settings(settings, client)
    plugins = build_plugins(plugin_classes(settings), settings, logger=LOGGER,
                            redis_client=client, frontier=frontier)
    clock = [1000.0]
    monitor = KafkaMonitor.from_settings(
        settings, consumer=consumer, validator=build_validator([type(p) for p in plugins],
                                                                settings),
        plugins=plugins, redis_client=client, logger=LOGGER, machine="test-host",
        process_id="p1", clock=lambda: clock[0])
    yield Rig(settings, monitor, bus, client, clock)
    consumer.close()
    bus.close()
    client.close()


@pytest.fixture
def rig(bus_backend: tuple[str, dict[str, Any]], redis_client: redis.Redis,
        redis_url: str) -> Iterator[Rig]:
    with open_rig(bus_backend[1], redis_url) as opened:
        yield opened


def test_crawl_request_lands_on_frontier_with_defaults(rig: Rig) -> None:
    rig.produce(CRAWL)
    rig.drain_until(lambda: rig.lifetime("ScraperHandler") == 1)
    popped = Frontier.from_settings(rig.settings, rig.redis).pop(DispatchView("link"), 1)
    request = popped.requests[0].request
    assert {k: request[k] for k in ("url", "appid", "crawlid", "spiderid", "priority",
                                     "maxdepth", "curdepth", "expires", "attrs")} == {
        **CRAWL, "spiderid": "link", "priority": 1, "maxdepth": 0, "curdepth": 0,
        "expires": 0, "attrs": {}}


def test_action_request_becomes_an_indexed_job(rig: Rig) -> None:
    request = {"action": "stop", "appid": "testapp", "crawlid": "c1", "uuid": "u1",
               "spiderid": "link"}
    rig.produce(request)
    rig.drain_until(lambda: rig.lifetime("ActionHandler") == 1)
    [(_, fields)] = rig.redis.xrange(keys.redis_monitor_jobs())
    assert fields[b"key"] == b"stop:link:testapp:c1:u1"
    assert orjson.loads(rig.redis.get(fields[b"key"])) == request


def test_invalid_json_is_counted_as_a_failure_and_the_loop_goes_on(rig: Rig) -> None:
    produce_raw(rig.settings, b"{not json")
    rig.produce(CRAWL)
    rig.drain_until(lambda: rig.lifetime("total") == 2)
    assert (rig.lifetime("fail"), rig.lifetime("ScraperHandler")) == (1, 1)


def test_unmatched_request_logs_the_reason_naming_the_field(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER.name)
    rig.produce({**CRAWL, "colour": "blue"})
    rig.drain_until(lambda: rig.lifetime("fail") == 1)
    reasons = [r.reason for r in caplog.records if hasattr(r, "reason")]
    assert reasons == ["ScraperHandler: request must not contain {'colour'} properties"]


def test_every_request_counts_in_total_and_its_plugin(rig: Rig) -> None:
    rig.produce(CRAWL, {**CRAWL, "url": "http://b.org/"}, {"appid": "testapp", "uuid": "s1"})
    rig.drain_until(lambda: rig.lifetime("total") == 3)
    assert (rig.lifetime("ScraperHandler"), rig.lifetime("StatsHandler"),
            rig.lifetime("fail")) == (2, 1, 0)


def test_rolling_window_stats_use_the_seed_key_shape(rig: Rig) -> None:
    rig.produce(CRAWL)
    rig.drain_until(lambda: rig.lifetime("total") == 1)
    assert rig.redis.exists("stats:kafka-monitor:total:900",
                            "stats:kafka-monitor:ScraperHandler:604800") == 2


def test_heartbeat_has_ttl_of_heartbeat_timeout(rig: Rig) -> None:
    rig.produce(CRAWL)
    rig.drain_until(lambda: rig.lifetime("total") == 1)
    assert 110 < rig.redis.ttl("stats:kafka-monitor:self:test-host:p1") <= 120


def test_heartbeat_is_not_rewritten_before_its_interval(rig: Rig) -> None:
    rig.produce(CRAWL)
    rig.drain_until(lambda: rig.lifetime("total") == 1)
    rig.redis.delete("stats:kafka-monitor:self:test-host:p1")
    rig.produce({**CRAWL, "url": "http://b.org/"})
    rig.drain_until(lambda: rig.lifetime("total") == 2)
    assert rig.redis.exists("stats:kafka-monitor:self:test-host:p1") == 0


def test_heartbeat_is_refreshed_after_its_interval(rig: Rig) -> None:
    rig.produce(CRAWL)
    rig.drain_until(lambda: rig.lifetime("total") == 1)
    rig.redis.delete("stats:kafka-monitor:self:test-host:p1")
    rig.clock[0] += 5.0
    rig.drain_until(lambda: rig.redis.exists("stats:kafka-monitor:self:test-host:p1") == 1)


def test_plugin_exception_fails_only_its_request(
        bus_backend: tuple[str, dict[str, Any]], redis_client: redis.Redis,
        redis_url: str) -> None:
    plugins = {"scrapy_cluster.kafka_monitor.plugins.StatsHandler": None,
               f"{__name__}.ExplodingStatsHandler": 300}
    with open_rig(bus_backend[1], redis_url, PLUGINS=plugins) as rig:
        rig.produce({"appid": "testapp", "uuid": "ok1"}, {"appid": "testapp", "uuid": "boom"},
                    {"appid": "testapp", "uuid": "ok2"})
        rig.drain_until(lambda: rig.lifetime("total") == 3)
        assert (rig.lifetime("ExplodingStatsHandler"), rig.lifetime("fail")) == (2, 1)
        assert rig.redis.exists("statsrequest:all:testapp:ok1",
                                "statsrequest:all:testapp:ok2") == 2


@pytest.mark.slow
def test_requests_arriving_while_redis_is_down_are_handled_after_it_returns(
        bus_backend: tuple[str, dict[str, Any]], private_redis: RedisServer,
        redis_client: redis.Redis, redis_url: str) -> None:
    with open_rig(bus_backend[1], private_redis.url) as rig:
        stop = threading.Event()
        runner = threading.Thread(target=rig.monitor.run, args=(stop.is_set,), daemon=True)
        runner.start()
        private_redis.stop()
        rig.produce(*[{**CRAWL, "url": f"http://site{i}.org/"} for i in range(50)])
        time.sleep(10)  # the outage: the monitor keeps retrying its batch meanwhile
        private_redis.start()
        frontier = Frontier.from_settings(rig.settings, rig.redis)
        deadline = time.monotonic() + 30
        while pending(frontier) < 50 and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()
        runner.join(10)
        assert pending(frontier) == 50


def pending(frontier: Frontier) -> int:
    try:
        return frontier.crawl_info("link", "testapp", "abc123").total_pending
    except redis.ConnectionError:
        return 0


def test_batch_abandoned_during_outage_is_delivered_again(
        bus_backend: tuple[str, dict[str, Any]], private_redis: RedisServer,
        redis_client: redis.Redis, redis_url: str) -> None:
    name = uuid.uuid4().hex[:8]
    extra = {"KAFKA_INCOMING_TOPIC": f"km-{name}.incoming", "KAFKA_GROUP": f"km-{name}"}
    with open_rig(bus_backend[1], private_redis.url, **extra) as rig:
        rig.produce(CRAWL)
        private_redis.stop()
        deadline = time.monotonic() + 30
        while not _abandoned(rig):
            assert time.monotonic() < deadline, "the request never arrived"
    private_redis.start()
    with open_rig(bus_backend[1], private_redis.url, **extra) as again:
        again.drain_until(lambda: again.lifetime("ScraperHandler") == 1, timeout_s=60)


def _abandoned(rig: Rig) -> bool:
    """One poll with shutdown already requested: True when a batch was left unacknowledged."""
    try:
        rig.monitor.run_once(lambda: True)
    except BatchAbandoned:
        return True
    return False
