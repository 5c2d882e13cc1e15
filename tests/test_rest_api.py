"""The Rest service's API against real Redis, a real broker and real monitor processes.

Every endpoint and error case with its exact status code and message; ``/feed`` answers within
the wait on both buses; a late answer is served by ``/poll`` from a second instance;
``rest:poll:*`` keys carry a TTL; API keys; the OpenAPI document.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from scrapy_cluster import __version__, keys
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.rest.poll_schema import PollSchema
from scrapy_cluster.rest.wire import (
    MSG_INVALID_JSON,
    MSG_KEY,
    MSG_METHOD,
    MSG_NO_ENDPOINT,
    MSG_NO_KAFKA,
    MSG_NO_POLL,
    MSG_SCHEMA,
    MSG_TOO_LARGE,
)
from scrapy_cluster.stats.coverage import missing_spider_warning
from tests.support.processes import Processes
from tests.support.rest import running_rest
from tests.support.services import free_port

pytestmark = pytest.mark.integration

APP = "restapp"
KEY_ONE, KEY_TWO = "key-one-7c2e9a41f0", "key-two-b83d5e6f12"


def _settings(backend: dict[str, Any], redis_url: str, tmp_path: Path) -> dict[str, Any]:
    name = uuid.uuid4().hex[:8]
    return {**backend, "REDIS_URL": redis_url, "KAFKA_TOPIC_PREFIX": f"rest-{name}",
            "KAFKA_INCOMING_TOPIC": f"rest-{name}.incoming", "KAFKA_GROUP": f"rest-{name}",
            "KAFKA_PRODUCER_TOPIC": f"rest-{name}.incoming", "STATS_DUMP": 0,
            "LOG_LEVEL": "WARNING", "SC_DATA_DIR": str(tmp_path / "no-cluster"),
            "WAIT_FOR_RESPONSE_TIME": 20, "REDIS_LOCK_EXPIRATION": 1}


def _env(settings: dict[str, Any]) -> dict[str, str]:
    return {key: str(value) for key, value in settings.items()}


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path)
    yield running
    running.stop_all()


def post(url: str, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, content=orjson.dumps(body),
                      headers={"Content-Type": "application/json", **kwargs.pop("headers", {})},
                      timeout=60, **kwargs)


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_feed_answers_info_and_stats_within_the_wait(
        bus_backend: tuple[str, dict[str, Any]], redis_url: str, redis_client: redis.Redis,
        tmp_path: Path, processes: Processes) -> None:
    settings = _settings(bus_backend[1], redis_url, tmp_path)
    processes.start(_env(settings), "kafka-monitor", "run")
    processes.start(_env(settings), "redis-monitor")
    with running_rest(settings) as rest:
        index = httpx.get(rest.url + "/").json()
        assert index == {"kafka_connected": True, "my_id": rest.service.my_id,
                         "node_health": "GREEN", "redis_connected": True,
                         "uptime_sec": index["uptime_sec"]}
        assert isinstance(index["uptime_sec"], int)
        assert httpx.post(rest.url + "/").json()["node_health"] == "GREEN"

        crawl = {"url": "http://127.0.0.1:9/a", "appid": APP, "crawlid": "c1", "priority": 7}
        answer = post(rest.url + "/feed", crawl)  # no crawler runs: queued, with a warning
        assert (answer.status_code, answer.json()) == (
            200, {"data": None, "error": None, "status": "SUCCESS",
                  "warnings": [missing_spider_warning(crawl, set())]})

        def queued() -> bool:
            raw = redis_client.hgetall(keys.crawl_counts("link", "c1"))
            return sum(int(value) for field, value in raw.items()
                       if not field.startswith(b"~")) == 1
        wait_until(queued, "the crawl request in the frontier")

        info = post(rest.url + "/feed", {"action": "info", "appid": APP, "crawlid": "c1",
                                         "spiderid": "link", "uuid": "info-1"})
        assert info.status_code == 200
        body = info.json()
        assert body["status"] == "SUCCESS" and body["error"] is None
        assert body["data"]["uuid"] == "info-1"
        assert body["data"]["crawlid"] == "c1"
        assert body["data"]["total_pending"] == 1
        assert body["data"]["domains"]["127.0.0.1"]["total"] == 1

        stats = post(rest.url + "/feed", {"stats": "kafka-monitor", "appid": APP,
                                          "uuid": "stats-1"}).json()
        assert stats["status"] == "SUCCESS"
        assert stats["data"]["uuid"] == "stats-1" and stats["data"]["stats"] == "kafka-monitor"
        assert stats["data"]["plugins"]["ScraperHandler"]["lifetime"] == 1

        # The service's own heartbeat is what the stats API lists for the rest component.
        rest_stats = post(rest.url + "/feed", {"stats": "rest", "appid": APP,
                                               "uuid": "stats-2"}).json()
        machine, node = rest.service.machine, rest.service.process_id
        assert rest_stats["data"]["nodes"] == {machine: [node]}
        assert redis_client.exists(keys.heartbeat("rest", machine, node)) == 1
        info = orjson.loads(redis_client.get(keys.node_info("rest", f"{machine}:{node}")))
        assert info["version"] == __version__ and info["rss_bytes"] > 0
        assert set(info) == {"version", "cpu_percent", "rss_bytes", "started"}


def test_late_answer_is_polled_from_a_second_instance_and_expires(
        bus_backend: tuple[str, dict[str, Any]], redis_url: str, redis_client: redis.Redis,
        tmp_path: Path, processes: Processes) -> None:
    settings = {**_settings(bus_backend[1], redis_url, tmp_path), "WAIT_FOR_RESPONSE_TIME": 1,
                "REST_POLL_TTL": 120}
    processes.start(_env(settings), "kafka-monitor", "run")  # no Redis Monitor yet: no answer
    with running_rest(settings) as first, running_rest(settings) as second:
        late = post(first.url + "/feed", {"stats": "kafka-monitor", "appid": APP,
                                          "uuid": "late-1"})
        assert (late.status_code, late.json()) == (
            200, {"data": {"poll_id": "late-1"}, "error": None, "status": "SUCCESS"})
        missing = post(second.url + "/poll", {"poll_id": "late-1"})
        assert (missing.status_code, missing.json()) == (
            404, {"data": None, "error": {"message": MSG_NO_POLL}, "status": "FAILURE"})

        processes.start(_env(settings), "redis-monitor")
        wait_until(lambda: redis_client.exists(keys.rest_poll("late-1")), "the stored answer")
        polled = post(second.url + "/poll", {"poll_id": "late-1"})
        assert polled.status_code == 200
        assert polled.json()["data"]["uuid"] == "late-1"
        assert polled.json()["data"]["stats"] == "kafka-monitor"
        assert post(first.url + "/poll", {"poll_id": "late-1"}).json() == polled.json()
        assert 0 < redis_client.ttl(keys.rest_poll("late-1")) <= 120


@pytest.mark.parametrize("bus", ["redis"])
def test_error_answers_carry_the_seed_messages(
        bus: str, redis_url: str, tmp_path: Path) -> None:
    settings = {**_settings({"BUS_BACKEND": bus}, redis_url, tmp_path),
                "REST_MAX_BODY_BYTES": 2000}
    with running_rest(settings) as rest:
        def failure(response: httpx.Response) -> tuple[int, str, str | None]:
            body = response.json()
            assert body["status"] == "FAILURE" and body["data"] is None
            return response.status_code, body["error"]["message"], body["error"].get("cause")

        url = rest.url
        bad_json = httpx.post(url + "/feed", content=b'{"url": ',
                              headers={"Content-Type": "application/json"})
        assert failure(bad_json)[:2] == (400, MSG_INVALID_JSON)
        form = httpx.post(url + "/feed", content=b'{"url": "http://a.com"}',
                          headers={"Content-Type": "text/plain"})
        assert failure(form) == (400, MSG_INVALID_JSON, "Content-Type must be application/json")
        schema = post(url + "/feed", {"url": "http://a.com", "appid": "app", "crawlid": "abc",
                                      "crazykey": 1})
        code, message, cause = failure(schema)
        assert (code, message) == (400, MSG_SCHEMA)
        assert cause is not None and "crazykey" in cause
        recrawl = post(url + "/feed", {"url": "http://a.com", "appid": "app", "crawlid": "abc",
                                       "recrawl": {"adaptive": {"min": 600, "max": 60}}})
        assert failure(recrawl) == (400, MSG_SCHEMA, "ScraperHandler: recrawl.adaptive.min "
                                                     "must not exceed max")
        past = post(url + "/feed", {"url": "http://a.com", "appid": "app", "crawlid": "abc",
                                    "recrawl": {"interval": 60, "until": 1_000_000_000}})
        assert failure(past) == (400, MSG_SCHEMA, "ScraperHandler: recrawl.until is in the past")
        not_object = post(url + "/feed", [1, 2])
        assert failure(not_object) == (400, MSG_SCHEMA, "request must be a JSON object, not list")
        assert failure(httpx.get(url + "/nowhere")) == (404, MSG_NO_ENDPOINT, None)
        assert failure(httpx.get(url + "/feed")) == (405, MSG_METHOD, None)
        big = post(url + "/feed", {"url": "http://a.com/" + "x" * 3000, "appid": "a",
                                   "crawlid": "c"})
        assert failure(big) == (413, MSG_TOO_LARGE, None)
        chunked = httpx.post(url + "/feed", content=iter([b'{"url": "', b"y" * 3000, b'"}']),
                             headers={"Content-Type": "application/json"})
        assert failure(chunked) == (413, MSG_TOO_LARGE, None)
        assert failure(post(url + "/poll", {"poll_id": "x", "more": 1})) == (
            400, MSG_SCHEMA, "Additional properties are not allowed ('more' was unexpected)")
        assert failure(post(url + "/poll", {})) == (
            400, MSG_SCHEMA, "'poll_id' is a required property")
        assert failure(post(url + "/poll", {"poll_id": ""})) == (
            400, MSG_SCHEMA, "poll_id must be 1 to 100 characters long")
        assert failure(post(url + "/poll", {"poll_id": "nope"})) == (404, MSG_NO_POLL, None)


def test_feed_refuses_when_the_broker_is_unreachable(redis_url: str, tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    settings = {**_settings({"BUS_BACKEND": "kafka", "KAFKA_HOSTS": dead,
                             "KAFKA_CONN_TIMEOUT": 1}, redis_url, tmp_path)}
    with running_rest(settings) as rest:
        index = httpx.get(rest.url + "/").json()
        assert (index["kafka_connected"], index["redis_connected"], index["node_health"]) == (
            False, True, "YELLOW")
        refused = post(rest.url + "/feed", {"url": "http://a.com", "appid": "app", "crawlid": "abc"})
        assert (refused.status_code, refused.json()) == (
            503, {"data": None, "error": {"message": MSG_NO_KAFKA}, "status": "FAILURE"})


def test_api_keys_guard_every_endpoint_but_the_index(redis_url: str, tmp_path: Path) -> None:
    settings = {**_settings({"BUS_BACKEND": "redis"}, redis_url, tmp_path),
                "REST_API_KEYS": [KEY_ONE, KEY_TWO]}
    with running_rest(settings) as rest:
        url = rest.url
        index = httpx.get(url + "/")
        assert index.status_code == 200
        assert set(index.json()) == {"kafka_connected", "my_id", "node_health",
                                     "redis_connected", "uptime_sec"}
        crawl = {"url": "http://a.com", "appid": "app", "crawlid": "abc"}
        for method, path in (("POST", "/feed"), ("POST", "/poll"), ("GET", "/metrics"),
                             ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/nowhere")):
            refused = httpx.request(method, url + path, json=crawl)
            assert (refused.status_code, refused.json()["error"]) == (401, {"message": MSG_KEY})
            wrong = httpx.request(method, url + path, json=crawl, headers={"X-API-Key": "k-x"})
            assert wrong.status_code == 401
        assert post(url + "/feed", crawl, headers={"X-API-Key": KEY_TWO}).status_code == 200
        bearer = post(url + "/feed", crawl, headers={"Authorization": f"Bearer {KEY_ONE}"})
        assert bearer.status_code == 200
        # The dashboard's old cookie held the raw key; a key in a cookie is no credential now.
        cookie = httpx.get(url + "/openapi.json", cookies={"sc_api_key": KEY_ONE})
        assert cookie.status_code == 401
        # A browser opening the dashboard without a key is sent to the login form.
        page = httpx.get(url + "/ui", headers={"Accept": "text/html"})
        assert (page.status_code, page.headers["location"]) == (303, "/ui/login")
        assert httpx.get(url + "/ui/login").status_code == 200
        assert httpx.get(url + "/ui/api/overview").status_code == 401


def test_openapi_document_and_docs_page(redis_url: str, tmp_path: Path) -> None:
    settings = _settings({"BUS_BACKEND": "redis"}, redis_url, tmp_path)
    with running_rest(settings) as rest:
        document = httpx.get(rest.url + "/openapi.json").json()
        assert {"/", "/feed", "/poll", "/metrics"} <= set(document["paths"])
        feed_schema = document["paths"]["/feed"]["post"]["requestBody"]["content"][
            "application/json"]["schema"]
        assert len(feed_schema["oneOf"]) == 4
        assert {"url", "appid", "crawlid"} <= set(feed_schema["oneOf"][0]["required"])
        recrawl = feed_schema["oneOf"][0]["properties"]["recrawl"]
        assert set(recrawl["properties"]) == {"interval", "adaptive", "until", "max_cycles",
                                              "links", "not_modified"}
        assert recrawl["anyOf"] == [{"required": ["interval"]}, {"required": ["adaptive"]}]
        poll_schema = document["paths"]["/poll"]["post"]["requestBody"]["content"][
            "application/json"]["schema"]
        assert poll_schema["required"] == ["poll_id"]
        assert poll_schema == PollSchema.load().definition  # the schema that checks the body
        docs = httpx.get(rest.url + "/docs")
        assert docs.status_code == 200 and "openapi.json" in docs.text


# --- request heads are bounded before they are parsed (REST_MAX_HEADER_BYTES, ..._HEADERS) ---

HEAD_LIMIT_BYTES = 16 * 1024


@pytest.fixture(scope="module", params=["httptools", "h11"])
def raw_rest(request: pytest.FixtureRequest, redis_url: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A running Rest service with a key, on each HTTP parser; yields (host, port)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    settings = {**_settings({"BUS_BACKEND": "redis"}, redis_url, tmp_path_factory.mktemp("raw")),
                "REST_API_KEYS": [KEY_ONE], "REST_HTTP_PARSER": request.param}
    with running_rest(settings) as rest:
        base = {"httptools": HttpToolsProtocol, "h11": H11Protocol}[request.param]
        assert issubclass(rest.server.config.http_protocol_class, base)
        yield "127.0.0.1", rest.port


def _connect(address: tuple[str, int]) -> socket.socket:
    connection = socket.create_connection(address, timeout=10)
    return connection


def _read_answer(connection: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One answer, read byte-exact (pipelined answers stay in the socket for the next call)."""
    reader = connection.makefile("rb", buffering=0)
    lines = []
    while not lines or lines[-1] != b"\r\n":
        line = reader.readline(65536)
        assert line, f"connection closed before an answer: {lines!r}"
        lines.append(line)
    status_line, *header_lines = [line.decode("latin-1").rstrip("\r\n") for line in lines[:-1]]
    headers = {name.strip().lower(): value.strip()
               for name, value in (line.split(":", 1) for line in header_lines)}
    body = b""
    while len(body) < int(headers.get("content-length", "0")):
        chunk = reader.read(int(headers["content-length"]) - len(body))
        assert chunk
        body += chunk
    return int(status_line.split()[1]), headers, body


def _closed_by_server(connection: socket.socket) -> bool:
    try:
        while connection.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def _assert_refused_431(connection: socket.socket) -> None:
    status, headers, body = _read_answer(connection)
    assert status == 431
    assert headers["connection"] == "close"
    assert headers["x-content-type-options"] == "nosniff"
    assert orjson.loads(body) == {"data": None, "status": "FAILURE", "error": {
        "message": "The request's header fields are too large."}}
    assert _closed_by_server(connection)


def test_a_header_over_the_limit_is_refused_with_431_before_the_key_check(
        raw_rest: tuple[str, int]) -> None:
    with _connect(raw_rest) as connection:
        connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: rest\r\nX-Big: "
                           + b"a" * (20 * 1024) + b"\r\n\r\n")
        _assert_refused_431(connection)


def test_more_headers_than_allowed_are_refused_with_431(raw_rest: tuple[str, int]) -> None:
    many = b"".join(b"X-H%d: v\r\n" % n for n in range(150))
    assert len(many) < HEAD_LIMIT_BYTES
    with _connect(raw_rest) as connection:
        connection.sendall(b"GET / HTTP/1.1\r\nHost: rest\r\n" + many + b"\r\n")
        _assert_refused_431(connection)


def test_a_megabyte_header_is_answered_before_it_is_all_sent(raw_rest: tuple[str, int]) -> None:
    with _connect(raw_rest) as connection:
        # 64 KiB of a 1 MiB header and no end: the answer cannot wait for the rest.
        connection.sendall(b"GET / HTTP/1.1\r\nHost: rest\r\nX-Big: " + b"a" * 65536)
        _assert_refused_431(connection)


def test_a_megabyte_header_still_being_sent_gets_the_431(raw_rest: tuple[str, int]) -> None:
    with _connect(raw_rest) as connection:
        def send_it_all() -> None:
            try:
                connection.sendall(b"GET / HTTP/1.1\r\nHost: rest\r\nX-Big: ")
                for _ in range(64):
                    connection.sendall(b"a" * 16384)
                connection.sendall(b"\r\n\r\n")
            except OSError:
                pass  # the server closed: what the test expects

        sender = threading.Thread(target=send_it_all, daemon=True)
        sender.start()
        _assert_refused_431(connection)
        sender.join(10)


def test_a_normal_request_with_a_key_and_a_body_in_one_segment_is_answered(
        raw_rest: tuple[str, int]) -> None:
    body = orjson.dumps({"poll_id": "p" * (40 * 1024)})  # a body over the head limit
    with _connect(raw_rest) as connection:
        connection.sendall(b"POST /poll HTTP/1.1\r\nHost: rest\r\nX-API-Key: "
                           + KEY_ONE.encode() + b"\r\nContent-Type: application/json\r\n"
                           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        status, _, answer = _read_answer(connection)
        assert (status, orjson.loads(answer)["error"]["cause"]) == (
            400, "poll_id must be 1 to 100 characters long")
        connection.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: rest\r\nX-API-Key: "
                           + KEY_ONE.encode() + b"\r\n\r\n")
        status, _, answer = _read_answer(connection)
        assert status == 200 and orjson.loads(answer)["info"]["version"] == __version__


def test_an_oversized_second_request_on_a_kept_alive_connection_is_refused(
        raw_rest: tuple[str, int]) -> None:
    with _connect(raw_rest) as connection:
        for _ in range(3):  # heads near the limit, one after the other, are each counted alone
            connection.sendall(b"GET / HTTP/1.1\r\nHost: rest\r\nX-Pad: "
                               + b"a" * (HEAD_LIMIT_BYTES - 100) + b"\r\n\r\n")
            assert _read_answer(connection)[0] == 200
        connection.sendall(b"GET / HTTP/1.1\r\nHost: rest\r\nX-Big: "
                           + b"a" * (20 * 1024) + b"\r\n\r\n")
        _assert_refused_431(connection)


# --- behind a reverse proxy (REST_TRUSTED_PROXIES) -------------------------------------------

def _login(url: str, key: str, **headers: str) -> httpx.Response:
    return httpx.post(url + "/ui/login", data={"key": key}, headers=headers)


def _secure(response: httpx.Response) -> bool:
    return "secure" in [part.strip().lower() for part in response.headers["set-cookie"].split(";")]


def test_a_trusted_proxy_sets_the_client_address_and_https(
        redis_url: str, tmp_path: Path) -> None:
    settings = {**_settings({"BUS_BACKEND": "redis"}, redis_url, tmp_path),
                "REST_API_KEYS": [KEY_ONE], "REST_TRUSTED_PROXIES": ["127.0.0.0/8"],
                "REST_AUTH_FAILURES_ALLOWED": 3}
    with running_rest(settings) as rest:
        assert _secure(_login(rest.url, KEY_ONE, **{"X-Forwarded-Proto": "https"}))
        assert not _secure(_login(rest.url, KEY_ONE))
        attacker = {"X-Forwarded-For": "198.51.100.7"}
        assert [_login(rest.url, "wrong-key-0123456789", **attacker).status_code
                for _ in range(3)] == [401] * 3
        assert _login(rest.url, KEY_ONE, **attacker).status_code == 429
        assert _login(rest.url, KEY_ONE, **{"X-Forwarded-For": "203.0.113.9"}).status_code == 303


@pytest.mark.parametrize("proxies", [[], ["10.0.0.0/8"]])
def test_forwarded_headers_from_an_untrusted_client_are_ignored(
        proxies: list[str], redis_url: str, tmp_path: Path) -> None:
    settings = {**_settings({"BUS_BACKEND": "redis"}, redis_url, tmp_path),
                "REST_API_KEYS": [KEY_ONE], "REST_TRUSTED_PROXIES": proxies,
                "REST_AUTH_FAILURES_ALLOWED": 3}
    with running_rest(settings) as rest:
        assert not _secure(_login(rest.url, KEY_ONE, **{"X-Forwarded-Proto": "https"}))
        # A new X-Forwarded-For for each guess does not make a new address.
        assert [_login(rest.url, "wrong-key-0123456789",
                       **{"X-Forwarded-For": f"198.51.100.{n}"}).status_code
                for n in range(3)] == [401] * 3
        assert _login(rest.url, KEY_ONE, **{"X-Forwarded-For": "203.0.113.9"}).status_code == 429


def test_a_bad_trusted_proxy_entry_is_a_settings_error(redis_url: str, tmp_path: Path) -> None:
    settings = {**_settings({"BUS_BACKEND": "redis"}, redis_url, tmp_path),
                "REST_TRUSTED_PROXIES": ["proxy.internal"]}
    with pytest.raises(SettingsError, match="REST_TRUSTED_PROXIES: 'proxy.internal' is not"):
        with running_rest(settings):
            pass


def test_the_service_warns_at_start_when_open_to_the_network_without_keys(
        redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = {**_settings({"BUS_BACKEND": "redis"}, redis_url, tmp_path), "REST_HOST": "0.0.0.0"}
    with caplog.at_level(logging.WARNING, logger="test-rest"):
        with running_rest(settings) as rest:
            assert httpx.get(rest.url + "/").status_code == 200
    warnings = [record for record in caplog.records if "REST_API_KEYS is empty" in record.message]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


def test_pipelined_requests_are_each_answered(raw_rest: tuple[str, int]) -> None:
    small = b"GET / HTTP/1.1\r\nHost: rest\r\n\r\n"
    with _connect(raw_rest) as connection:
        connection.sendall(small * 3)
        assert [_read_answer(connection)[0] for _ in range(3)] == [200] * 3
