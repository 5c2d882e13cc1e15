"""Security claims against real servers and processes (docs/security.md).

Every component (Kafka Monitor, Redis Monitor, crawler, Rest service) runs as a real process on
a redis-server that requires a password, once over plain TCP and once over TLS with client
certificates (``rediss://``), the bus on Redis Streams, at LOG_LEVEL DEBUG. A crawl of the local
test site goes in through the Rest service and comes out on the crawled topic; then no log holds
a secret. Crafted pickle, Python and YAML payloads written where the components read (a queued
request, a domain throttle, the domain document, a lease record, a heartbeat, the incoming
topic, the Redis Monitor's jobs) would each create a marker file if anything ran them.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import httpx
import pytest
import redis
from confluent_kafka.admin import AdminClient

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.bus import kafka as kafka_bus
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.addresses import SECURITY
from tests.support.certificates import write_test_certificates
from tests.support.processes import Processes
from tests.support.rest import rest_process
from tests.support.services import RedisServer, ServiceUnavailable, free_port
from tests.support.starting import service_unavailable

REDIS_PASSWORD = "redis-pw-c71e0b"
API_KEY = "api-key-5f2a9d0c7e1b"
SASL_PASSWORD = "sasl-pw-93bd41"
SECRETS = (REDIS_PASSWORD, API_KEY, SASL_PASSWORD)
HOSTS = SECURITY.hosts(71, 72, 73, 74)
COMPONENTS = (("kafka-monitor", "run"), ("redis-monitor",), ("crawler", "--spider", "link"))
WAIT_S = 60.0
AUTH_REFUSED = "invalid username-password pair"


class SecuredRedis(RedisServer):
    """redis-server with ``--requirepass``; with certificates, TLS only (``--port 0``) and
    client certificates required."""

    def __init__(self, workdir: Path, password: str, tls: dict[str, Path] | None = None) -> None:
        super().__init__(workdir)
        self.password, self.tls = password, tls
        self.argv += ["--requirepass", password]
        if tls is not None:
            self.argv[self.argv.index("--port") + 1] = "0"
            self.argv += ["--tls-port", str(self.port), "--tls-cert-file", str(tls["server_cert"]),
                          "--tls-key-file", str(tls["server_key"]),
                          "--tls-ca-cert-file", str(tls["ca"]), "--tls-auth-clients", "yes"]

    def url_with(self, password: str) -> str:
        if self.tls is None:
            return f"redis://:{password}@{self.host}:{self.port}/0"
        return (f"rediss://:{password}@{self.host}:{self.port}/0?ssl_ca_certs={self.tls['ca']}"
                f"&ssl_certfile={self.tls['client_cert']}&ssl_keyfile={self.tls['client_key']}")

    @property
    def url(self) -> str:
        return self.url_with(self.password)


def tls_supported() -> bool:
    """Whether this redis-server was built with TLS (Debian's is)."""
    try:
        output = subprocess.run(["redis-server", "--tls-port", "1", "--port", "0"],
                                capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "tls-cert-file" in output or "tls-key-file" in output  # it tried to set TLS up


def component_env(redis_url: str) -> dict[str, str]:
    return {"REDIS_URL": redis_url, "BUS_BACKEND": "redis", "LOG_LEVEL": "DEBUG",
            "SC_LOG_LEVEL": "DEBUG", "REST_API_KEYS": json.dumps([API_KEY]),
            "KAFKA_CONFIG": json.dumps({"sasl.mechanism": "SCRAM-SHA-512",
                                        "sasl.username": "alice",
                                        "sasl.password": SASL_PASSWORD}),
            "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "QUEUE_WINDOW": "0",
            "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": "http://127.0.0.1:1/",
            "STATS_DUMP": "0", "REDIS_STREAM_LINGER_MS": "5", "LEASE_TIMEOUT": "5",
            "WAIT_FOR_RESPONSE_TIME": "20", "SC_SETTINGS": "", "KAFKA_TOPIC_PREFIX": "demo"}


@dataclass
class Cluster:
    redis_server: SecuredRedis
    site: SiteServer
    processes: Processes
    rest_url: str
    rest_log: Path
    client: redis.Redis
    frontier: Frontier

    def feed(self, request: dict[str, Any]) -> httpx.Response:
        return httpx.post(self.rest_url + "/feed", json=request, timeout=30,
                          headers={"X-API-Key": API_KEY})

    def crawl(self, host: str, *, maxdepth: int = 1) -> tuple[set[str], set[str]]:
        """Feed a crawl through the Rest service; (pages on the crawled topic, expected pages)."""
        crawlid = uuid.uuid4().hex
        seed = self.site.site.url(host, "/p/0.html")
        expected = self.site.site.expected_urls(seed, maxdepth)
        settings = load_settings(environ={}, overrides={"REDIS_URL": self.redis_server.url,
                                                        "BUS_BACKEND": "redis"})
        bus = create_bus(settings)
        reader = bus.reader([topics.crawled_firehose("demo")], from_beginning=False)
        try:
            answer = self.feed({"url": seed, "appid": "sec", "crawlid": crawlid,
                                "spiderid": "link", "maxdepth": maxdepth})
            assert answer.status_code == 200, answer.text
            found: set[str] = set()
            deadline = time.monotonic() + WAIT_S
            while found < expected and time.monotonic() < deadline:
                found |= {m.value["url"] for m in reader.poll(100, 0.3)
                          if isinstance(m.value, dict) and m.value.get("crawlid") == crawlid}
        finally:
            reader.close()
            bus.close()
        return found, expected

    def logs(self) -> str:
        return self.processes.logs_in_full() + self.rest_log.read_text(errors="replace")

    def alive(self) -> bool:
        return all(process.poll() is None for process, _ in self.processes.processes)


class FullLogs(Processes):
    def logs_in_full(self) -> str:
        return "\n".join(self.log(process) for process, _ in self.processes)


@contextmanager
def secured_cluster(workdir: Path, tls: bool) -> Iterator[Cluster]:
    certificates = write_test_certificates(workdir / "tls") if tls else None
    server = SecuredRedis(workdir / "redis", REDIS_PASSWORD, certificates)
    try:
        server.start()
    except ServiceUnavailable as exc:
        service_unavailable(exc)
    config = SiteConfig(hosts=HOSTS, pages_per_host=8, links_per_page=3)
    with ExitStack() as stack:
        stack.callback(server.stop)
        site = stack.enter_context(SiteServer(config, free_port()))
        env = component_env(server.url)
        processes = FullLogs(workdir)
        stack.callback(processes.stop_all)
        for command in COMPONENTS:
            processes.start(env, *command)
        rest_log = workdir / "rest.log"
        rest_url, _ = stack.enter_context(rest_process(env, rest_log, timeout_s=WAIT_S))
        client = redis.Redis.from_url(server.url)
        stack.callback(client.close)
        frontier = Frontier.from_settings(load_settings("crawler", environ=env), client)
        yield Cluster(server, site, processes, rest_url, rest_log, client, frontier)


@pytest.fixture(scope="module")
def password_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with secured_cluster(tmp_path_factory.mktemp("sec-password"), tls=False) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not tls_supported():
        pytest.skip("this redis-server was built without TLS")
    with secured_cluster(tmp_path_factory.mktemp("sec-tls"), tls=True) as cluster:
        yield cluster


# --- Redis AUTH and TLS for every component ------------------------------------------------

@pytest.mark.parametrize("which", ["password_cluster", "tls_cluster"])
def test_every_component_crawls_on_a_password_protected_redis(
        which: str, request: pytest.FixtureRequest) -> None:
    cluster: Cluster = request.getfixturevalue(which)
    found, expected = cluster.crawl(HOSTS[0])
    assert (found == expected, cluster.alive()) == (True, True), cluster.processes.logs()


@pytest.mark.parametrize("which", ["password_cluster", "tls_cluster"])
def test_the_redis_monitor_answers_through_the_rest_service(
        which: str, request: pytest.FixtureRequest) -> None:
    cluster: Cluster = request.getfixturevalue(which)
    answer = cluster.feed({"action": "info", "appid": "sec", "spiderid": "link",
                           "uuid": f"info-{which}"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["uuid"] == f"info-{which}"


@pytest.mark.parametrize("which", ["password_cluster", "tls_cluster"])
def test_no_secret_appears_in_any_component_log_at_debug(
        which: str, request: pytest.FixtureRequest) -> None:
    cluster: Cluster = request.getfixturevalue(which)
    cluster.crawl(HOSTS[1])
    logs = cluster.logs()
    assert "DEBUG" in logs and "Rest service listening" in logs
    assert [secret for secret in SECRETS if secret in logs] == []


def test_a_plain_connection_to_the_tls_redis_is_refused(tls_cluster: Cluster) -> None:
    plain = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{tls_cluster.redis_server.port}/0"
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(plain, socket_timeout=5).ping()


def test_a_tls_client_without_the_ca_is_refused(tls_cluster: Cluster) -> None:
    server = tls_cluster.redis_server
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        redis.Redis.from_url(f"rediss://:{REDIS_PASSWORD}@127.0.0.1:{server.port}/0",
                             socket_timeout=5).ping()


def test_settings_output_masks_the_secrets_of_a_running_configuration(
        password_cluster: Cluster) -> None:
    env = {**os.environ, **component_env(password_cluster.redis_server.url)}
    result = subprocess.run([sys.executable, "-m", "scrapy_cluster", "settings", "-c", "rest"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "REDIS_URL" in result.stdout and "****" in result.stdout
    assert [secret for secret in SECRETS if secret in result.stdout + result.stderr] == []


def test_a_wrong_password_is_a_clear_error_without_the_password(
        password_cluster: Cluster, tmp_path: Path) -> None:
    wrong = "wrong-pw-d40c11"
    env = component_env(password_cluster.redis_server.url_with(wrong))
    processes = FullLogs(tmp_path)
    started = {" ".join(command): processes.start(env, *command) for command in COMPONENTS}
    rest_log = tmp_path / "rest.log"
    try:
        with rest_process(env, rest_log, timeout_s=WAIT_S):
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                outputs = {name: processes.log(process) for name, process in started.items()}
                outputs["rest"] = rest_log.read_text(errors="replace")
                if all(AUTH_REFUSED in output for output in outputs.values()):
                    break
                time.sleep(0.5)
    finally:
        processes.stop_all()
    assert {name: AUTH_REFUSED in output for name, output in outputs.items()} == \
        {name: True for name in outputs}
    assert started["kafka-monitor run"].returncode == 1  # it refuses to start
    assert [name for name, output in outputs.items() if wrong in output] == []


# --- Crafted payloads are data, never code -----------------------------------------------

@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "executed"


def payloads(marker: Path) -> dict[str, bytes]:
    """A pickle, a Python expression and a YAML tag, each creating ``marker`` if run."""
    command = f"touch {marker}"

    class Exploit:
        def __reduce__(self) -> tuple[Callable[[str], int], tuple[str]]:
            return os.system, (command,)

    return {"pickle": pickle.dumps(Exploit()),
            "python": f'__import__("os").system("{command}")'.encode(),
            "yaml": f"!!python/object/apply:os.system ['{command}']".encode()}


def wait_until(condition: Callable[[], bool], what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what}; logs:\n{cluster.processes.logs()}"
        time.sleep(0.2)


def test_a_crafted_queued_request_is_dropped_and_the_next_one_crawled(
        password_cluster: Cluster, marker: Path) -> None:
    cluster, host = password_cluster, HOSTS[2]
    config = DomainConfig(cluster.client, cluster.frontier)
    config.set_throttle(host, DomainThrottle(window_s=1, hits=0))  # hold the domain
    crawlid = uuid.uuid4().hex
    urls = [cluster.site.site.url(host, f"/p/{n}.html") for n in range(1, 4)]
    cluster.frontier.enqueue_many([{"url": url, "appid": "sec", "crawlid": crawlid,
                                    "spiderid": "link"} for url in urls], dedupe=True)
    queue = next(cluster.client.scan_iter(f"link:{host}:queue:*:{crawlid}"))
    for index, payload in enumerate(payloads(marker).values()):
        head = cluster.client.lindex(queue, index).split(b" ", 1)[0]
        cluster.client.lset(queue, index, head + b" " + payload)
    config.remove_throttle(host)
    wait_until(lambda: cluster.logs().count("dropping a malformed queued request") >= 3,
               "the crafted requests were not dropped", cluster)
    assert (marker.exists(), cluster.alive()) == (False, True)
    found, expected = cluster.crawl(host, maxdepth=0)
    assert found == expected


def test_a_crafted_domain_throttle_is_ignored(password_cluster: Cluster, marker: Path) -> None:
    cluster, host = password_cluster, HOSTS[3]
    for name, payload in payloads(marker).items():
        cluster.client.hset(keys.domain_throttle_config(), f"{name}.{host}", payload)
    cluster.client.hset(keys.domain_throttle_config(), host, payloads(marker)["pickle"])
    try:
        found, expected = cluster.crawl(host, maxdepth=0)
        snapshot = httpx.get(cluster.rest_url + "/metrics", headers={"X-API-Key": API_KEY},
                             timeout=30)
    finally:
        cluster.client.delete(keys.domain_throttle_config())
    assert (found == expected, snapshot.status_code, marker.exists()) == (True, 200, False)


@pytest.mark.parametrize("kind", ["pickle", "python", "yaml"])
def test_a_crafted_domain_document_is_refused_by_config_show(
        password_cluster: Cluster, marker: Path, kind: str) -> None:
    cluster = password_cluster
    cluster.client.hset(keys.domain_config_document(),
                        mapping={"version": 99, "yaml": payloads(marker)[kind]})
    try:
        result = subprocess.run([sys.executable, "-m", "scrapy_cluster", "config", "show"],
                                env={**os.environ, **component_env(cluster.redis_server.url)},
                                capture_output=True, text=True, timeout=60)
    finally:
        cluster.client.delete(keys.domain_config_document())
    assert (marker.exists(), result.returncode != 0, "Traceback" in result.stderr) == \
        (False, True, False), result.stdout + result.stderr
    assert "Error:" in result.stderr


def test_a_crafted_lease_record_is_reaped_without_running_it(
        password_cluster: Cluster, marker: Path) -> None:
    cluster = password_cluster
    for name, payload in payloads(marker).items():
        cluster.client.hset(keys.frontier_lease_items(), f"crafted-{name}", payload)
        cluster.client.zadd(keys.frontier_leases(), {f"crafted-{name}": 0})
    wait_until(lambda: not any(cluster.client.zscore(keys.frontier_leases(), f"crafted-{name}")
                               is not None for name in ("pickle", "python", "yaml")),
               "the crafted leases were not reaped", cluster)
    dashboard = httpx.get(cluster.rest_url + "/ui/api/crawls", headers={"X-API-Key": API_KEY},
                          timeout=30)
    found, expected = cluster.crawl(HOSTS[0], maxdepth=0)
    assert (marker.exists(), cluster.alive(), found == expected) == (False, True, True)
    assert dashboard.status_code == 200


def test_a_crafted_heartbeat_is_shown_as_data(password_cluster: Cluster, marker: Path) -> None:
    cluster = password_cluster
    for name, payload in payloads(marker).items():
        key = keys.heartbeat("crawler", "crafted-host", name)
        cluster.client.set(key, payload, ex=60)
        cluster.client.zadd(keys.heartbeat_index("crawler"),
                            {f"crafted-host:{name}": time.time() + 60})
    answers = [httpx.get(cluster.rest_url + path, headers={"X-API-Key": API_KEY}, timeout=30)
               for path in ("/metrics", "/", "/ui/api/overview")]
    info = cluster.feed({"stats": "crawler", "appid": "sec", "uuid": "crafted-stats"})
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert (info.status_code, marker.exists(), cluster.alive()) == (200, False, True)


def test_crafted_messages_on_the_incoming_topic_are_logged_and_skipped(
        password_cluster: Cluster, marker: Path) -> None:
    cluster = password_cluster
    stream = keys.bus_stream("demo.incoming")
    for payload in payloads(marker).values():
        cluster.client.xadd(stream, {"v": payload})
        cluster.client.xadd(stream, {"v": json.dumps(payload.decode("latin-1"))})
    wait_until(lambda: cluster.logs().count("invalid JSON") >= 2
               and cluster.logs().count("request matches no API") >= 3,
               "the crafted messages were not handled", cluster)
    found, expected = cluster.crawl(HOSTS[1], maxdepth=0)
    assert (marker.exists(), cluster.alive(), found == expected) == (False, True, True)


def test_crafted_redis_monitor_jobs_are_dropped(password_cluster: Cluster, marker: Path) -> None:
    cluster = password_cluster
    for name, payload in payloads(marker).items():
        cluster.client.xadd("redis-monitor:jobs", {"type": payload, "key": payload,
                                                   "data": payload, "name": name})
    answer = cluster.feed({"action": "info", "appid": "sec", "spiderid": "link",
                           "uuid": "after-crafted-jobs"})
    assert answer.status_code == 200 and answer.json()["data"]["uuid"] == "after-crafted-jobs"
    assert (marker.exists(), cluster.alive()) == (False, True)


# --- Kafka security settings pass through KAFKA_CONFIG -----------------------------------

def test_kafka_config_reaches_producer_consumer_reader_and_admin(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plaintext test broker (tansu) cannot require SASL here, so the SASL and TLS entries
    are sent with ``security.protocol`` PLAINTEXT: librdkafka gets them all and the clients
    still work against the broker."""
    ca = write_test_certificates(tmp_path)["ca"]
    extra = {"security.protocol": "PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.username": "alice", "sasl.password": SASL_PASSWORD,
             "ssl.ca.location": str(ca)}
    seen: list[tuple[str, dict[str, Any]]] = []

    def recording(kind: str, base: type) -> type:
        class Recording(base):  # type: ignore[misc, valid-type]
            def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
                seen.append((kind, dict(config)))
                super().__init__(config, **kwargs)
        return Recording

    monkeypatch.setattr(confluent_kafka, "Producer", recording("producer", confluent_kafka.Producer))
    monkeypatch.setattr(confluent_kafka, "Consumer", recording("consumer", confluent_kafka.Consumer))
    monkeypatch.setattr(kafka_bus, "AdminClient", recording("admin", AdminClient))
    settings = load_settings(environ={}, overrides={"BUS_BACKEND": "kafka",
                                                    "KAFKA_HOSTS": kafka_bootstrap,
                                                    "KAFKA_CONFIG": extra})
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    bus = create_bus(settings)
    producer = bus.producer()
    producer.produce(topic, {"ok": 1})
    producer.flush()
    consumer = bus.consumer([topic], "sec-group", from_beginning=True)
    reader = bus.reader([topic], from_beginning=True)
    try:
        assert [m.value for m in reader.poll(10, 10.0)] == [{"ok": 1}]
    finally:
        consumer.close()
        reader.close()
        bus.close()
    kinds = [kind for kind, _ in seen]
    assert sorted(set(kinds)) == ["admin", "consumer", "producer"] and kinds.count("consumer") >= 2  # group member and reader
    assert [kind for kind, config in seen if extra.items() - config.items()] == []
