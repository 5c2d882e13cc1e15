"""Node counts that are true (issue 31, item 6): every component, stopped cleanly, stops
counting as alive at once (its heartbeat is removed, not left to expire); a process restarted
under the same SC_NODE_ID is one node however it died. Real processes of every component (the
crawler on both engines) on a real Redis; counts read the way ``/metrics`` reads them."""

from __future__ import annotations

import logging
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.rest.dashboard.sections import NodeMemory
from scrapy_cluster.rest.metrics import MetricsReader
from scrapy_cluster.settings import load_settings
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.upkeep import Heartbeat
from tests.support.processes import Processes
from tests.support.services import free_port

pytestmark = pytest.mark.integration

WAIT_S = 60.0
COMPONENTS = ("crawler", "kafka-monitor", "redis-monitor", "rest")
EVERY_COMPONENT = (("kafka-monitor", "run"), ("redis-monitor",), ("rest",),
                   ("crawler", "--spider", "link"), ("crawler", "--spider", "link", "--engine",
                                                     "fast"))
RUNNING = {"crawler": 2, "kafka-monitor": 1, "redis-monitor": 1, "rest": 1}
NONE = dict.fromkeys(COMPONENTS, 0)
LOGGER = logging.getLogger(__name__)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path)
    yield running
    running.stop_all()


@pytest.fixture
def env(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> dict[str, str]:
    name = uuid.uuid4().hex[:8]
    return {"REDIS_URL": redis_url, "BUS_BACKEND": "redis", "KAFKA_TOPIC_PREFIX": f"hb-{name}",
            "KAFKA_INCOMING_TOPIC": f"hb-{name}.incoming", "KAFKA_GROUP": f"hb-{name}",
            "SC_DATA_DIR": str(tmp_path / "no-cluster"), "STATS_DUMP": "0",
            "LOG_LEVEL": "WARNING", "SC_LOG_LEVEL": "WARNING", "STATS_CYCLE": "1",
            "REST_HOST": "127.0.0.1", "FLASK_PORT": str(free_port()),
            "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": ""}


def live(client: redis.Redis, redis_url: str) -> dict[str, int]:
    """Live nodes per component, read as ``/metrics`` reads them."""
    settings = load_settings("rest", environ={}, overrides={"REDIS_URL": redis_url,
                                                             "BUS_BACKEND": "redis"})
    reader = MetricsReader(client, Frontier.from_settings(settings, client),
                           heartbeat_timeout_s=float(settings["HEARTBEAT_TIMEOUT"]))
    return reader.read().live_nodes


def wait_for(condition: Callable[[], Any], what: Callable[[], str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {WAIT_S}s: {what()}")
        time.sleep(0.1)


def start_every_component(processes: Processes, env: dict[str, str]) -> None:
    for command in EVERY_COMPONENT:
        processes.start(env, *command)


def test_a_clean_stop_leaves_no_live_node_and_a_restart_counts_what_runs(
        processes: Processes, env: dict[str, str], redis_client: redis.Redis,
        redis_url: str) -> None:
    start_every_component(processes, env)
    wait_for(lambda: live(redis_client, redis_url) == RUNNING,
             lambda: f"{live(redis_client, redis_url)}\n{processes.logs()}")

    assert all(code == 0 for code in processes.stop_all()), processes.logs()
    assert live(redis_client, redis_url) == NONE  # at once, not HEARTBEAT_TIMEOUT later
    assert [redis_client.zcard(keys.heartbeat_index(name)) for name in COMPONENTS] == [0] * 4

    start_every_component(processes, env)
    wait_for(lambda: live(redis_client, redis_url) == RUNNING,
             lambda: f"{live(redis_client, redis_url)}\n{processes.logs()}")


def test_a_killed_process_restarted_under_its_node_id_counts_once(
        processes: Processes, env: dict[str, str], redis_client: redis.Redis,
        redis_url: str) -> None:
    named = {**env, "SC_NODE_ID": "crawler-1"}
    first = processes.start(named, "crawler", "--spider", "link")
    wait_for(lambda: live(redis_client, redis_url)["crawler"] == 1, processes.logs)
    first.send_signal(signal.SIGKILL)  # no clean stop: its heartbeat stays until its TTL
    first.wait(10)
    killed_at = time.time()
    index = keys.heartbeat_index("crawler")
    member = f"{socket.gethostname()}:link:crawler-1"
    assert redis_client.zrange(index, 0, -1) == [member.encode()]

    processes.start(named, "crawler", "--spider", "link")
    wait_for(lambda: (redis_client.zscore(index, member) or 0) > killed_at, processes.logs)
    assert live(redis_client, redis_url)["crawler"] == 1
    assert redis_client.zrange(index, 0, -1) == [member.encode()]


def test_every_component_takes_its_node_id_from_sc_node_id(
        processes: Processes, env: dict[str, str], redis_client: redis.Redis,
        redis_url: str) -> None:
    for number, command in enumerate(EVERY_COMPONENT):
        processes.start({**env, "SC_NODE_ID": f"node-{number}"}, *command)
    wait_for(lambda: live(redis_client, redis_url) == RUNNING,
             lambda: f"{live(redis_client, redis_url)}\n{processes.logs()}")
    host = socket.gethostname()
    members = {name: sorted(member.decode() for member in
                            redis_client.zrange(keys.heartbeat_index(name), 0, -1))
               for name in COMPONENTS}
    assert members == {"kafka-monitor": [f"{host}:node-0"], "redis-monitor": [f"{host}:node-1"],
                       "rest": [f"{host}:node-2"],
                       "crawler": [f"{host}:link:node-3", f"{host}:link:node-4"]}


def test_removing_a_heartbeat_removes_its_key_member_and_info(redis_client: redis.Redis) -> None:
    settings = load_settings("kafka-monitor", environ={})
    stats = WindowedStats.from_settings(settings, redis_client, key_prefix="stats:kafka-monitor")
    now = [0.0]
    heartbeat = Heartbeat(stats, machine="m", process_id="kafka-monitor", interval_s=5,
                          clock=lambda: now[0], info=lambda: {"version": "x"})
    heartbeat.beat_if_due(logger=LOGGER)
    assert redis_client.exists("stats:kafka-monitor:self:m:kafka-monitor",
                               "stats:kafka-monitor:info:m:kafka-monitor") == 2
    heartbeat.remove(logger=LOGGER)
    now[0] = 100.0
    heartbeat.beat_if_due(logger=LOGGER)  # stopped: no more
    assert redis_client.exists("stats:kafka-monitor:self:m:kafka-monitor",
                               "stats:kafka-monitor:info:m:kafka-monitor") == 0
    assert redis_client.zcard(keys.heartbeat_index("kafka-monitor")) == 0


def test_dashboard_tells_a_stopped_node_from_an_offline_one() -> None:
    memory = NodeMemory()

    def row(member: str, alive: bool, beat_s: float) -> dict[str, Any]:
        return {"component": "crawler", "member": member, "alive": alive, "last_seen_s": beat_s,
                "in_index": True, "stopped": False}

    memory.merge([row("h:link:a", True, 100.0), row("h:link:b", False, 0.0)], 130.0)
    rows = {r["member"]: r for r in memory.merge([], 131.0)}  # both left the index
    assert (rows["h:link:a"]["stopped"], rows["h:link:b"]["stopped"]) == (True, False)
    assert memory.merge([], 100.0 + 601) == []  # shown 10 minutes after the last beat

