"""The Rest service's HTTP surface, in this process (docs/security.md, claim 7): the guard
against key guessing (with an injected clock), the signed dashboard sessions, the headers on
every answer, the minimum key length, the warning about an open address, the head counter.

The application runs on a real Redis; requests go through its ASGI interface with a chosen
client address. The server-level limits (431, trusted proxies) are tested against a running
server in ``tests/test_rest_api.py``.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from scrapy_cluster.cli.up_cmd import rest_environment
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes
from scrapy_cluster.rest.endpoints import create_app
from scrapy_cluster.rest.gate import Gate
from scrapy_cluster.rest.head_limit import HeadCounter, HeadLimits
from scrapy_cluster.rest.key_guard import GuardPolicy, KeyGuard, address_key
from scrapy_cluster.rest.security import warn_if_open
from scrapy_cluster.rest.service import RestService
from scrapy_cluster.rest.sessions import COOKIE, Sessions
from scrapy_cluster.rest.wire import MSG_KEY, MSG_LOCKED_OUT
from scrapy_cluster.settings import load_settings

KEY = "key-a-6f1c0e9d2b7a"
OTHER_KEY = "key-b-94d2a7c3e15f"
ATTACKER, USER = "198.51.100.7", "203.0.113.20"
HOUR_S = 3600


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class InProcess:
    """The Rest application behind its Gate, called through ASGI from a chosen address."""

    def __init__(self, app: Gate) -> None:
        self.app = app

    def request(self, method: str, path: str, *, client: str = USER, **kwargs: Any
                ) -> httpx.Response:
        cookies = kwargs.pop("cookies", None)

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, client=(client, 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://rest.test",
                                         cookies=cookies) as http:
                return await http.request(method, path, **kwargs)

        return asyncio.run(send())

    def login(self, key: str, *, client: str = USER) -> httpx.Response:
        return self.request("POST", "/ui/login", client=client, data={"key": key})


def rest_settings(redis_url: str, **overrides: Any) -> dict[str, Any]:
    prefix = f"sec-{uuid.uuid4().hex[:8]}"
    return dict(load_settings("rest", environ={}, overrides={
        "REDIS_URL": redis_url, "BUS_BACKEND": "redis", "LOG_LEVEL": "WARNING",
        "KAFKA_TOPIC_PREFIX": prefix, "KAFKA_INCOMING_TOPIC": f"{prefix}.incoming",
        **overrides}))


def rest_service(settings: dict[str, Any], clock: Callable[[], float]) -> RestService:
    validator = build_validator(plugin_classes(settings), settings)
    return RestService(settings, logging.getLogger("test-rest-security"), check=validator.match,
                       schemas=[(schema.plugin, schema.definition)
                                for schema in validator.schemas], clock=clock)


@pytest.fixture
def make_rest(redis_url: str) -> Iterator[Callable[..., InProcess]]:
    services: list[RestService] = []

    def make(clock: Callable[[], float] | None = None, **overrides: Any) -> InProcess:
        settings = rest_settings(redis_url, **{"REST_API_KEYS": [KEY, OTHER_KEY], **overrides})
        service = rest_service(settings, clock or FakeClock())
        services.append(service)
        return InProcess(Gate(create_app(service), service))

    yield make
    for service in services:
        service.close(join_timeout_s=1)


def session_of(response: httpx.Response) -> str:
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    return cookie.split(";", 1)[0].split("=", 1)[1]


# --- key guessing ------------------------------------------------------------------------

@pytest.mark.integration
def test_wrong_keys_lock_out_their_address_with_429_and_retry_after(
        make_rest: Callable[..., InProcess]) -> None:
    clock = FakeClock()
    rest = make_rest(clock)

    def metrics(key: str, client: str = ATTACKER) -> httpx.Response:
        return rest.request("GET", "/metrics", client=client, headers={"X-API-Key": key})

    assert [metrics(f"guess-{n:016d}").status_code for n in range(10)] == [401] * 10
    locked = metrics(KEY)  # even the right key is not checked while locked out
    assert (locked.status_code, locked.json()["error"]["message"]) == (429, MSG_LOCKED_OUT)
    assert locked.headers["retry-after"] == "1"
    # Another address is not slowed.
    assert rest.request("GET", "/openapi.json", client=USER,
                        headers={"X-API-Key": KEY}).status_code == 200
    clock.now += 1
    assert metrics("guess-11").status_code == 401
    assert metrics("guess-12").headers["retry-after"] == "2"
    clock.now += 2
    assert metrics("guess-12").status_code == 401
    assert metrics("guess-13").headers["retry-after"] == "4"
    clock.now += 4
    right = rest.request("GET", "/openapi.json", client=ATTACKER,
                         headers={"Authorization": f"Bearer {KEY}"})
    assert right.status_code == 200
    assert metrics("guess-14").status_code == 401  # the right key cleared the count


@pytest.mark.integration
def test_wrong_keys_on_the_login_form_are_locked_out_too(
        make_rest: Callable[..., InProcess]) -> None:
    clock = FakeClock()
    rest = make_rest(clock, REST_AUTH_FAILURES_ALLOWED=3)
    assert [rest.login("nope", client=ATTACKER).status_code for _ in range(3)] == [401] * 3
    locked = rest.login(KEY, client=ATTACKER)
    assert (locked.status_code, locked.headers["retry-after"]) == (429, "1")
    assert "set-cookie" not in locked.headers
    assert rest.login(KEY, client=USER).status_code == 303
    # The API and the form share one count per address.
    refused = rest.request("GET", "/metrics", client=ATTACKER, headers={"X-API-Key": KEY})
    assert refused.status_code == 429
    clock.now += 1
    assert rest.login(KEY, client=ATTACKER).status_code == 303


@pytest.mark.integration
def test_a_request_without_a_key_is_not_counted_as_a_guess(
        make_rest: Callable[..., InProcess]) -> None:
    rest = make_rest(REST_AUTH_FAILURES_ALLOWED=2)
    for _ in range(5):
        refused = rest.request("GET", "/metrics", client=ATTACKER)
        assert (refused.status_code, refused.json()["error"]["message"]) == (401, MSG_KEY)
    assert rest.request("GET", "/openapi.json", client=ATTACKER,
                        headers={"X-API-Key": KEY}).status_code == 200


def test_the_lockout_doubles_from_one_second_up_to_the_maximum() -> None:
    policy = GuardPolicy(failures_allowed=10, lockout_max_s=30)
    assert [policy.lockout_s(failures) for failures in range(8, 17)] == [
        0, 0, 1, 2, 4, 8, 16, 30, 30]
    assert policy.lockout_s(10_000) == 30


def test_failures_are_forgotten_after_a_quiet_window() -> None:
    clock = FakeClock()
    guard = KeyGuard(GuardPolicy(failures_allowed=3, window_s=60), clock=clock,
                     logger=logging.getLogger("test-guard"))
    assert [guard.failed(ATTACKER) for _ in range(3)] == [0, 0, 1]
    clock.now += 61
    assert guard.wait_s(ATTACKER) == 0
    assert guard.failed(ATTACKER) == 0


def test_the_guard_remembers_a_bounded_number_of_addresses() -> None:
    clock = FakeClock()
    guard = KeyGuard(GuardPolicy(failures_allowed=1, max_addresses=100), clock=clock,
                     logger=logging.getLogger("test-guard"))
    for n in range(5000):
        guard.failed(f"10.0.{n // 256}.{n % 256}")
    assert guard.tracked_addresses == 100
    assert guard.wait_s("10.0.19.135") > 0  # the most recent are kept
    assert guard.wait_s("10.0.0.0") == 0


def test_an_ipv6_client_is_judged_by_its_64() -> None:
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::9") \
        == "2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1")
    assert address_key("::ffff:192.0.2.1") == "192.0.2.1"
    assert address_key("192.0.2.1") == "192.0.2.1"


def test_wrong_key_warnings_are_bounded_per_address_and_in_all(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    guard = KeyGuard(GuardPolicy(failures_allowed=1_000, max_warnings=5), clock=clock,
                     logger=logging.getLogger("test-guard"))
    with caplog.at_level(logging.WARNING, logger="test-guard"):
        for _ in range(100):
            guard.failed(ATTACKER)
        assert len(caplog.records) == 1
        for n in range(20):
            guard.failed(f"192.0.2.{n}")
        assert len(caplog.records) == 5  # the global cap: 4 more addresses in this minute
        clock.now += 60
        guard.failed(ATTACKER)
    messages = [record.getMessage() for record in caplog.records]
    assert all(record.levelno == logging.WARNING for record in caplog.records)
    assert messages[0].startswith(f"wrong API key from {ATTACKER}: 1 in a row")
    assert f"from {ATTACKER}: 101 in a row, 99 not logged since the last warning for this " \
           "address, 16 for other addresses over the warning cap" in messages[-1]


# --- key length, open address, up -----------------------------------------------------------

@pytest.mark.integration
def test_a_key_shorter_than_the_minimum_is_refused_at_start(redis_url: str) -> None:
    settings = rest_settings(redis_url, REST_API_KEYS=[KEY, "short-key"])
    with pytest.raises(SettingsError) as refused:
        rest_service(settings, FakeClock())
    assert str(refused.value).startswith(
        "REST_API_KEYS: key 2 of 2 has 9 characters; an API key needs at least 16 "
        "(REST_API_KEY_MIN_LENGTH).")
    assert "short-key" not in str(refused.value)
    lowered = rest_settings(redis_url, REST_API_KEYS=["short-key"], REST_API_KEY_MIN_LENGTH=8)
    rest_service(lowered, FakeClock()).close(join_timeout_s=1)


def test_a_short_key_is_a_clean_command_line_error(tmp_path: Any) -> None:
    env = {"PATH": "/usr/bin:/bin", "REST_API_KEYS": '["tiny"]', "REST_HOST": "127.0.0.1",
           "SC_DATA_DIR": str(tmp_path), "BUS_BACKEND": "redis",
           "REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([sys.executable, "-m", "scrapy_cluster", "rest"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Error: REST_API_KEYS: key 1 of 1 has 4 characters" in done.stderr
    assert "Traceback" not in done.stderr and "tiny" not in done.stderr + done.stdout


@pytest.mark.parametrize(("host", "keys", "warned"), [
    ("0.0.0.0", [], True), ("", [], True), ("192.0.2.10", [], True), ("::", [], True),
    ("rest.example", [], True), ("127.0.0.1", [], False), ("127.0.1.1", [], False),
    ("::1", [], False), ("localhost", [], False), ("0.0.0.0", [KEY], False)])
def test_an_open_address_without_keys_is_warned_about(
        host: str, keys: list[str], warned: bool, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    with caplog.at_level(logging.WARNING, logger="test-open"):
        assert warn_if_open(host, keys, logging.getLogger("test-open")) is warned
    records = [record for record in caplog.records if record.name == "test-open"]
    assert len(records) == (1 if warned else 0)
    assert ("REST_API_KEYS is empty" in capsys.readouterr().err) is warned
    if warned:
        assert records[0].levelno == logging.WARNING


def test_up_binds_the_rest_service_to_loopback_unless_rest_host_is_set() -> None:
    assert load_settings("rest", environ={})["REST_HOST"] == "0.0.0.0"  # the original default
    assert rest_environment(load_settings("rest", environ={}))["REST_HOST"] == "127.0.0.1"
    chosen = load_settings("rest", environ={"REST_HOST": "0.0.0.0"})
    assert rest_environment(chosen)["REST_HOST"] == "0.0.0.0"


# --- sessions -------------------------------------------------------------------------------

@pytest.mark.integration
def test_login_sets_a_signed_expiring_session_that_holds_no_key(
        make_rest: Callable[..., InProcess]) -> None:
    rest = make_rest()
    signed_in = rest.login(KEY)
    assert (signed_in.status_code, signed_in.headers["location"]) == (303, "/ui")
    cookie = signed_in.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower(): part.strip()
                  for part in cookie.split(";")[1:]}
    assert attributes["max-age"] == f"Max-Age={12 * HOUR_S}"
    assert {"httponly", "path", "samesite"} <= set(attributes)
    assert attributes["samesite"].lower() == "samesite=strict"
    assert "secure" not in attributes  # plain http, not configured, no trusted proxy
    session = session_of(signed_in)
    assert KEY not in cookie and KEY not in session and "sc_api_key" not in cookie
    assert rest.request("GET", "/ui/api/overview",
                        cookies={COOKIE: session}).status_code != 401
    assert rest.request("GET", "/openapi.json", cookies={COOKIE: session}).status_code == 200


@pytest.mark.integration
def test_an_expired_session_is_refused(make_rest: Callable[..., InProcess]) -> None:
    clock = FakeClock()
    rest = make_rest(clock, REST_SESSION_TTL_S=600)
    session = session_of(rest.login(KEY))
    clock.now += 599
    assert rest.request("GET", "/openapi.json", cookies={COOKIE: session}).status_code == 200
    clock.now += 1
    assert rest.request("GET", "/openapi.json", cookies={COOKIE: session}).status_code == 401
    page = rest.request("GET", "/ui", cookies={COOKIE: session}, headers={"Accept": "text/html"})
    assert (page.status_code, page.headers["location"]) == (303, "/ui/login")


@pytest.mark.integration
def test_a_tampered_session_is_refused(make_rest: Callable[..., InProcess]) -> None:
    clock = FakeClock()
    rest = make_rest(clock)
    session = session_of(rest.login(KEY))
    version, expires, signature = session.split(".")
    later = f"{version}.{int(expires) + 10 * 365 * 24 * HOUR_S}.{signature}"
    flipped = f"{version}.{expires}.{signature[:-2]}{'A' if signature[-2] != 'A' else 'B'}" \
              f"{signature[-1]}"
    for forged in (later, flipped, f"{version}.{expires}.", f"{version}.{expires}", "1",
                   f"2.{expires}.{signature}", f"{version}.{'9' * 5000}.{signature}"):
        answer = rest.request("GET", "/openapi.json", cookies={COOKIE: forged})
        assert answer.status_code == 401, forged
    assert rest.request("GET", "/openapi.json", cookies={COOKIE: session}).status_code == 200


@pytest.mark.integration
def test_removing_a_key_from_the_settings_ends_its_sessions(
        make_rest: Callable[..., InProcess]) -> None:
    clock = FakeClock()
    before = make_rest(clock)
    session = session_of(before.login(KEY))
    kept = make_rest(clock, REST_API_KEYS=[KEY])  # another instance, or a restart
    removed = make_rest(clock, REST_API_KEYS=[OTHER_KEY])
    assert kept.request("GET", "/openapi.json", cookies={COOKIE: session}).status_code == 200
    assert removed.request("GET", "/openapi.json", cookies={COOKIE: session}).status_code == 401


@pytest.mark.integration
def test_the_session_cookie_is_secure_when_configured(
        make_rest: Callable[..., InProcess]) -> None:
    rest = make_rest(REST_COOKIE_SECURE=True)
    cookie = rest.login(KEY).headers["set-cookie"]
    assert "secure" in [part.strip().lower() for part in cookie.split(";")]


def test_sessions_differ_by_key_and_never_contain_it() -> None:
    clock = FakeClock()
    sessions = Sessions([KEY, OTHER_KEY], ttl_s=60, clock=clock)
    first, second = sessions.issue(KEY), sessions.issue(OTHER_KEY)
    assert first != second and sessions.valid(first) and sessions.valid(second)
    assert KEY not in first and OTHER_KEY not in second
    assert not Sessions([KEY], ttl_s=60, clock=clock).valid(second)


# --- headers on every answer -----------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.parametrize("path", ["/ui/api/overview", "/ui/api/domains", "/ui/static/dashboard.js",
                                  "/ui/static/uPlot.min.css", "/docs", "/openapi.json", "/feed",
                                  "/nowhere", "/", "/ui/login"])
def test_every_answer_forbids_sniffing_and_framing(
        make_rest: Callable[..., InProcess], path: str) -> None:
    rest = make_rest(REST_API_KEYS=[])
    answer = rest.request("GET", path)
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]


@pytest.mark.integration
def test_docs_and_the_dashboard_keep_their_full_policy(
        make_rest: Callable[..., InProcess]) -> None:
    rest = make_rest()
    docs = rest.request("GET", "/docs", headers={"X-API-Key": KEY})
    assert docs.status_code == 200
    page = rest.request("GET", "/ui", headers={"X-API-Key": KEY})
    assert page.headers["content-security-policy"].startswith("default-src 'self'; ")
    for answer in (docs, page):
        assert answer.headers.get_list("content-security-policy") == [
            page.headers["content-security-policy"]]
    refused = rest.request("GET", "/metrics")
    assert refused.status_code == 401
    assert refused.headers["x-content-type-options"] == "nosniff"


# --- the head counter (sans-I/O) --------------------------------------------------------------

def test_the_head_counter_finds_the_end_across_chunks_and_counts_headers() -> None:
    counter = HeadCounter(HeadLimits(max_bytes=1000, max_headers=2))
    assert counter.feed(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r") is None
    assert (counter.headers, counter.too_large) == (1, False)  # X-A has not ended yet
    assert counter.feed(b"\n\r\nbody") == 3
    assert (counter.size, counter.headers, counter.too_large) == (35, 2, False)
    counter.reset()
    counter.feed(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n")
    assert counter.too_large


def test_empty_lines_before_the_request_line_do_not_end_the_head() -> None:
    counter = HeadCounter(HeadLimits(max_bytes=100, max_headers=10))
    assert counter.feed(b"\r\n\r\n\r\nGET / HTTP/1.1\r\n") is None
    assert counter.feed(b"X: " + b"y" * 200) is None
    assert counter.too_large
