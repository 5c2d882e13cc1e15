"""The waiting rule shared by the sync and asyncio frontiers (pure: no server, no clock)."""

from __future__ import annotations

from scrapy_cluster.frontier import PopResult
from scrapy_cluster.frontier.waiting import (
    DEFAULT_REDIS_TIMER_SLACK_S,
    MAX_REDIS_TIMER_SLACK_S,
    WAIT_SLICE_S,
    WaitStep,
    deadline_of,
    learn_slack,
    next_step,
    wait_deadline,
)

SLACK = 0.1


def test_nothing_queued_waits_one_slice_for_a_token() -> None:
    assert next_step(None, 100.0, SLACK) == WaitStep(blpop_s=WAIT_SLICE_S)


def test_a_far_deadline_blocks_on_tokens_until_the_slack_before_it() -> None:
    assert next_step(102.0, 100.0, SLACK) == WaitStep(blpop_s=1.9)


def test_a_deadline_beyond_one_slice_blocks_one_slice_at_a_time() -> None:
    assert next_step(130.0, 100.0, SLACK) == WaitStep(blpop_s=WAIT_SLICE_S)


def test_the_last_stretch_is_slept_locally_to_the_deadline() -> None:
    step = next_step(100.08, 100.0, SLACK)
    assert (step.blpop_s, round(step.sleep_s, 6), step.done) == (0.0, 0.08, False)


def test_a_passed_deadline_is_done() -> None:
    assert next_step(99.0, 100.0, SLACK).done
    assert next_step(100.0, 100.0, SLACK).done


def test_blpop_timeouts_are_whole_milliseconds_and_never_zero() -> None:
    assert next_step(100.3456789, 100.0, SLACK).blpop_s == 0.245
    assert next_step(100.1011, 100.0, SLACK).blpop_s == 0.001


def test_slack_grows_to_the_overshoot_seen_and_never_shrinks() -> None:
    assert learn_slack(DEFAULT_REDIS_TIMER_SLACK_S, 0.5, 0.52) == DEFAULT_REDIS_TIMER_SLACK_S
    grown = learn_slack(DEFAULT_REDIS_TIMER_SLACK_S, 0.5, 0.9)
    assert round(grown, 6) == 0.41
    assert learn_slack(grown, 0.5, 0.5) == grown


def test_slack_is_capped() -> None:
    assert learn_slack(0.1, 1.0, 30.0) == MAX_REDIS_TIMER_SLACK_S


def test_a_short_pop_waits_until_its_ready_moment() -> None:
    result = PopResult(requests=[], wait_s=0.4, ready_at_s=deadline_of(0.4, 50.0))
    assert wait_deadline(result) == 50.4
    assert wait_deadline(PopResult(requests=[], wait_s=None)) is None
    assert wait_deadline(12.5) == 12.5
    assert wait_deadline(None) is None
