"""The re-crawl rules of ``crawler/common/revisit.py``: policy, state string, conditional headers
and the verdict on each fetch (pure: no server)."""

from __future__ import annotations

import logging
import math
from email.utils import formatdate
from typing import Any

import pytest

from scrapy_cluster.crawler.common import meta
from scrapy_cluster.crawler.common.lease_state import FlushPlan, LeaseState
from scrapy_cluster.crawler.common.revisit import (
    RecrawlPolicy,
    RevisitState,
    change_rate,
    conditional_headers,
    digest,
    judge,
    missing_headers,
    refetch_of,
)
from scrapy_cluster.frontier import Revisit

NOW = 1_700_000_000
BODY = b"<html>same</html>"
LM_TEXT = "Wed, 21 Oct 2015 07:28:00 GMT"
LM = 1445412480


def policy(**fields: Any) -> RecrawlPolicy:
    parsed = RecrawlPolicy.from_request({"url": "http://a.test/", "recrawl": fields})
    assert parsed is not None
    return parsed


def state(interval_s: int = 100, fetches: int = 1, body: bytes | None = BODY,
          last_modified_s: int | None = None, etag: str | None = None) -> RevisitState:
    return RevisitState(interval_s, fetches, digest(body) if body is not None else "",
                        last_modified_s, etag)


def verdict_of(rules: RecrawlPolicy, previous: RevisitState | None, status: int | None = 200,
               body: bytes = BODY, headers: dict[str, str] | None = None, depth: int = 0,
               now_s: float = NOW) -> Any:
    return judge(rules, previous, depth=depth, status=status, headers=headers or {}, body=body,
                 now_s=now_s)


# --- the schedule ------------------------------------------------------------------------------

def test_a_fixed_interval_schedules_every_fetch_after_that_interval() -> None:
    first = verdict_of(policy(interval=60), None)
    second = verdict_of(policy(interval=60), first.state, body=b"changed")
    assert (first.revisit.delay_ms, first.fetch, first.changed) == (60_000, 1, True)
    assert (second.revisit.delay_ms, second.fetch, second.changed) == (60_000, 2, True)


@pytest.mark.parametrize(("start", "body", "expected_s"), [
    (100, BODY, 140),           # not modified: x (1 + 0.4)
    (100, b"changed", 80),      # changed: x (1 - 0.2)
    (280, BODY, 300),           # grows no further than max
    (12, b"changed", 10),       # shrinks no further than min
    (1, BODY, 2),               # a rounding that would not move moves by one second
])
def test_adaptive_intervals_grow_when_unchanged_and_shrink_when_changed_within_bounds(
        start: int, body: bytes, expected_s: int) -> None:
    rules = policy(adaptive={"min": 1 if start == 1 else 10, "max": 300})
    assert verdict_of(rules, state(interval_s=start), body=body).state.interval_s == expected_s


def test_adaptive_without_interval_starts_at_min_and_with_it_at_interval() -> None:
    assert verdict_of(policy(adaptive={"min": 30, "max": 300}), None).revisit.delay_ms == 30_000
    assert verdict_of(policy(interval=90, adaptive={"min": 30, "max": 300}),
                      None).revisit.delay_ms == 90_000


def test_an_error_keeps_the_url_scheduled_by_the_not_modified_rule() -> None:
    rules = policy(adaptive={"min": 10, "max": 300, "inc": 0.5})
    previous = state(interval_s=100, etag='"v1"')
    for status in (500, 404, None):
        verdict = verdict_of(rules, previous, status=status, body=b"")
        assert (verdict.revisit.delay_ms, verdict.state.digest, verdict.state.etag,
                verdict.changed, verdict.not_modified) == \
            (150_000, previous.digest, '"v1"', False, False)


def test_no_fetch_is_scheduled_after_until() -> None:
    rules = policy(interval=60, until=NOW + 100)
    assert verdict_of(rules, None, now_s=NOW).revisit is not None
    assert verdict_of(rules, None, now_s=NOW + 41).revisit is None


def test_max_cycles_counts_the_fetches_after_the_first() -> None:
    rules = policy(interval=60, max_cycles=2)
    first = verdict_of(rules, None)
    second = verdict_of(rules, first.state)
    third = verdict_of(rules, second.state)
    assert [v.fetch for v in (first, second, third)] == [1, 2, 3]
    assert [v.revisit is not None for v in (first, second, third)] == [True, True, False]


def test_links_false_schedules_the_seed_only() -> None:
    rules = policy(interval=60, links=False)
    assert verdict_of(rules, None, depth=0).revisit is not None
    assert verdict_of(rules, None, depth=1).revisit is None


def test_the_revisit_carries_the_encoded_new_state() -> None:
    verdict = verdict_of(policy(interval=60), None, headers={"ETag": '"a,b"'})
    assert verdict.revisit == Revisit(60_000, verdict.state.encode())
    assert RevisitState.parse(verdict.revisit.state) == verdict.state


# --- changed or not ----------------------------------------------------------------------------

def test_a_304_is_not_modified_keeps_the_digest_and_takes_the_validators_it_sends() -> None:
    previous = state(etag='"v1"', last_modified_s=LM)
    verdict = verdict_of(policy(interval=60), previous, status=304, body=b"",
                         headers={"etag": '"v2"'})
    assert (verdict.not_modified, verdict.changed) == (True, False)
    assert (verdict.state.digest, verdict.state.etag, verdict.state.last_modified_s) == \
        (previous.digest, '"v2"', None)


@pytest.mark.parametrize(("headers", "kept"), [
    ({"ETag": '"v1"', "Last-Modified": LM_TEXT}, ('"v1"', None)),
    ({"Last-Modified": LM_TEXT}, (None, LM)),
    ({"ETag": "has space", "Last-Modified": LM_TEXT}, (None, LM)),
])
def test_a_last_modified_is_kept_only_without_an_etag(
        headers: dict[str, str], kept: tuple[str | None, int | None]) -> None:
    """RFC 9110 13.1.3: a server ignores If-Modified-Since when If-None-Match is sent."""
    verdict = verdict_of(policy(interval=60), None, status=200, body=b"x", headers=headers)
    assert (verdict.state.etag, verdict.state.last_modified_s) == kept


def test_a_200_with_the_same_body_is_not_modified() -> None:
    verdict = verdict_of(policy(interval=60), state(), status=200, body=BODY)
    assert (verdict.not_modified, verdict.changed) == (True, False)


def test_without_validators_the_digest_decides() -> None:
    previous = state()
    assert verdict_of(policy(interval=60), previous, body=b"other").changed
    assert verdict_of(policy(interval=60), previous, body=BODY).not_modified
    assert (previous.etag, previous.last_modified_s) == (None, None)


def test_a_200_keeps_only_the_validators_it_sends() -> None:
    verdict = verdict_of(policy(interval=60), state(etag='"old"'), body=b"new",
                         headers={"Last-Modified": LM_TEXT})
    assert (verdict.state.etag, verdict.state.last_modified_s) == (None, LM)


@pytest.mark.parametrize("etag", ['"has space"', '"' + "x" * 70 + '"', '"caf\u00e9"', ""])
def test_an_etag_that_cannot_be_carried_is_dropped(etag: str) -> None:
    verdict = verdict_of(policy(interval=60), None, headers={"ETag": etag})
    assert verdict.state.etag is None
    assert verdict.state.digest == digest(BODY)


# --- the state string --------------------------------------------------------------------------

def test_the_state_string_is_base36_digest_and_the_etag_last() -> None:
    text = RevisitState(3600, 37, "0a1b2c3d", LM, 'W/"x,y"').encode()
    assert text == '2s0,11,0a1b2c3d,nwk7eo,W/"x,y"'
    assert RevisitState.parse(text) == RevisitState(3600, 37, "0a1b2c3d", LM, 'W/"x,y"')
    assert RevisitState.parse("a,1,,,") == RevisitState(10, 1)


@pytest.mark.parametrize("text", [
    None, "", "garbage", "1,1,zzzzzzzz,,", "0,1,,,", "1,0,,,", "1,1,,,has space", "1,1,,-5,",
    "1,1,0a1b2c3,,", "x!,1,,,",
])
def test_a_bad_state_string_is_a_first_fetch(text: str | None) -> None:
    assert RevisitState.parse(text) is None
    assert verdict_of(policy(interval=60), RevisitState.parse(text)).fetch == 1


def test_a_state_fits_the_frontiers_limit() -> None:
    longest = RevisitState(10**8, 10**6, "0a1b2c3d", 2**40, "e" * 64).encode()
    assert len(longest) <= 120 and " " not in longest


# --- policy, headers ---------------------------------------------------------------------------

@pytest.mark.parametrize("recrawl", [
    "daily", {}, {"interval": 0}, {"interval": True}, {"adaptive": {"min": 5}},
    {"adaptive": {"min": 50, "max": 10}}, {"adaptive": {"min": 1, "max": 2, "dec": 1}},
    {"interval": 5, "links": "yes"}, {"interval": 5, "not_modified": "body"},
    {"interval": 5, "max_cycles": 0},
])
def test_a_malformed_recrawl_gives_no_policy_and_a_warning(
        recrawl: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert RecrawlPolicy.from_request({"url": "http://a.test/", "recrawl": recrawl}) is None
    assert "malformed recrawl" in caplog.text


def test_defaults_follow_links_and_give_a_not_modified_item() -> None:
    rules = policy(adaptive={"min": 1, "max": 9})
    assert (rules.links, rules.not_modified_item, rules.adaptive.inc, rules.adaptive.dec) == \
        (True, True, 0.4, 0.2)


def test_conditional_headers_send_the_kept_validators() -> None:
    assert conditional_headers(None) == {}
    assert conditional_headers(state()) == {}
    assert conditional_headers(state(etag='"v1"', last_modified_s=LM)) == \
        {"If-None-Match": '"v1"', "If-Modified-Since": LM_TEXT}
    assert conditional_headers(state(last_modified_s=LM)) == {
        "If-Modified-Since": formatdate(LM, usegmt=True)}


def test_a_header_the_request_sends_itself_is_not_replaced() -> None:
    assert missing_headers(state(etag='"v1"', last_modified_s=LM), ["if-none-match"]) == \
        {"If-Modified-Since": LM_TEXT}


def test_a_retry_carries_the_state_when_the_lease_has_none() -> None:
    carried = state(etag='"v1"')
    request = {"url": "http://a.test/", "recrawl": {"interval": 5},
               **refetch_of({"recrawl": {"interval": 5}}, carried.encode(), []).retry_fields()}
    refetch = refetch_of(request, None, [])
    assert refetch is not None and refetch.state == carried
    assert refetch.headers == {"If-None-Match": '"v1"'}


# --- inheritance and the lease plan ------------------------------------------------------------

def test_links_inherit_recrawl_only_while_links_is_true() -> None:
    following = {"crawlid": "c", "curdepth": 0, "recrawl": {"interval": 5}}
    seeds_only = {"crawlid": "c", "curdepth": 0, "recrawl": {"interval": 5, "links": False}}
    assert meta.inherit(following, {})["recrawl"] == {"interval": 5}
    assert "recrawl" not in meta.inherit(seeds_only, {})


def test_a_finished_lease_is_acked_with_its_revisit_and_a_given_back_one_carries_none() -> None:
    leases = LeaseState(logger=logging.getLogger("test.revisit"))
    for lease_id in ("a", "b", "c"):
        leases.hold(lease_id, {"url": f"http://a.test/{lease_id}"})
    leases.schedule("a", Revisit(5000, "5,1,,,"))
    leases.schedule("b", Revisit(5000, "5,1,,,"))
    leases.finish("a")
    leases.give_back("b")
    leases.finish("c")
    assert leases.plan_flush() == FlushPlan(release=["b"], ack=["a", "c"],
                                            revisits={"a": Revisit(5000, "5,1,,,")})
    assert leases.plan_flush().revisits == {}


def test_a_postponed_ack_keeps_its_revisits() -> None:
    leases = LeaseState(logger=logging.getLogger("test.revisit"))
    leases.hold("a", {"url": "http://a.test/a"})
    leases.schedule("a", Revisit(1000, "1,1,,,"))
    leases.finish("a")
    leases.ack_postponed(leases.plan_flush())
    assert leases.plan_flush().revisits == {"a": Revisit(1000, "1,1,,,")}


# --- the change-rate estimator ---------------------------------------------------------------

def test_the_estimate_follows_cho_and_garcia_molina() -> None:
    assert change_rate(10, 5, 1000.0) == pytest.approx(-math.log(5.5 / 10.5) / 100)
    assert change_rate(4, 0, 400.0) == pytest.approx(0.5 / (4.5 * 100))


def test_an_estimating_policy_keeps_its_history_and_sets_sqrt_target_over_rate() -> None:
    rules = policy(interval=100, adaptive={"min": 10, "max": 10_000, "estimate": True})
    first = verdict_of(rules, None, status=200, body=b"a", now_s=1000.0)
    assert (first.state.interval_s, first.state.changes, first.state.first_s) == (100, 0, 1000)
    assert RevisitState.parse(first.state.encode()) == first.state
    second = verdict_of(rules, first.state, status=200, body=b"b", now_s=1100.0)
    assert (second.state.changes, second.state.interval_s) == (1, 80)  # too little history
    third = verdict_of(rules, second.state, status=304, body=b"", now_s=1180.0)
    rate = change_rate(2, 1, 180.0)
    assert (third.state.changes, third.state.fetches) == (1, 3)
    assert third.state.interval_s == round(math.sqrt(100 / rate))


def test_a_page_that_changes_at_every_fetch_is_fetched_more_often_than_a_quiet_one() -> None:
    rules = policy(interval=100, adaptive={"min": 10, "max": 10_000, "estimate": True})
    busy = quiet = None
    now = 0.0
    for fetch in range(8):
        busy = verdict_of(rules, busy.state if busy else None, status=200,
                          body=str(fetch).encode(), now_s=now)
        quiet = verdict_of(rules, quiet.state if quiet else None, status=304 if fetch else 200,
                           body=b"same", now_s=now)
        now += 100
    assert busy is not None and quiet is not None
    assert 10 <= busy.state.interval_s < 100 < quiet.state.interval_s <= 10_000
