"""The dashboard's answer to "why is this domain not faster?" and its drain estimate."""

from __future__ import annotations

from scrapy_cluster.frontier.pause import HALT_UNTIL_MS
from scrapy_cluster.rest.dashboard import classify
from scrapy_cluster.rest.dashboard.records import parse_lease

NOW_MS = 1_700_000_000_000


def why(**overrides: object) -> str:
    values: dict[str, object] = {"backlog": 10, "rate_rps": 0.1, "limit_rps": 1.0,
                                 "ready_at_ms": NOW_MS - 5_000, "now_ms": NOW_MS}
    values.update(overrides)
    return classify.bottleneck(**values)  # type: ignore[arg-type]


def test_a_domain_with_nothing_queued_is_out_of_work() -> None:
    assert why(backlog=0, rate_rps=0.0) == classify.OUT_OF_WORK


def test_a_domain_not_yet_allowed_is_throttle_bound() -> None:
    assert why(ready_at_ms=NOW_MS + 3_000) == classify.THROTTLE_BOUND


def test_a_domain_that_just_became_due_is_throttle_bound() -> None:
    assert why(ready_at_ms=NOW_MS - classify.DUE_LAG_MS + 1) == classify.THROTTLE_BOUND


def test_a_domain_near_its_limit_is_throttle_bound_even_when_due() -> None:
    assert why(rate_rps=0.9, limit_rps=1.0) == classify.THROTTLE_BOUND


def test_a_domain_with_a_zero_limit_is_throttle_bound() -> None:
    assert why(limit_rps=0.0, rate_rps=0.0) == classify.THROTTLE_BOUND


def test_a_domain_due_for_a_while_below_its_limit_is_worker_bound() -> None:
    assert why(ready_at_ms=NOW_MS - classify.DUE_LAG_MS - 1, rate_rps=0.5) == \
        classify.WORKER_BOUND


def test_a_domain_no_crawler_asks_for_is_worker_bound() -> None:
    assert why(ready_at_ms=None) == classify.WORKER_BOUND


def test_an_unthrottled_due_domain_is_worker_bound_whatever_its_rate() -> None:
    assert why(limit_rps=None, rate_rps=500.0) == classify.WORKER_BOUND


def test_paused_halted_and_blacklisted_come_before_the_backlog() -> None:
    assert why(state=classify.PAUSED, backlog=0) == classify.PAUSED
    assert why(state=classify.HALTED) == classify.HALTED
    assert why(blacklisted=True, backlog=0) == classify.BLACKLISTED


def test_the_backlog_drains_at_the_achieved_rate() -> None:
    assert classify.drain_seconds(120, 2.0) == 60.0


def test_an_empty_backlog_is_drained_and_a_zero_rate_has_no_estimate() -> None:
    assert classify.drain_seconds(0, 0.0) == 0.0
    assert classify.drain_seconds(5, 0.0) is None


def test_domain_state_reads_pauses_and_the_breaker() -> None:
    def state(until: int | None, breaker: str | None = None) -> str:
        return classify.domain_state(paused_until_ms=until, breaker_state=breaker,
                                     now_ms=NOW_MS, halt_until_ms=HALT_UNTIL_MS)

    assert state(HALT_UNTIL_MS) == classify.HALTED
    assert state(None, "halted") == classify.HALTED
    assert state(NOW_MS + 1) == classify.PAUSED
    assert state(NOW_MS - 1) == classify.ACTIVE
    assert state(None) == classify.ACTIVE


def test_a_lease_record_packed_like_the_pop_script_is_read() -> None:
    item = b'12 {"u":"https://x.test/","a":"app-1"}'
    record = (b"\xa4link" + b"\xa6x.test" + b"\xd1\xff\xf6" + b"\xa2c1"
              + b"\xd9" + bytes([len(item)]) + item)
    lease = parse_lease(record)
    assert lease is not None
    assert (lease.spiderid, lease.domain, lease.crawlid, lease.appid) == \
        ("link", "x.test", "c1", "app-1")


def test_a_lease_record_of_another_shape_is_ignored() -> None:
    assert parse_lease(b"\xc0") is None
    assert parse_lease(b"\xa4link") is None
