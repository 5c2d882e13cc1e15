"""The circuit breaker against a real Redis: statuses written by the crawlers' real
``ResponseStats``, evaluated with an injected clock."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis
from scrapy import Request
from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest
from scrapy.http import Response

from scrapy_cluster import keys
from scrapy_cluster.crawler.common.response_stats import NO_RESPONSE, ResponseStats, StatusPolicy
from scrapy_cluster.crawler.common.retry_after import RetryAfterPauser, retry_after_s
from scrapy_cluster.crawler.middlewares import ResponseStatsMiddleware
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.frontier.pause import HALT_UNTIL_MS, DomainPauses
from scrapy_cluster.redis_monitor.breaker import (
    BreakerEvent,
    BreakerPolicy,
    CircuitBreaker,
    ErrorStatuses,
)
from scrapy_cluster.settings import load_settings
from scrapy_cluster.stats import WindowedStats
from tests.support.frontier import (
    START_MS,
    VIEW,
    CountingConnection,
    ManualClock,
    drain,
    make_frontier,
    req,
)

pytestmark = pytest.mark.integration

COOLDOWN_MS = 10_000


def settings(**overrides: Any) -> Any:
    base = {"CIRCUIT_BREAKER_COOLDOWN_S": COOLDOWN_MS / 1000, "QUEUE_WINDOW": 0}
    return load_settings("redis-monitor", environ={}, settings_file=None,
                         overrides={**base, **overrides})


def make_breaker(client: redis.Redis, clock: ManualClock, **overrides: Any) -> CircuitBreaker:
    return CircuitBreaker.from_settings(settings(**overrides), client, clock=clock)


class Crawler:
    """Records statuses through the real ``ResponseStats`` at the test clock's time."""

    def __init__(self, client: redis.Redis, clock: ManualClock) -> None:
        crawler_settings = load_settings("crawler", environ={}, settings_file=None)
        self.clock = clock
        self.stats = ResponseStats(
            client, WindowedStats.from_settings(crawler_settings, client, key_prefix="stats:t"),
            StatusPolicy(hostname="host", spiderid="link", tracked_codes=frozenset(),
                         codes_enabled=False, window_s=60, last_n=50),
            clock=lambda: clock.now_ms / 1000)

    def answer(self, domain: str, *statuses: int, step_ms: int = 10) -> None:
        for status in statuses:
            self.stats.record(domain, status)
            self.clock.advance(step_ms)
        self.stats.flush()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def crawler(redis_client: redis.Redis, clock: ManualClock) -> Crawler:
    return Crawler(redis_client, clock)


def state_of(client: redis.Redis, domain: str) -> dict[str, Any] | None:
    raw = client.hget(keys.circuit_breaker_state(), domain)
    return orjson.loads(raw) if raw else None


def test_an_error_share_above_the_tolerance_pauses_the_domain(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    crawler.answer("bad.com", *[200] * 8, 500, NO_RESPONSE)
    now = clock.now_ms
    events = make_breaker(redis_client, clock).evaluate()
    assert events == [BreakerEvent("bad.com", "paused",
                                   "2 errors in 10 responses (20%) over 60 s > 10 %", 0.2, 10, 2,
                                   now + COOLDOWN_MS)]
    assert redis_client.hget(keys.domain_paused(), "bad.com") == str(now + COOLDOWN_MS).encode()
    assert state_of(redis_client, "bad.com") == {
        "state": "paused", "since_ms": now, "until_ms": now + COOLDOWN_MS,
        "reason": events[0].reason, "errors": 2, "responses": 10}


def test_an_error_share_at_the_tolerance_does_not_pause(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    crawler.answer("ok.com", *[200] * 9, 503)
    assert make_breaker(redis_client, clock).evaluate() == []
    assert redis_client.hgetall(keys.domain_paused()) == {}


def test_fewer_responses_than_the_minimum_do_not_pause(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    crawler.answer("new.com", *[500] * 9)
    assert make_breaker(redis_client, clock).evaluate() == []


def test_statuses_older_than_the_window_are_not_counted(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    crawler.answer("bad.com", *[500] * 5)
    clock.advance(60_000)
    crawler.answer("bad.com", *[200] * 10)
    assert make_breaker(redis_client, clock).evaluate() == []


def test_only_the_configured_statuses_are_errors(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    crawler.answer("a.com", *[404] * 10)
    crawler.answer("b.com", *[404] * 10)
    breaker = make_breaker(redis_client, clock, CIRCUIT_BREAKER_ERROR_STATUSES=[404])
    assert make_breaker(redis_client, clock).evaluate() == []
    assert [event.domain for event in breaker.evaluate()] == ["a.com", "b.com"]


def test_a_paused_domain_is_not_paused_again(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    breaker = make_breaker(redis_client, clock)
    crawler.answer("bad.com", *[500] * 10)
    assert [event.state for event in breaker.evaluate()] == ["paused"]
    crawler.answer("bad.com", *[500] * 10)
    assert breaker.evaluate() == []


def test_fifty_consecutive_errors_halt_the_domain(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    crawler.answer("bad.com", 200, *[500] * 25, *[NO_RESPONSE] * 25)
    events = make_breaker(redis_client, clock).evaluate()
    assert [(e.state, e.reason, e.consecutive_errors, e.responses, e.until_ms) for e in events] \
        == [("halted", "50 consecutive errors", 50, 51, None)]
    assert redis_client.hget(keys.domain_paused(), "bad.com") == str(HALT_UNTIL_MS).encode()
    assert state_of(redis_client, "bad.com")["state"] == "halted"  # type: ignore[index]


def test_one_success_among_the_last_fifty_does_not_halt(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    crawler.answer("bad.com", *[500] * 25, 200, *[500] * 24)
    assert [event.state for event in make_breaker(redis_client, clock).evaluate()] == ["paused"]


def test_a_paused_domain_whose_errors_reach_fifty_is_halted(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    breaker = make_breaker(redis_client, clock)
    crawler.answer("bad.com", *[500] * 10)
    assert [event.state for event in breaker.evaluate()] == ["paused"]
    crawler.answer("bad.com", *[500] * 40)
    assert [event.state for event in breaker.evaluate()] == ["halted"]
    clock.advance(COOLDOWN_MS)
    assert breaker.evaluate() == []
    assert state_of(redis_client, "bad.com")["state"] == "halted"  # type: ignore[index]


def test_a_pause_ends_after_the_cooldown_without_counting_its_errors_again(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    breaker = make_breaker(redis_client, clock)
    crawler.answer("bad.com", *[500] * 10)
    [paused] = breaker.evaluate()
    clock.advance(COOLDOWN_MS)
    assert breaker.evaluate() == [BreakerEvent("bad.com", "closed", "cool-down over", 0.0, 0, 0,
                                               paused.until_ms)]
    assert (state_of(redis_client, "bad.com"), redis_client.hgetall(keys.domain_paused())) == \
        (None, {})
    assert breaker.evaluate() == []  # the 10 errors are still in the 60 s window
    crawler.answer("bad.com", *[500] * 10)
    assert [event.state for event in breaker.evaluate()] == ["paused"]


def test_the_end_of_a_pause_keeps_a_longer_retry_after_pause(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    breaker = make_breaker(redis_client, clock)
    crawler.answer("bad.com", *[429] * 10)
    breaker.evaluate()
    redis_client.hset(keys.domain_paused(), "bad.com", clock.now_ms + 3_600_000)
    clock.advance(COOLDOWN_MS)
    assert [event.state for event in breaker.evaluate()] == ["closed"]
    assert redis_client.hexists(keys.domain_paused(), "bad.com")


def test_two_breakers_evaluating_at_once_report_one_pause(
        redis_client: redis.Redis, redis_url: str, clock: ManualClock, crawler: Crawler) -> None:
    first = make_breaker(redis_client, clock)
    second = make_breaker(redis.Redis.from_url(redis_url), clock)
    crawler.answer("bad.com", *[500] * 10)
    first_plan, second_plan = first.plan(first.observe()), second.plan(second.observe())
    events = first.apply(first_plan) + second.apply(second_plan)
    assert [(event.domain, event.state) for event in events] == [("bad.com", "paused")]


def test_two_breakers_evaluating_at_once_report_one_halt_and_one_end_of_pause(
        redis_client: redis.Redis, redis_url: str, clock: ManualClock, crawler: Crawler) -> None:
    first = make_breaker(redis_client, clock)
    second = make_breaker(redis.Redis.from_url(redis_url), clock)
    crawler.answer("bad.com", *[500] * 10)
    crawler.answer("worse.com", *[500] * 50)
    first.evaluate()
    clock.advance(COOLDOWN_MS)
    first_plan, second_plan = first.plan(first.observe()), second.plan(second.observe())
    events = second.apply(second_plan) + first.apply(first_plan)
    assert [(event.domain, event.state) for event in events] == [("bad.com", "closed")]


def test_resume_ends_a_halt_forgets_the_statuses_and_dispatches_again(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    frontier = make_frontier(redis_client, clock)
    frontier.enqueue_many([req("http://bad.com/1")])
    breaker = make_breaker(redis_client, clock)
    crawler.answer("bad.com", *[500] * 50)
    assert [event.state for event in breaker.evaluate()] == ["halted"]
    assert drain(frontier) == []
    redis_client.delete(keys.wake_list("link"))
    assert breaker.resume("bad.com") is True
    assert redis_client.llen(keys.wake_list("link")) == 1
    assert redis_client.exists(keys.crawler_domain_last_statuses("bad.com"),
                               keys.crawler_domain_status_window("bad.com")) == 0
    assert breaker.evaluate() == []
    assert [leased.request["url"] for leased in frontier.pop(VIEW, 5).requests] == \
        ["http://bad.com/1"]


def test_resume_of_a_domain_that_was_not_paused_says_so(
        redis_client: redis.Redis, clock: ManualClock) -> None:
    assert make_breaker(redis_client, clock).resume("fine.com") is False


def test_snapshot_gives_counts_last_statuses_and_states(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    breaker = make_breaker(redis_client, clock)
    crawler.answer("bad.com", *[500] * 50)
    crawler.answer("slow.com", *[200] * 10, 503)
    crawler.answer("ok.com", 200, 200, 404)
    breaker.evaluate()
    redis_client.hset(keys.domain_paused(), "slow.com", clock.now_ms + 5_000)
    assert breaker.snapshot() == {
        "domains": {
            "bad.com": {"successful": 0, "error": 50, "last_statuses": {"500": 50},
                        "state": "halted"},
            "ok.com": {"successful": 3, "error": 0, "last_statuses": {"200": 2, "404": 1},
                       "state": "active"},
            "slow.com": {"successful": 10, "error": 1, "last_statuses": {"200": 10, "503": 1},
                         "state": "paused"}},
        "paused": ["slow.com"], "halted": ["bad.com"]}


def test_statuses_are_indexed_by_domain_with_their_last_write(
        redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    crawler.answer("a.com", 200, step_ms=0)
    clock.advance(500)
    crawler.answer("b.com", 200, step_ms=0)
    assert redis_client.zrange(keys.crawler_domain_status_domains(), 0, -1, withscores=True) == \
        [(b"a.com", START_MS), (b"b.com", START_MS + 500)]


def test_evaluate_is_two_round_trips_and_three_with_a_change(
        redis_url: str, redis_client: redis.Redis, clock: ManualClock, crawler: Crawler) -> None:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    breaker = make_breaker(redis.Redis(connection_pool=pool), clock)
    crawler.answer("bad.com", *[500] * 10)
    crawler.answer("ok.com", *[200] * 10)
    breaker.apply(breaker.plan(breaker.observe()))  # loads the script
    crawler.answer("worse.com", *[500] * 10)
    before = CountingConnection.sent
    assert len(breaker.evaluate()) == 1
    after_change = CountingConnection.sent
    assert breaker.evaluate() == []
    assert (after_change - before, CountingConnection.sent - after_change) == (3, 2)


def test_error_statuses_take_codes_classes_and_ranges() -> None:
    errors = ErrorStatuses.parse([0, "403", "5xx", "520-530"])
    assert [status in errors for status in (0, 200, 403, 404, 500, 599, 520, 600)] == \
        [True, False, True, False, True, True, True, False]


@pytest.mark.parametrize("entry", ["5x", "600-500", "abc", "4xxx"])
def test_an_unreadable_error_status_is_refused_by_name(entry: str) -> None:
    with pytest.raises(SettingsError, match=entry):
        ErrorStatuses.parse([entry])


def test_halt_after_more_statuses_than_are_kept_is_refused() -> None:
    with pytest.raises(SettingsError, match="CIRCUIT_BREAKER_HALT_AFTER"):
        BreakerPolicy.from_settings(settings(CIRCUIT_BREAKER_HALT_AFTER=60))


# --- the crawler's inputs: failures without a response, Retry-After --------------------

def stats_middleware(client: redis.Redis, clock: ManualClock,
                     max_s: float = 3600) -> tuple[ResponseStatsMiddleware, Crawler]:
    crawler = Crawler(client, clock)
    pauser = RetryAfterPauser(DomainPauses(client, clock=clock), max_s=max_s)
    return ResponseStatsMiddleware(crawler.stats, 5.0, no_response=(DownloadTimeoutError,),
                                   retry_after=pauser), crawler


def crawl_request(url: str) -> Request:
    return Request(url, meta={"crawlid": "c1"})


def test_a_timeout_is_recorded_as_no_response_under_the_registered_domain(
        redis_client: redis.Redis, clock: ManualClock) -> None:
    middleware, crawler = stats_middleware(redis_client, clock)
    middleware.process_exception(crawl_request("http://www.bad.co.uk/x"), DownloadTimeoutError())
    middleware.process_exception(crawl_request("http://www.bad.co.uk/y"), IgnoreRequest())
    crawler.stats.flush()
    assert redis_client.lrange(keys.crawler_domain_last_statuses("bad.co.uk"), 0, -1) == [b"0"]


@pytest.mark.parametrize(("status", "header", "paused_ms"), [
    (429, b"5", 5_000), (503, b"7", 7_000), (429, b"99999", 3_600_000), (500, b"5", None),
    (429, b"soon", None), (429, None, None)])
def test_retry_after_on_429_or_503_pauses_the_domain_cluster_wide(
        redis_client: redis.Redis, clock: ManualClock, status: int, header: bytes | None,
        paused_ms: int | None) -> None:
    middleware, _ = stats_middleware(redis_client, clock)
    headers = {"Retry-After": header} if header is not None else {}
    request = crawl_request("http://shop.example.com/p")
    middleware.process_response(request, Response(request.url, status=status, headers=headers))
    expected = None if paused_ms is None else str(clock.now_ms + paused_ms).encode()
    assert redis_client.hget(keys.domain_paused(), "example.com") == expected


def test_retry_after_is_ignored_when_its_maximum_is_zero(
        redis_client: redis.Redis, clock: ManualClock) -> None:
    middleware, _ = stats_middleware(redis_client, clock, max_s=0)
    request = crawl_request("http://example.com/p")
    middleware.process_response(request, Response(request.url, status=429,
                                                   headers={"Retry-After": "5"}))
    assert redis_client.hgetall(keys.domain_paused()) == {}


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now_s = 1_445_412_400.0  # Wed, 21 Oct 2015 07:26:40 GMT
    assert [retry_after_s(value, now_s) for value in
            ("120", " 3 ", "Wed, 21 Oct 2015 07:28:00 GMT", "Wed, 21 Oct 2015 07:20:00 GMT",
             "tomorrow", "-5")] == [120.0, 3.0, 80.0, -400.0, None, None]
