"""Bad API input through the bus into one real ``scrapy-cluster kafka-monitor run`` process.

Hypothesis draws, per example, one message no plugin may take and one valid crawl request
(with a unique crawlid), in either order, and puts both on the incoming topic: JSON values
with the bus producer, bytes (not JSON, not UTF-8, over the size limit, nested beyond what
orjson writes) straight onto the topic (confluent-kafka's own producer; XADD of the entry
field ``v``), since the bus producer only takes JSON values under BUS_MAX_MESSAGE_BYTES. The
strategies of ``tests/support/request_strategies.py`` (also used by the Rest service's fuzzing)
build the crawl requests, broken and not.

Properties, on both backends: the monitor process is still the same one and still running;
its lifetime ``fail`` count equals the number of bad messages exactly, and its log holds
exactly one rejection line with a reason for each; every valid crawl is on the frontier
once; a stats request sent last is turned into its Redis Monitor job. The Rest service's own
fuzzing is ``tests/test_rest_fuzz.py`` (docs/reliability.md, "Bad input").

A second test covers the size limit: the bus producer refuses a message one byte over
BUS_MAX_MESSAGE_BYTES (MessageTooLargeError, nothing sent) and sends one exactly at it; the
consumer handles both that one and a message twice the limit put on the topic by another
producer (the limit is a producer-side rule).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.errors import MessageTooLargeError
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.settings import load_settings
from scrapy_cluster.stats.cluster import ClusterStats
from tests.support.processes import stop_processes
from tests.support.request_strategies import (
    JSON_SCALARS,
    JSON_VALUES,
    PLACEHOLDER,
    broken_crawl_requests,
    crawl_requests,
)

EXAMPLES = 300
MAX_MESSAGE_BYTES = 256 * 1024  # BUS_MAX_MESSAGE_BYTES in these tests
APPID = "fuzzapp"
# orjson reads up to 1,024 levels but writes at most 254 (see tests/support/request_strategies.py)
ORJSON_WRITE_DEPTH = 254
ORJSON_READ_DEPTH = 1024
REJECTIONS = ("invalid JSON: ", "request matches no API: ", "plugin ScraperHandler failed: ")
UNKNOWN_FIELD = "fuzz-unknown-field"  # every schema has additionalProperties: false


# --- what is sent ------------------------------------------------------------------------

@dataclass(frozen=True)
class Bad:
    """A message no plugin takes: ``payload`` is a JSON value (sent with the bus producer) or
    bytes (sent raw); ``kind`` names the category for the summary."""

    kind: str
    payload: Any


@dataclass
class Ledger:
    """What was sent, to compare with what the monitor counted."""

    prefix: str = field(default_factory=lambda: f"bi{uuid.uuid4().hex[:10]}")
    counter: Iterator[int] = field(default_factory=itertools.count)
    bad: Counter[str] = field(default_factory=Counter)
    valid: list[dict[str, Any]] = field(default_factory=list)

    def next_crawlid(self) -> str:
        return f"{self.prefix}-{next(self.counter)}"

    @property
    def sent(self) -> int:
        return sum(self.bad.values()) + len(self.valid)


def _frontier_safe(request: dict[str, Any]) -> dict[str, Any]:
    """The schema takes any spiderid and any host; the frontier refuses a spiderid with ':' or
    a control character, and a host it cannot parse ('[', a port that is not a number, an
    empty host). The ``frontier_refused`` kind sends those on purpose."""
    if "spiderid" in request:
        request["spiderid"] = re.sub("[\x00-\x1f:]", "", request["spiderid"]) or "link"
    scheme, _, rest = request["url"].partition("://")
    host, _, path = rest.partition("/")
    request["url"] = f"{scheme}://{re.sub('[][:]', '', host) or 'h'}/{path}"
    return request


VALID_CRAWLS = crawl_requests().map(_frontier_safe)
UNPARSEABLE_URLS = ("http://[ab/x", "http://a.com:port/", "http://a.com:99999999/", "HTTP://:g/")


@st.composite
def other_json(draw: st.DrawFn) -> Bad:
    """Any JSON value that is not an object, or an object with a field no schema knows; with
    lone surrogates (stdlib-encoded, bytes) now and then."""
    value = draw(JSON_VALUES | st.integers() | st.text(st.characters(blacklist_categories=()),
                                                       max_size=20))
    if isinstance(value, dict):
        value[UNKNOWN_FIELD] = draw(JSON_SCALARS)
    try:
        orjson.dumps(value)
    except TypeError:  # a lone surrogate or an integer beyond 64 bits: orjson cannot write it
        return Bad("other_json", json.dumps(value).encode())
    return Bad("other_json", value)


@st.composite
def huge_strings(draw: st.DrawFn) -> Bad:
    """One huge string field, at, just under and just over the size limit (over: raw)."""
    field_name = draw(st.sampled_from(["url", "appid", "attrs", "z"]))
    overhead = len(orjson.dumps({field_name: ""}))
    size = MAX_MESSAGE_BYTES - overhead + draw(st.integers(-3, 3)) - draw(
        st.sampled_from([0, 0, 1000, 100_000]))
    char = draw(st.sampled_from(["x", "é", "\U0001f600"]))
    value = {field_name: char * (size // len(char.encode()))}
    raw = orjson.dumps(value)
    return Bad("huge_string", raw if len(raw) > MAX_MESSAGE_BYTES else value)


@st.composite
def deep_nesting(draw: st.DrawFn) -> Bad:
    """Arrays or objects nested up to beyond orjson's reading limit (always raw bytes)."""
    depth = draw(st.integers(1, ORJSON_READ_DEPTH + 80))
    if draw(st.booleans()):
        return Bad("deep_nesting", b"[" * depth + b"1" + b"]" * depth)
    return Bad("deep_nesting", b'{"n":' * depth + b"null" + b"}" * depth)


@st.composite
def not_json(draw: st.DrawFn) -> Bad:
    """Bytes that are not JSON: invalid UTF-8, empty, or a valid request cut short."""
    how = draw(st.sampled_from(["binary", "binary", "truncated", "empty"]))
    if how == "empty":
        return Bad("not_json", b"")
    if how == "binary":
        return Bad("not_json", draw(st.binary(min_size=0, max_size=200)) + b"\xff\xfe\xc3")
    whole = orjson.dumps(draw(crawl_requests()))
    return Bad("not_json", whole[:draw(st.integers(1, len(whole) - 1))])


@st.composite
def frontier_refused(draw: st.DrawFn) -> Bad:
    """Crawl requests the schema accepts but the frontier cannot queue: a spiderid with ':'
    or a control character, a URL it cannot parse, or ``attrs`` nested deeper than orjson
    writes."""
    request = draw(VALID_CRAWLS)
    how = draw(st.sampled_from(["spiderid", "url", "nesting"]))
    if how == "spiderid":
        request["spiderid"] = draw(st.sampled_from(["a:b", "link:", "\x01", "sp\nider"]))
        return Bad("frontier_refused", request)
    if how == "url":
        request["url"] = draw(st.sampled_from(UNPARSEABLE_URLS))
        return Bad("frontier_refused", request)
    depth = draw(st.integers(ORJSON_WRITE_DEPTH + 1, ORJSON_READ_DEPTH - 10))
    request.pop("attrs", None)
    request["attrs"] = {}  # last, so that the nesting can be spliced in
    head = orjson.dumps(request)[:-len(b'{}}')]
    return Bad("frontier_refused", head + b'{"d":' + b"[" * depth + b"]" * depth + b"}}")


BAD_MESSAGES = st.one_of(
    broken_crawl_requests().map(lambda request: Bad("wrong_fields", request)),
    other_json(), huge_strings(), deep_nesting(), not_json(), frontier_refused())


# --- putting messages on the topic --------------------------------------------------------

class RawTopic:
    """Puts bytes on the incoming topic without the bus producer's JSON encoding and limit."""

    def __init__(self, backend: str, settings: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self.kafka: confluent_kafka.Producer | None = None
        self.redis: redis.Redis | None = None
        if backend == "kafka":
            self.kafka = confluent_kafka.Producer({"bootstrap.servers": settings["KAFKA_HOSTS"],
                                                   "message.max.bytes": 8 * MAX_MESSAGE_BYTES})
        else:
            self.redis = redis.Redis.from_url(settings["REDIS_URL"])

    def send(self, raw: bytes) -> None:
        if self.kafka is not None:
            self.kafka.produce(self.topic, value=raw)
            self.kafka.poll(0)
        else:
            assert self.redis is not None
            self.redis.xadd(keys.bus_stream(self.topic), {"v": raw})
            self.redis.sadd(keys.bus_topics(), self.topic)

    def close(self) -> None:
        if self.kafka is not None:
            assert self.kafka.flush(30) == 0, "raw messages left undelivered"
        if self.redis is not None:
            self.redis.close()


class Sender:
    """The bus producer for JSON values, ``RawTopic`` for bytes, on one topic."""

    def __init__(self, backend: str, env: dict[str, str]) -> None:
        self.settings = load_settings("kafka-monitor", environ=env)
        self.topic = str(self.settings["KAFKA_INCOMING_TOPIC"])
        self.bus = create_bus(self.settings)
        self.bus.reader([self.topic]).close()  # creates the topic
        self.producer = self.bus.producer()
        self.raw = RawTopic(backend, self.settings, self.topic)

    def send(self, payload: Any) -> None:
        if isinstance(payload, bytes):
            self.raw.send(payload)
        else:
            self.producer.produce(self.topic, payload)

    def close(self) -> None:
        self.producer.close()
        self.raw.close()
        self.bus.close()


# --- the monitor and what it reports ----------------------------------------------------

@pytest.fixture
def env(bus_backend: tuple[str, dict[str, Any]], redis_url: str,
        tmp_path: Path) -> dict[str, str]:
    name = uuid.uuid4().hex[:8]
    values = {**bus_backend[1], "REDIS_URL": redis_url, "KAFKA_INCOMING_TOPIC": f"bad-{name}.in",
              "KAFKA_TOPIC_PREFIX": f"bad-{name}", "KAFKA_GROUP": f"bad-{name}",
              "STATS_DUMP": 0, "LOG_LEVEL": "WARNING", "LOG_JSON": "true",
              "BUS_MAX_MESSAGE_BYTES": MAX_MESSAGE_BYTES,
              "SC_DATA_DIR": str(tmp_path / "no-cluster")}
    return {key: str(value) for key, value in values.items()}


@pytest.fixture
def monitor(env: dict[str, str], tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log_path = tmp_path / "kafka-monitor.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "scrapy_cluster", "kafka-monitor",
                                    "run"], env={**os.environ, **env}, stdout=log, stderr=log)
    yield process, log_path
    stop_processes([process])


def lifetime(client: redis.Redis, name: str) -> int:
    return int(client.get(f"stats:kafka-monitor:{name}:lifetime") or 0)


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def rejection_lines(log_path: Path) -> list[dict[str, Any]]:
    """The monitor's log records that reject one message."""
    records = []
    for line in log_path.read_bytes().splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict) and str(record.get("message", "")).startswith(REJECTIONS):
            records.append(record)
    return records


def send_final_stats_request(sender: Sender) -> str:
    request_uuid = f"final-{uuid.uuid4().hex[:8]}"
    sender.send({"appid": APPID, "uuid": request_uuid, "stats": "kafka-monitor"})
    return keys.stats_job("kafka-monitor", APPID, request_uuid)


def pending(frontier: Frontier, request: dict[str, Any]) -> int:
    info = frontier.crawl_info(request.get("spiderid", "link"), request["appid"],
                               request["crawlid"])
    return info.total_pending


def padded_crawl(crawlid: str, size: int) -> dict[str, Any]:
    """A valid crawl request whose JSON encoding is exactly ``size`` bytes."""
    crawl = {"url": "http://limit.example.org/", "appid": APPID, "crawlid": crawlid,
             "spiderid": "link", "attrs": {"pad": ""}}
    crawl["attrs"] = {"pad": "x" * (size - len(orjson.dumps(crawl)))}
    assert len(orjson.dumps(crawl)) == size
    return crawl


# --- tests ---------------------------------------------------------------------------------

def test_bad_messages_are_counted_and_logged_and_valid_ones_all_handled(
        bus_backend: tuple[str, dict[str, Any]], env: dict[str, str],
        monitor: tuple[subprocess.Popen[bytes], Path], redis_client: redis.Redis) -> None:
    process, log_path = monitor
    sender = Sender(bus_backend[0], env)
    ledger = Ledger()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example])
    @given(bad=BAD_MESSAGES, crawl=VALID_CRAWLS, bad_first=st.booleans())
    def one_pair(bad: Bad, crawl: dict[str, Any], bad_first: bool) -> None:
        valid = {**crawl, "crawlid": ledger.next_crawlid()}
        assert crawl["crawlid"] == PLACEHOLDER
        for payload in ([bad.payload, valid] if bad_first else [valid, bad.payload]):
            sender.send(payload)
        ledger.bad[bad.kind] += 1
        ledger.valid.append(valid)

    started = time.monotonic()
    one_pair()
    job_key = send_final_stats_request(sender)
    sender.close()
    wait_for(lambda: lifetime(redis_client, "total") >= ledger.sent + 1, 180,
             "every message handled")
    elapsed_s = time.monotonic() - started

    assert process.poll() is None, log_path.read_text(errors="replace")[-3000:]
    assert redis_client.exists(job_key), "the final stats request became no job"
    answer = ClusterStats(redis_client, sender.settings).answer("kafka-monitor")
    bad_total = sum(ledger.bad.values())
    print(f"{bus_backend[0]}: {bad_total} bad ({dict(sorted(ledger.bad.items()))}), "
          f"{len(ledger.valid)} valid, handled in {elapsed_s:.1f} s; answer {answer}")
    assert lifetime(redis_client, "total") == ledger.sent + 1
    assert lifetime(redis_client, "fail") == bad_total
    assert answer["fail"]["lifetime"] == bad_total
    assert answer["plugins"]["ScraperHandler"]["lifetime"] == len(ledger.valid)

    rejections = rejection_lines(log_path)
    assert len(rejections) == bad_total
    assert all(len(record["message"].split(": ", 1)[1]) > 3 for record in rejections)
    assert "Traceback" not in log_path.read_text(errors="replace")

    frontier = Frontier.from_settings(sender.settings, redis_client)
    missing = [request["crawlid"] for request in ledger.valid if pending(frontier, request) != 1]
    assert missing == []


def test_size_limit_is_refused_by_the_producer_and_near_it_handled(
        bus_backend: tuple[str, dict[str, Any]], env: dict[str, str],
        monitor: tuple[subprocess.Popen[bytes], Path], redis_client: redis.Redis) -> None:
    process, log_path = monitor
    sender = Sender(bus_backend[0], env)
    at_limit = padded_crawl("at-limit", MAX_MESSAGE_BYTES)
    over_limit = padded_crawl("over-limit", MAX_MESSAGE_BYTES + 1)
    twice = padded_crawl("twice", 2 * MAX_MESSAGE_BYTES)
    sender.send(at_limit)
    with pytest.raises(MessageTooLargeError, match="exceeds BUS_MAX_MESSAGE_BYTES"):
        sender.send(over_limit)
    sender.send(orjson.dumps(twice))  # raw: another producer with a larger limit
    job_key = send_final_stats_request(sender)
    sender.close()
    wait_for(lambda: lifetime(redis_client, "total") >= 3, 120, "three messages handled")

    frontier = Frontier.from_settings(sender.settings, redis_client)
    time.sleep(1)  # a refused message that had been sent after all would be counted by now
    assert process.poll() is None, log_path.read_text(errors="replace")[-3000:]
    assert redis_client.exists(job_key)
    assert (lifetime(redis_client, "total"), lifetime(redis_client, "fail")) == (3, 0)
    assert [pending(frontier, request) for request in (at_limit, over_limit, twice)] == [1, 0, 1]
