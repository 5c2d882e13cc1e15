"""Property-based fuzzing of ``POST /feed`` and ``POST /poll`` against a real Rest service.

Each Hypothesis example is one HTTP request, drawn from a mix of: crawl requests built from
the crawl schema (random valid fields, unicode, bodies near and over REST_MAX_BODY_BYTES,
sent with or without a Content-Length), the same requests broken on purpose (a field of the
wrong type or out of range, an unknown field, a required field missing), arbitrary JSON
values, deep nesting, bytes that are not JSON or not UTF-8, truncated JSON, wrong content
types, and ``/poll`` bodies. Valid and invalid requests are interleaved on one keep-alive
connection.

Properties: never a 5xx; every answer is the ``{status, data, error}`` wrapper; a refusal is
FAILURE with the seed's message (400 invalid JSON, 400 schema with a non-empty ``cause``,
413 too large); a valid crawl request is 200 SUCCESS; afterwards the incoming topic holds
exactly the crawl requests that were accepted, each once (matched by a unique crawlid), and
the service still answers ``/`` GREEN. No Kafka Monitor runs: nothing consumes the topic.

Examples are derandomized and the example database is off, so every run sends the same
requests.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.rest.server import RestRunner
from scrapy_cluster.rest.wire import MSG_INVALID_JSON, MSG_NO_POLL, MSG_SCHEMA, MSG_TOO_LARGE
from tests.support.request_strategies import (
    JSON_SCALARS,
    JSON_VALUES,
    MAX_BODY_BYTES,
    PLACEHOLDER,
    broken_crawl_requests,
    crawl_requests,
    nested,
)
from tests.support.rest import running_rest

pytestmark = pytest.mark.integration

EXAMPLES = {"redis": 300, "kafka": 100}
DEEPEST_NESTING = 1100  # beyond orjson's reading limit: invalid JSON
JSON_TYPES = ("application/json", "application/json; charset=utf-8", "Application/JSON",
              "application/vnd.api+json")
OTHER_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
               "application/jsonx", "json", "text/json", "application/xml", "")
# answers stored for /poll (as the answer reader stores late ones), keyed by poll id
STORED_ANSWERS = {"fuzz-answer-1": {"uuid": "fuzz-answer-1", "stats": "all", "n": 1},
                  "fuzz-answer-é": {"uuid": "fuzz-answer-é", "data": [None, "ü", 2.5]}}


# --- what is sent and what must come back ----------------------------------------------------

@dataclass(frozen=True)
class Probe:
    """One request and the answer it must get when its body fits the limit: ``expect`` is
    "accepted" (200 SUCCESS), "invalid_json", "schema", "wrong_type", "no_poll", "polled"
    (200 with the stored answer) or "any" (200, 400 or 404, with the right wrapper)."""

    path: str
    body: bytes
    content_type: str | None
    expect: str
    chunked: bool = False
    crawl: bool = False  # a crawl request whose crawlid is replaced by a unique one


@dataclass
class Ledger:
    """Unique crawlids of the crawl requests sent: accepted ones must reach the topic once."""

    prefix: str = field(default_factory=lambda: f"fz{uuid.uuid4().hex[:10]}")
    counter: Iterator[int] = field(default_factory=itertools.count)
    accepted: list[str] = field(default_factory=list)
    outcomes: Counter[int] = field(default_factory=Counter)  # status code: answers

    def next_crawlid(self) -> str:
        return f"{self.prefix}-{next(self.counter)}"


def dump(value: Any, style: int) -> bytes:
    if style == 0:
        return orjson.dumps(value)
    if style == 1:
        return json.dumps(value).encode()  # ASCII, \u escapes
    return json.dumps(value, ensure_ascii=False, indent=1).encode()


# --- strategies ------------------------------------------------------------------------------

def crawl_probe(request: dict[str, Any], expect: str, style: int, content_type: str,
                chunked: bool) -> Probe:
    return Probe("/feed", dump(request, style), content_type, expect, chunked, crawl=True)


VALID_CRAWLS = st.builds(crawl_probe, crawl_requests(), st.just("accepted"), st.integers(0, 2),
                         st.sampled_from(JSON_TYPES), st.booleans())
BROKEN_CRAWLS = st.builds(crawl_probe, broken_crawl_requests(), st.just("schema"),
                          st.integers(0, 2), st.sampled_from(JSON_TYPES), st.booleans())


@st.composite
def json_values(draw: st.DrawFn) -> Probe:
    """Any JSON value (stdlib-encoded, so big integers and lone surrogates occur)."""
    with_surrogates = st.text(st.characters(blacklist_categories=()), max_size=20)
    value = draw(JSON_VALUES | st.integers() | with_surrogates
                 | st.dictionaries(with_surrogates, with_surrogates, max_size=4))
    path = draw(st.sampled_from(["/feed", "/poll"]))
    return Probe(path, json.dumps(value).encode(), draw(st.sampled_from(JSON_TYPES)), "any",
                 draw(st.booleans()))


@st.composite
def huge_strings(draw: st.DrawFn) -> Probe:
    size = MAX_BODY_BYTES + draw(st.integers(-40, 40)) + draw(st.sampled_from([0, 0, 5000]))
    char = draw(st.sampled_from(["x", "é", "\U0001f600"]))
    value = {draw(st.sampled_from(["url", "poll_id", "appid", "z"])): char * (size // len(
        char.encode()))}
    return Probe(draw(st.sampled_from(["/feed", "/poll"])), orjson.dumps(value), JSON_TYPES[0],
                 "any", draw(st.booleans()))


@st.composite
def deep_nesting(draw: st.DrawFn) -> Probe:
    depth = draw(st.integers(1, DEEPEST_NESTING))
    value = nested(depth, draw(JSON_SCALARS), draw(st.booleans()))
    body = (b"[" * depth + b"1" + b"]" * depth) if depth > 250 else json.dumps(value).encode()
    return Probe(draw(st.sampled_from(["/feed", "/poll"])), body, JSON_TYPES[0],
                 "invalid_json" if depth > 1024 else "any", draw(st.booleans()))


@st.composite
def not_json(draw: st.DrawFn) -> Probe:
    """Bytes that are not JSON: invalid UTF-8, or a valid request cut short."""
    if draw(st.booleans()):
        body = draw(st.binary(min_size=1, max_size=200)) + b"\xff\xfe\xc3"  # never UTF-8
    else:
        whole = orjson.dumps(draw(crawl_requests()))
        body = whole[:draw(st.integers(0, len(whole) - 1))]
    return Probe(draw(st.sampled_from(["/feed", "/poll"])), body,
                 draw(st.sampled_from(JSON_TYPES)), "invalid_json", draw(st.booleans()))


@st.composite
def wrong_content_types(draw: st.DrawFn) -> Probe:
    body = orjson.dumps(draw(crawl_requests())) if draw(st.booleans()) else draw(st.binary(
        max_size=100))
    content_type = draw(st.sampled_from(OTHER_TYPES + (None,)))
    return Probe(draw(st.sampled_from(["/feed", "/poll"])), body, content_type, "wrong_type",
                 draw(st.booleans()))


@st.composite
def polls(draw: st.DrawFn) -> Probe:
    """``/poll`` bodies: stored answers (200), unknown poll ids (404), and bodies the poll
    schema refuses."""
    kind = draw(st.sampled_from(["unknown", "schema", "polled"]))
    if kind == "polled":
        body: Any = {"poll_id": draw(st.sampled_from(sorted(STORED_ANSWERS)))}
    elif kind == "unknown":
        body = {"poll_id": f"{uuid.uuid4().hex}-{draw(st.text(max_size=60))}"}
    else:
        body = draw(st.sampled_from([
            {}, {"poll_id": ""}, {"poll_id": "p" * 101}, {"poll_id": 7}, {"poll_id": None},
            {"poll_id": ["a"]}, {"poll_id": "ok", "extra": 1}, {"pollid": "x"}]))
    return Probe("/poll", dump(body, draw(st.integers(0, 2))),
                 draw(st.sampled_from(JSON_TYPES)),
                 {"unknown": "no_poll", "schema": "schema", "polled": "polled"}[kind],
                 draw(st.booleans()))


PROBES = st.one_of(VALID_CRAWLS, VALID_CRAWLS, BROKEN_CRAWLS, json_values(), huge_strings(),
                   deep_nesting(), not_json(), wrong_content_types(), polls())


# --- sending and checking --------------------------------------------------------------------

def with_unique_crawlid(probe: Probe, ledger: Ledger) -> tuple[bytes, str | None]:
    """The body with its placeholder crawlid (if it still has it) replaced by a unique one;
    the body's own encoding is kept."""
    quoted = f'"{PLACEHOLDER}"'.encode()
    if not probe.crawl or quoted not in probe.body:
        return probe.body, None
    crawlid = ledger.next_crawlid()
    return probe.body.replace(quoted, f'"{crawlid}"'.encode(), 1), crawlid


def send(client: httpx.Client, url: str, probe: Probe, body: bytes) -> httpx.Response:
    headers = {} if probe.content_type is None else {"Content-Type": probe.content_type}
    content: Any = iter([body[:len(body) // 2], body[len(body) // 2:]]) if probe.chunked \
        else body
    return client.post(url + probe.path, content=content, headers=headers)


def check_answer(probe: Probe, body: bytes, response: httpx.Response) -> None:
    code = response.status_code
    assert code < 500, f"{code} for {probe!r}: {response.text}"
    answer = response.json()
    # the wrapper, plus `warnings` (a list of texts) on an accepted request that has some
    assert set(answer) - {"warnings"} == {"status", "data", "error"}, answer
    assert all(isinstance(text, str) for text in answer.get("warnings", [])), answer
    if code == 200:
        assert answer["status"] == "SUCCESS" and answer["error"] is None, answer
    else:
        assert answer["status"] == "FAILURE" and answer["data"] is None, answer
        assert isinstance(answer["error"]["message"], str) and answer["error"]["message"]
    message = (answer["error"] or {}).get("message")
    cause = (answer["error"] or {}).get("cause")
    if len(body) > MAX_BODY_BYTES:
        if probe.chunked and probe.expect == "wrong_type" and code == 400:
            # no Content-Length: the content type is checked before the body is read
            assert (message, cause) == (MSG_INVALID_JSON, "Content-Type must be application/json")
        else:
            assert (code, message) == (413, MSG_TOO_LARGE), (probe, answer)
        return
    if probe.expect == "accepted":
        assert (code, answer["data"]) == (200, None), (probe, answer)
    elif probe.expect == "invalid_json":
        assert (code, message) == (400, MSG_INVALID_JSON), (probe, answer)
    elif probe.expect == "wrong_type":
        assert (code, message, cause) == (
            400, MSG_INVALID_JSON, "Content-Type must be application/json"), (probe, answer)
    elif probe.expect == "schema":
        assert (code, message) == (400, MSG_SCHEMA), (probe, answer)
        assert isinstance(cause, str) and cause, answer
    elif probe.expect == "polled":
        poll_id = orjson.loads(body)["poll_id"]
        assert (code, answer["data"]) == (200, STORED_ANSWERS[poll_id]), (probe, answer)
    elif probe.expect == "no_poll":
        assert (code, message) == (404, MSG_NO_POLL), (probe, answer)
    else:
        assert code in (200, 400, 404), (probe, answer)
        if code == 400 and message == MSG_SCHEMA:
            assert isinstance(cause, str) and cause, answer
        if code == 400:
            assert message in (MSG_INVALID_JSON, MSG_SCHEMA), answer


def topic_crawlids(rest: RestRunner, prefix: str, expected: int) -> Counter[str]:
    """Crawlids starting with ``prefix`` on the incoming topic, read from its beginning until
    ``expected`` were seen and the topic then stays quiet (bounded)."""
    bus = create_bus(rest.service.settings)
    reader = bus.reader([rest.service.incoming_topic], from_beginning=True)
    found: Counter[str] = Counter()
    try:
        for _ in range(200):  # each poll waits at most 0.5 s: 100 s at the very most
            messages = reader.poll(1000, 0.5)
            for message in messages:
                value = message.value
                if isinstance(value, dict) and str(value.get("crawlid", "")).startswith(prefix):
                    found[value["crawlid"]] += 1
            if not messages and sum(found.values()) >= expected:
                break
    finally:
        reader.close()
        bus.close()
    return found


def rest_settings(backend: dict[str, Any], redis_url: str, tmp_path: Path) -> dict[str, Any]:
    name = uuid.uuid4().hex[:8]
    return {"REDIS_URL": redis_url, **backend, "KAFKA_TOPIC_PREFIX": f"fuzz-{name}",
            "KAFKA_INCOMING_TOPIC": f"fuzz-{name}.incoming", "KAFKA_GROUP": f"fuzz-{name}",
            "REST_MAX_BODY_BYTES": MAX_BODY_BYTES, "WAIT_FOR_RESPONSE_TIME": 1,
            "SC_DATA_DIR": str(tmp_path / "no-cluster"), "FLASK_LOGGING_ENABLED": False}


# --- tests -----------------------------------------------------------------------------------

def test_fuzzed_feed_and_poll_never_fail_and_deliver_exactly_the_accepted_crawls(
        bus_backend: tuple[str, dict[str, Any]], redis_url: str, tmp_path: Path) -> None:
    backend, overrides = bus_backend
    ledger = Ledger()
    store = redis.Redis.from_url(redis_url)
    for poll_id, stored in STORED_ANSWERS.items():
        store.set(keys.rest_poll(poll_id), orjson.dumps(stored), ex=600)
    store.close()
    with running_rest(rest_settings(overrides, redis_url, tmp_path)) as rest, \
            httpx.Client(timeout=30) as client:

        @settings(max_examples=EXAMPLES[backend], deadline=None, derandomize=True,
                  database=None, suppress_health_check=[
                      HealthCheck.too_slow, HealthCheck.data_too_large,
                      HealthCheck.large_base_example])
        @given(probe=PROBES)
        def one_request(probe: Probe) -> None:
            body, crawlid = with_unique_crawlid(probe, ledger)
            response = send(client, rest.url, probe, body)
            check_answer(probe, body, response)
            ledger.outcomes[response.status_code] += 1
            if crawlid is not None and response.status_code == 200:
                ledger.accepted.append(crawlid)

        one_request()

        index = httpx.get(rest.url + "/", timeout=10).json()
        assert index["node_health"] == "GREEN"
        print(f"{backend}: {len(ledger.accepted)} crawls accepted; answers by status "
              f"{dict(sorted(ledger.outcomes.items()))}")
        assert {200, 400, 404, 413} <= set(ledger.outcomes), ledger.outcomes
        found = topic_crawlids(rest, ledger.prefix, len(ledger.accepted))
    assert found == Counter(ledger.accepted)


def test_deeply_nested_valid_crawl_request_is_refused(redis_url: str, tmp_path: Path) -> None:
    body = (b'{"url": "http://a.com/", "appid": "app", "crawlid": "deep", "attrs": {"x": '
            + b"[" * 300 + b"]" * 300 + b"}}")
    with running_rest(rest_settings({"BUS_BACKEND": "redis"}, redis_url, tmp_path)) as rest:
        response = httpx.post(rest.url + "/feed", content=body,
                              headers={"Content-Type": "application/json"})
        answer = response.json()
        assert response.status_code == 400, answer
        assert answer["status"] == "FAILURE" and answer["error"]["message"] == MSG_SCHEMA
        assert answer["error"]["cause"] == "request is nested too deeply to be sent on the bus"
