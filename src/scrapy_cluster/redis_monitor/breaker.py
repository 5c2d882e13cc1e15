"""The circuit breaker: pauses or halts a domain cluster-wide from the statuses crawlers record.

Inputs (written by the crawlers' ``ResponseStats``): ``crawler:domain_status:domains`` (index of
recently active domains), and per domain its status window and its last statuses. A domain
whose error share over CRAWLER_STATUS_WINDOW_S is above ERROR_TOLERANCE_PERCENT, with at least
CIRCUIT_BREAKER_MIN_RESPONSES statuses, is paused for CIRCUIT_BREAKER_COOLDOWN_S; a domain whose
last CIRCUIT_BREAKER_HALT_AFTER statuses are all errors is halted until ``resume``. Pausing
writes ``domain-config:paused``, which the frontier's pop obeys (nothing is dispatched, nothing
is lost). When a pause is over its state is removed and its end recorded in
``circuit-breaker:counted-from``, so the errors that caused it are not counted again.

Each state change is a compare-and-set script (``lua/circuit_breaker_transition.lua``): with two
Redis Monitors evaluating at once, a change is applied once and reported by one of them only.

Statuses are scored by the crawlers' wall clocks, so the breaker reads them by its own wall
clock (hosts are assumed NTP-synchronised); tests inject ``clock`` (epoch ms).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.config import DomainToucher
from scrapy_cluster.frontier.model import Clock
from scrapy_cluster.frontier.pause import HALT_UNTIL_MS
from scrapy_cluster.frontier.scripts import lua_source
from scrapy_cluster.statuses import ErrorStatuses

PAUSED, HALTED, CLOSED = "paused", "halted", "closed"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class BreakerPolicy:
    """The settings the breaker obeys (docs/settings.md, sections Crawler and Circuit breaker)."""

    window_ms: int = 60_000
    tolerance_percent: float = 10.0
    min_responses: int = 10
    cooldown_ms: int = 60_000
    halt_after: int = 50
    last_n: int = 50
    errors: ErrorStatuses = ErrorStatuses.parse([0, 403, 429, "5xx"])

    def __post_init__(self) -> None:
        if not 1 <= self.halt_after <= self.last_n:
            raise SettingsError(f"CIRCUIT_BREAKER_HALT_AFTER must be between 1 and "
                                f"CRAWLER_STATUS_LAST_N ({self.last_n}), got {self.halt_after}")
        if self.cooldown_ms <= 0 or self.window_ms <= 0 or self.min_responses < 1:
            raise SettingsError("CIRCUIT_BREAKER_COOLDOWN_S and CRAWLER_STATUS_WINDOW_S must be "
                                "positive and CIRCUIT_BREAKER_MIN_RESPONSES at least 1")

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> BreakerPolicy:
        return cls(window_ms=int(float(settings["CRAWLER_STATUS_WINDOW_S"]) * 1000),
                   tolerance_percent=float(settings["ERROR_TOLERANCE_PERCENT"]),
                   min_responses=int(settings["CIRCUIT_BREAKER_MIN_RESPONSES"]),
                   cooldown_ms=int(float(settings["CIRCUIT_BREAKER_COOLDOWN_S"]) * 1000),
                   halt_after=int(settings["CIRCUIT_BREAKER_HALT_AFTER"]),
                   last_n=int(settings["CRAWLER_STATUS_LAST_N"]),
                   errors=ErrorStatuses.parse(settings["CIRCUIT_BREAKER_ERROR_STATUSES"]))


@dataclass(frozen=True)
class BreakerEvent:
    """One state change. ``state``: ``paused``, ``halted``, or ``closed`` (a pause is over).
    ``error_share`` is a fraction (0.25 = 25 %) of ``responses`` counted in the window;
    ``until_ms``: end of the pause (closed: when it ended), None for a halt."""

    domain: str
    state: str
    reason: str
    error_share: float
    responses: int
    consecutive_errors: int
    until_ms: int | None


@dataclass(frozen=True)
class DomainStatuses:
    """A domain's statuses as read: those counted in the window, and its last N (oldest first)."""

    window: tuple[int, ...]
    last: tuple[int, ...]

    def errors(self, errors: ErrorStatuses) -> int:
        return sum(1 for status in self.window if status in errors)

    def consecutive_errors(self, errors: ErrorStatuses) -> int:
        count = 0
        for status in reversed(self.last):
            if status not in errors:
                break
            count += 1
        return count


@dataclass(frozen=True)
class Observation:
    now_ms: int
    statuses: dict[str, DomainStatuses]
    states: dict[str, bytes]
    paused: dict[str, int]


@dataclass(frozen=True)
class Transition:
    """A planned state change: applied only if the state is still ``expected`` (raw JSON)."""

    event: BreakerEvent
    expected: bytes
    new_state: bytes
    pause_until_ms: int | None = None
    counted_from_ms: int | None = None


class CircuitBreaker:
    """Evaluates the domains' statuses; pauses, halts and resumes domains (module docstring)."""

    def __init__(self, redis_client: redis.Redis, policy: BreakerPolicy, toucher: DomainToucher,
                 *, clock: Clock = wall_clock_ms) -> None:
        self.redis, self.policy, self.toucher, self.clock = redis_client, policy, toucher, clock
        self._transition = redis_client.register_script(
            lua_source("circuit_breaker_transition.lua"))
        self._resume = redis_client.register_script(lua_source("circuit_breaker_resume.lua"))

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], redis_client: redis.Redis,
                      clock: Clock | None = None) -> CircuitBreaker:
        """``clock`` (epoch ms) for tests; it is also the frontier's clock for the wake-up."""
        return cls(redis_client, BreakerPolicy.from_settings(settings),
                   Frontier.from_settings(settings, redis_client, clock=clock),
                   clock=clock or wall_clock_ms)

    # --- reading ------------------------------------------------------------------------
    def observe(self, *, with_paused: bool = False) -> Observation:
        """The active domains' statuses and the breaker's state. Two round trips (the index and
        state, then every active domain's window and last statuses in one pipeline)."""
        now, window_ms = int(self.clock()), self.policy.window_ms
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(keys.crawler_domain_status_domains(), now - window_ms, "+inf")
            pipe.hgetall(keys.circuit_breaker_state())
            pipe.zremrangebyscore(keys.circuit_breaker_counted_from(), "-inf", now - window_ms)
            pipe.zrange(keys.circuit_breaker_counted_from(), 0, -1, withscores=True)
            if with_paused:
                pipe.hgetall(keys.domain_paused())
            active, states, _, counted, *paused = pipe.execute()
        domains = [name.decode() for name in active]
        counted_from = {name.decode(): int(score) for name, score in counted}
        with self.redis.pipeline(transaction=False) as pipe:
            for domain in domains:
                since = max(now - window_ms, counted_from.get(domain, 0))
                pipe.zrangebyscore(keys.crawler_domain_status_window(domain), since, "+inf")
                pipe.lrange(keys.crawler_domain_last_statuses(domain), -self.policy.last_n, -1)
            replies = pipe.execute() if domains else []
        statuses = {domain: DomainStatuses(
            window=tuple(_status_of(member) for member in replies[2 * i]),
            last=tuple(int(value) for value in replies[2 * i + 1]))
            for i, domain in enumerate(domains)}
        return Observation(now, statuses, {name.decode(): raw for name, raw in states.items()},
                           {name.decode(): int(until) for name, until in
                            (paused[0] if paused else {}).items()})

    # --- evaluation -----------------------------------------------------------------------
    def evaluate(self) -> list[BreakerEvent]:
        """Pause, halt or end the pause of each domain that needs it; the changes this monitor
        made. Two round trips, plus one (all changes pipelined) when something changes."""
        return self.apply(self.plan(self.observe()))

    def plan(self, observation: Observation) -> list[Transition]:
        """The state changes ``observation`` calls for. No I/O."""
        planned = []
        for domain in sorted(set(observation.states) | set(observation.statuses)):
            raw = observation.states.get(domain, b"")
            state = orjson.loads(raw) if raw else None
            change = self._judge(domain, raw, state, observation)
            if change is not None:
                planned.append(change)
        return planned

    def _judge(self, domain: str, raw: bytes, state: dict[str, Any] | None,
               observation: Observation) -> Transition | None:
        now, policy = observation.now_ms, self.policy
        if state is not None and state["state"] == HALTED:
            return None
        if state is not None and state["until_ms"] <= now:
            event = BreakerEvent(domain, CLOSED, "cool-down over", 0.0, 0, 0, state["until_ms"])
            return Transition(event, raw, b"", counted_from_ms=state["until_ms"])
        statuses = observation.statuses.get(domain)
        if statuses is None:
            return None
        errors, responses = statuses.errors(policy.errors), len(statuses.window)
        share = errors / responses if responses else 0.0
        consecutive = statuses.consecutive_errors(policy.errors)
        if consecutive >= policy.halt_after:
            event = BreakerEvent(domain, HALTED, f"{consecutive} consecutive errors", share,
                                 responses, consecutive, None)
            return Transition(event, raw, _state_json(event, now, errors),
                              pause_until_ms=HALT_UNTIL_MS)
        if state is None and responses >= policy.min_responses \
                and errors * 100 > policy.tolerance_percent * responses:
            until = now + policy.cooldown_ms
            reason = (f"{errors} errors in {responses} responses ({share:.0%}) over "
                      f"{policy.window_ms / 1000:g} s > {policy.tolerance_percent:g} %")
            event = BreakerEvent(domain, PAUSED, reason, share, responses, consecutive, until)
            return Transition(event, raw, _state_json(event, now, errors), pause_until_ms=until)
        return None

    def apply(self, transitions: Sequence[Transition]) -> list[BreakerEvent]:
        """Apply each change whose domain state is still the one planned from; the events of
        those applied. ONE round trip (none for no change)."""
        if not transitions:
            return []
        now = int(self.clock())
        replies = self._run_transitions([
            [change.event.domain, change.expected, change.new_state,
             _optional(change.pause_until_ms), _optional(change.counted_from_ms), now]
            for change in transitions])
        events = []
        for change, (applied, until_ms) in zip(transitions, replies, strict=True):
            if applied:
                event = change.event
                if event.state == PAUSED:
                    event = replace(event, until_ms=int(until_ms))
                events.append(event)
        return events

    def _run_transitions(self, calls: list[list[Any]]) -> list[Any]:
        """One pipeline of EVALSHAs (redis-py's pipelined scripts would first send SCRIPT
        EXISTS); the script is loaded and the pipeline resent only after a Redis restart."""
        call_keys = [keys.circuit_breaker_state(), keys.domain_paused(),
                     keys.circuit_breaker_counted_from()]
        for attempt in range(2):
            with self.redis.pipeline(transaction=False) as pipe:
                for args in calls:
                    pipe.evalsha(self._transition.sha, len(call_keys), *call_keys, *args)
                try:
                    return pipe.execute()
                except redis.exceptions.NoScriptError:
                    if attempt:
                        raise
            self.redis.script_load(self._transition.script)
        raise AssertionError("unreachable")

    # --- operator ---------------------------------------------------------------------
    def resume(self, domain: str) -> bool:
        """End the domain's pause or halt, forget its statuses and wake the crawlers; True when
        it was paused or halted. Two round trips (the resume script, then the touch)."""
        was_paused = bool(self._resume(
            keys=[keys.circuit_breaker_state(), keys.domain_paused(),
                  keys.circuit_breaker_counted_from(), keys.crawler_domain_status_window(domain),
                  keys.crawler_domain_last_statuses(domain)],
            args=[domain, int(self.clock())]))
        self.toucher.touch_domain(domain)
        return was_paused

    def snapshot(self) -> dict[str, Any]:
        """For the monitoring line: per active domain ``successful``, ``error``,
        ``last_statuses`` (histogram ``{"200": n}`` of its last CRAWLER_STATUS_LAST_N) and
        ``state`` (``active``, ``paused``, ``halted``), under ``domains``; plus the sorted
        lists ``paused`` and ``halted`` (by the breaker, a Retry-After or an operator).
        Two round trips."""
        observation = self.observe(with_paused=True)
        halted, paused = _halted_and_paused(observation)
        domains = {}
        for domain, statuses in sorted(observation.statuses.items()):
            errors = statuses.errors(self.policy.errors)
            state = HALTED if domain in halted else PAUSED if domain in paused else "active"
            domains[domain] = {
                "successful": len(statuses.window) - errors, "error": errors,
                "last_statuses": {str(code): count for code, count in
                                  sorted(Counter(statuses.last).items())},
                "state": state}
        return {"domains": domains, "paused": sorted(paused), "halted": sorted(halted)}


def _halted_and_paused(observation: Observation) -> tuple[set[str], set[str]]:
    halted, paused = set(), set()
    for domain, raw in observation.states.items():
        state = orjson.loads(raw)
        if state["state"] == HALTED:
            halted.add(domain)
        elif state["until_ms"] > observation.now_ms:
            paused.add(domain)
    for domain, until_ms in observation.paused.items():
        if until_ms >= HALT_UNTIL_MS:
            halted.add(domain)
        elif until_ms > observation.now_ms:
            paused.add(domain)
    return halted, paused - halted


def _status_of(member: bytes) -> int:
    """The status of a window member ``<status>:<ms>:<instance>:<i>``."""
    return int(member.split(b":", 1)[0])


def _state_json(event: BreakerEvent, now_ms: int, errors: int) -> bytes:
    return orjson.dumps({"state": event.state, "since_ms": now_ms, "until_ms": event.until_ms,
                         "reason": event.reason, "errors": errors,
                         "responses": event.responses})


def _optional(value: int | None) -> str:
    return "" if value is None else str(value)

