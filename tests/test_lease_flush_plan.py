"""LeaseState plans each flush: what to release, what to acknowledge, which funnel counts go
with the acknowledgement (pure: no frontier, no Redis)."""

from __future__ import annotations

import logging

import pytest

from scrapy_cluster.crawler.common.funnel import FunnelCounter
from scrapy_cluster.crawler.common.lease_state import FlushPlan, LeaseState

CRAWL = {"spiderid": "link", "crawlid": "c1"}


def state_holding(*lease_ids: str, funnel: FunnelCounter | None = None) -> LeaseState:
    state = LeaseState(logger=logging.getLogger("test.lease_plan"), funnel=funnel)
    for lease_id in lease_ids:
        state.hold(lease_id, {"url": f"http://a.test/{lease_id}", **CRAWL})
    return state


def test_the_plan_releases_the_given_back_and_acks_the_finished_leases() -> None:
    state = state_holding("a", "b", "c")
    state.finish("a")
    state.give_back("b")
    assert state.plan_flush() == FlushPlan(release=["b"], ack=["a"])
    assert (state.held_count, state.pending_count) == (1, 0)


def test_a_lease_still_held_is_in_no_plan() -> None:
    state = state_holding("a")
    assert state.plan_flush() == FlushPlan(release=[], ack=[])
    assert state.held_count == 1


def test_the_next_plan_is_empty_once_a_plan_was_taken() -> None:
    state = state_holding("a", "b")
    state.finish("a")
    state.give_back("b")
    state.plan_flush()
    assert state.plan_flush() == FlushPlan(release=[], ack=[])


def test_a_failed_release_is_planned_again_first_at_the_next_flush() -> None:
    state = state_holding("a", "b")
    state.give_back("a")
    state.release_failed(state.plan_flush())
    state.give_back("b")
    assert state.plan_flush().release == ["a", "b"]


def test_a_failed_delivery_releases_the_planned_acks() -> None:
    state = state_holding("a", "b")
    state.finish("a")
    state.finish("b")
    plan = state.plan_flush()
    assert state.delivery_failed(plan, RuntimeError("bus down")) == ["a", "b"]
    assert state.pending_count == 0


def test_the_ack_carries_the_funnel_counts_made_until_it_is_sent() -> None:
    funnel = FunnelCounter()
    state = state_holding("a", funnel=funnel)
    funnel.add(CRAWL, "fetched:200")
    state.finish("a")
    plan = state.plan_flush()
    funnel.add(CRAWL, "delivered")  # counted by the bus confirmation, after the plan
    assert plan.ack == ["a"]
    assert state.take_counts() == {("link", "c1"): {"fetched:200": 1, "delivered": 1}}
    assert funnel.take() == {}


def test_a_failed_ack_keeps_its_counts_for_the_next_flush() -> None:
    funnel = FunnelCounter()
    state = state_holding("a", funnel=funnel)
    funnel.add(CRAWL, "fetched:200")
    state.finish("a")
    plan = state.plan_flush()
    counts = state.take_counts()
    state.ack_failed(plan, counts, ConnectionError("Connection refused"))
    assert state.take_counts() == {("link", "c1"): {"fetched:200": 1}}
    assert state.pending_count == 0  # the leases are left to the reaper


def test_without_a_funnel_the_ack_carries_no_counts() -> None:
    assert state_holding().take_counts() == {}


def test_a_postponed_ack_is_planned_again_before_later_leases() -> None:
    state = state_holding("a", "b")
    state.finish("a")
    plan = state.plan_flush()
    state.finish("b")
    state.ack_postponed(plan)
    assert state.plan_flush().ack == ["a", "b"]


def test_shutdown_takes_every_held_and_given_back_lease_but_not_the_finished() -> None:
    state = state_holding("a", "b", "c")
    state.give_back("a")
    state.finish("c")
    assert state.take_all_held() == ["b", "a"]
    assert state.plan_flush() == FlushPlan(release=[], ack=["c"])


@pytest.mark.parametrize("lease_id", [None, "unknown"])
def test_finishing_or_giving_back_a_lease_not_held_plans_nothing(lease_id: str | None) -> None:
    state = state_holding("a")
    state.finish(lease_id)
    assert state.give_back(lease_id) is False
    assert state.plan_flush() == FlushPlan(release=[], ack=[])
