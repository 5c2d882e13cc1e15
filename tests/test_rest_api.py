"""The Rest service's API against real Redis, a real broker and real monitor processes.

Every endpoint and error case with its exact status code and message; ``/feed`` answers within
the wait on both buses; a late answer is served by ``/poll`` from a second instance;
``rest:poll:*`` keys carry a TTL; API keys; the OpenAPI document.
"""

from __future__ import annotations

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
from scrapy_cluster.rest.app import (
    MSG_INVALID_JSON,
    MSG_KEY,
    MSG_METHOD,
    MSG_NO_ENDPOINT,
    MSG_NO_KAFKA,
    MSG_NO_POLL,
    MSG_SCHEMA,
    MSG_TOO_LARGE,
)
from tests.support.processes import Processes
from tests.support.rest import running_rest
from tests.support.services import free_port

pytestmark = pytest.mark.integration

APP = "restapp"


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
        answer = post(rest.url + "/feed", crawl)
        assert (answer.status_code, answer.json()) == (
            200, {"data": None, "error": None, "status": "SUCCESS"})

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
                "REST_API_KEYS": ["k-one", "k-two"]}
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
        assert post(url + "/feed", crawl, headers={"X-API-Key": "k-two"}).status_code == 200
        bearer = post(url + "/feed", crawl, headers={"Authorization": "Bearer k-one"})
        assert bearer.status_code == 200
        cookie = httpx.get(url + "/openapi.json", cookies={"sc_api_key": "k-one"})
        assert cookie.status_code == 200
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
        poll_schema = document["paths"]["/poll"]["post"]["requestBody"]["content"][
            "application/json"]["schema"]
        assert poll_schema["required"] == ["poll_id"]
        docs = httpx.get(rest.url + "/docs")
        assert docs.status_code == 200 and "openapi.json" in docs.text
