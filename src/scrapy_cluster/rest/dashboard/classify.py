"""Why a domain is not crawled faster, and when its backlog drains: pure functions, no I/O.

``bottleneck`` names the one thing that limits a domain right now:

- ``halted`` / ``paused``: the circuit breaker, an operator or a ``Retry-After`` stopped it;
- ``blacklisted``: the domain configuration refuses it (its queue is never popped);
- ``out_of_work``: nothing queued;
- ``no_crawler``: work is queued, but no live crawler runs a spider it is queued for (no
  crawler heartbeat of the spider younger than HEARTBEAT_TIMEOUT): it waits for one to start;
- ``throttle_bound``: work is queued but the throttle is what limits it: the frontier will not
  dispatch the domain yet (its ready score is in the future, or it became due less than
  ``due_lag_ms`` ago), or the achieved rate is at least ``THROTTLE_NEAR`` of the limit, or the
  limit is 0;
- ``worker_bound``: work is queued, the domain has been allowed for longer than
  ``due_lag_ms`` (or no live crawler has asked for work of its spider yet) and it runs below
  its limit: the crawlers do not pop it as fast as the throttle would allow.
"""

from __future__ import annotations

HALTED, PAUSED, ACTIVE = "halted", "paused", "active"
BLACKLISTED = "blacklisted"
OUT_OF_WORK, THROTTLE_BOUND, WORKER_BOUND = "out_of_work", "throttle_bound", "worker_bound"
NO_CRAWLER = "no_crawler"
THROTTLE_NEAR = 0.9
"""Achieved rate / limit from which a domain counts as running at its limit."""
DUE_LAG_MS = 500
"""How long a domain may stay due before its crawlers, not the throttle, are to blame."""


def bottleneck(*, backlog: int, rate_rps: float, limit_rps: float | None,
               ready_at_ms: float | None, now_ms: float, state: str = ACTIVE,
               blacklisted: bool = False, served: bool = True,
               due_lag_ms: float = DUE_LAG_MS) -> str:
    """The domain's bottleneck (module docstring). ``limit_rps`` None: not throttled;
    ``ready_at_ms`` None: no crawler view has the domain in its ready set; ``served``: a live
    crawler runs a spider the domain has work for."""
    if state in (HALTED, PAUSED):
        return state
    if blacklisted:
        return BLACKLISTED
    if backlog <= 0:
        return OUT_OF_WORK
    if not served:
        return NO_CRAWLER
    if limit_rps is not None and (limit_rps <= 0 or rate_rps >= THROTTLE_NEAR * limit_rps):
        return THROTTLE_BOUND
    if ready_at_ms is not None and ready_at_ms > now_ms - due_lag_ms:
        return THROTTLE_BOUND
    return WORKER_BOUND


def drain_seconds(backlog: int, rate_rps: float) -> float | None:
    """Seconds until ``backlog`` is gone at the achieved rate (responses per second over the
    status window): ``backlog / rate``; 0 with nothing queued; None while the rate is 0 (no
    estimate: it never drains at that pace)."""
    if backlog <= 0:
        return 0.0
    if rate_rps <= 0:
        return None
    return backlog / rate_rps


def domain_state(*, paused_until_ms: int | None, breaker_state: str | None, now_ms: float,
                 halt_until_ms: int) -> str:
    """``halted``, ``paused`` or ``active`` from the pause entry (``domain-config:paused``) and
    the circuit breaker's recorded state."""
    if breaker_state == HALTED or (paused_until_ms is not None
                                   and paused_until_ms >= halt_until_ms):
        return HALTED
    if paused_until_ms is not None and paused_until_ms > now_ms:
        return PAUSED
    return ACTIVE
