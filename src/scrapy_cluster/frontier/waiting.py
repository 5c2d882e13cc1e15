"""When to ask the frontier again: the one waiting rule every engine follows.

A pop that hands out fewer requests than asked says when the earliest throttled domain of the
view may dispatch (``PopResult.wait_s``; ``PopResult.ready_at_s`` is the same moment on this
process's monotonic clock). A waiting engine must ask again at that moment, not at some recheck
interval, and earlier if an enqueue, a release or a domain config change pushed a wake token
on ``<spiderid>:wake``. ``Frontier.wait_for_work(view, result)`` and its asyncio twin do exactly
that; this module holds the pure part they share, so the two cannot drift.

Why not just ``BLPOP wake timeout=wait_s``: Redis times blocking commands out on its own
timer (``serverCron``, every 1000/hz ms, 100 ms with the default ``hz 10``), so a BLPOP asked
for 50 ms returns after up to 150 ms. Under a moderated throttle every late wake delays every
later request of the domain, and at one request per 200 ms that alone would cost a third of
the allowed rate. So the wait blocks on the wake list only until ``slack_s`` before the
deadline and sleeps the rest on the local clock. ``slack_s`` starts at
``DEFAULT_REDIS_TIMER_SLACK_S`` and grows to the largest overshoot of a timed-out BLPOP this
process has seen (a server with a lower ``hz``), capped at ``MAX_REDIS_TIMER_SLACK_S``.

Nothing queued for the view (``wait_s`` None): one blocking slice of ``WAIT_SLICE_S``; the
caller pops again afterwards (one pop per 5 s per idle process, never a busy loop).
"""

from __future__ import annotations

from dataclasses import dataclass

from scrapy_cluster.frontier.model import PopResult

WAIT_SLICE_S = 5.0
"""Longest single BLPOP; an idle process pops once per slice."""
DEFAULT_REDIS_TIMER_SLACK_S = 0.11
"""How late Redis may time out a BLPOP with the default ``hz 10`` (100 ms), plus 10 ms."""
MAX_REDIS_TIMER_SLACK_S = 1.05
"""Largest slack learned (``hz 1``, the lowest Redis allows)."""
MIN_BLPOP_S = 0.001
"""Redis's finest BLPOP timeout; shorter remaining waits are slept locally."""


@dataclass(frozen=True)
class WaitStep:
    """What to do next: BLPOP the wake list for ``blpop_s`` (> 0), else sleep ``sleep_s`` locally
    and stop. ``done`` when the deadline has passed."""

    blpop_s: float = 0.0
    sleep_s: float = 0.0

    @property
    def done(self) -> bool:
        return self.blpop_s <= 0 and self.sleep_s <= 0


def deadline_of(wait_s: float | None, received_at_s: float) -> float | None:
    """The monotonic moment a pop received at ``received_at_s`` may be repeated (None: unknown)."""
    return None if wait_s is None else received_at_s + wait_s


def next_step(deadline_s: float | None, now_s: float, slack_s: float) -> WaitStep:
    """The next step of a wait that ends at ``deadline_s`` (None: one slice, then the caller
    pops again) or at the first wake token."""
    if deadline_s is None:
        return WaitStep(blpop_s=WAIT_SLICE_S)
    remaining_s = deadline_s - now_s
    if remaining_s <= 0:
        return WaitStep()
    blpop_s = min(remaining_s - slack_s, WAIT_SLICE_S)
    if blpop_s >= MIN_BLPOP_S:
        return WaitStep(blpop_s=_blpop_timeout(blpop_s))
    return WaitStep(sleep_s=remaining_s)


def learn_slack(slack_s: float, asked_s: float, took_s: float) -> float:
    """The slack after a BLPOP asked for ``asked_s`` timed out after ``took_s``: grows to the
    overshoot seen (plus 10 ms), never shrinks, capped."""
    overshoot_s = took_s - asked_s + 0.01
    return min(MAX_REDIS_TIMER_SLACK_S, max(slack_s, overshoot_s))


def _blpop_timeout(seconds: float) -> float:
    """BLPOP's timeout in whole milliseconds, never 0 (which would block forever)."""
    return max(MIN_BLPOP_S, int(seconds * 1000) / 1000)


def wait_deadline(until: PopResult | float | None) -> float | None:
    """The monotonic deadline of a wait: a short ``PopResult``'s ``ready_at_s``, a deadline
    given as such, or None (nothing queued, or nothing known)."""
    if isinstance(until, PopResult):
        return until.ready_at_s
    return until
