"""The Redis Monitor's loop: read jobs, take them, hand each to its plugin, answer, acknowledge.

Per pass (see ``jobs.py`` for the queue itself):

1. plugins with ``tick_interval_s`` whose time has come run ``tick`` (expiring crawls, the
   circuit breaker);
2. one blocking ``XREADGROUP`` of up to REDIS_MONITOR_BATCH_SIZE jobs (plus, every
   REDIS_LOCK_EXPIRATION / 2 seconds, one ``XAUTOCLAIM`` of a dead monitor's jobs); the wait
   ends early when a tick or a retry is due, so no polling loop spins;
3. one round trip takes the batch (each job once, whatever the number of monitors);
4. each job goes to the first plugin accepting it; its answer is buffered on the bus producer;
5. the answers are flushed, then ONE MULTI/EXEC acknowledges the jobs and writes the stats
   (``total``, ``fail``, one counter per plugin) and, when due, the heartbeat.

Round trips per batch: 3 plus the plugins' own (info 2, stop 2 + 1 per purge chunk, stats
about 4). A plugin raising ``JobError`` drops its job at once; any other exception is retried,
after a short backoff, up to RETRY_FAILURES_MAX times, then the job is dropped: an error log,
a ``fail`` count and an error answer ``{uuid, appid, server_time, error, ...}``. Other jobs are
served meanwhile. A Redis or bus outage is waited out with capped exponential backoff; jobs in
hand are kept and nothing is acknowledged until their answers are delivered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import redis

from scrapy_cluster.errors import BusError, JobError
from scrapy_cluster.outage import Backoff, is_redis_outage
from scrapy_cluster.redis_monitor.answer_sender import AnswerSender
from scrapy_cluster.redis_monitor.jobs import TAKE_GONE, Job, JobQueue
from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.upkeep import Heartbeat

TOTAL, FAIL = "total", "fail"
MAX_BLOCK_S = 1.0
RETRY_BACKOFF_S = (0.1, 0.5, 2.0)


@dataclass
class PassReport:
    """What one pass did: jobs answered per plugin, dropped, skipped as duplicates, retried."""

    handled: dict[str, int] = field(default_factory=dict)
    dropped: int = 0
    skipped: int = 0
    retried: int = 0
    deferred: int = 0

    @property
    def answered(self) -> int:
        return sum(self.handled.values())


@dataclass
class _Outcome:
    finished: list[Job] = field(default_factory=list)
    report: PassReport = field(default_factory=PassReport)


@dataclass(frozen=True)
class RedisMonitorPolicy:
    """The settings the loop obeys (docs/settings.md, section Redis Monitor).

    ``retry_max``: how many times a failing job is retried (0 when RETRY_FAILURES is off);
    ``claim_interval_s``: how often a dead monitor's jobs are looked for (half of
    REDIS_LOCK_EXPIRATION, the idle time after which they may be claimed).
    """

    batch_size: int = 100
    retry_max: int = 3
    claim_interval_s: float = 3.0
    count_total: bool = True
    count_plugins: bool = True

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RedisMonitorPolicy:
        return cls(batch_size=int(settings["REDIS_MONITOR_BATCH_SIZE"]),
                   retry_max=(int(settings["RETRY_FAILURES_MAX"])
                              if bool(settings["RETRY_FAILURES"]) else 0),
                   claim_interval_s=float(settings["REDIS_LOCK_EXPIRATION"]) / 2,
                   count_total=bool(settings["STATS_TOTAL"]),
                   count_plugins=bool(settings["STATS_PLUGINS"]))


@dataclass(frozen=True)
class RedisMonitorParts:
    """The collaborators the loop works with, built by the composition root (``app.py``)."""

    queue: JobQueue
    plugins: Sequence[BaseMonitor]
    redis_client: redis.Redis
    answers: AnswerSender
    stats: WindowedStats
    logger: logging.Logger
    heartbeat: Heartbeat
    backoff: Backoff


class RedisMonitor:
    """Serves Redis Monitor jobs with plugins (see the module docstring)."""

    def __init__(self, parts: RedisMonitorParts, *,
                 policy: RedisMonitorPolicy = RedisMonitorPolicy(),
                 clock: Callable[[], float] = time.monotonic,
                 chores: Sequence[Callable[[], None]] = ()) -> None:
        self.queue = parts.queue
        self.plugins = list(parts.plugins)
        self.redis = parts.redis_client
        self.answers = parts.answers
        self.stats = parts.stats
        self.logger = parts.logger
        self.heartbeat = parts.heartbeat
        self.backoff = parts.backoff
        self.policy = policy
        self.clock = clock
        self.chores = list(chores)
        self._retries: list[Job] = []
        self._unacked: list[Job] = []
        self._unacked_report = PassReport()
        self._next_claim_s = clock()
        self._next_tick_s = {plugin.name: clock() for plugin in self.plugins
                             if plugin.tick_interval_s}
        self._group_ready = False

    # --- the loop -------------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool]) -> None:
        """Serve jobs until ``should_stop()``; the batch in hand is finished first."""
        while not should_stop():
            try:
                self.run_once()
                self.backoff.reset()
            except BusError as exc:
                self._outage_log()("bus unavailable, answers kept for retry: %s", exc,
                                   extra={"error": str(exc)})
                self.backoff.wait()
            except Exception as exc:
                if not is_redis_outage(exc):
                    raise
                self._outage_log()("Redis unreachable, retrying in %.1fs: %s",
                                   self.backoff.next_delay_s(), exc, extra={"error": str(exc)})
                self.backoff.wait()
            for chore in self.chores:
                chore()

    def _outage_log(self) -> Callable[..., None]:
        """WARNING for the first failure of an outage, DEBUG for its repeats (one line per
        outage, not one per retry); the backoff counts the failures in a row."""
        return self.logger.warning if self.backoff.failures == 0 else self.logger.debug

    def run_once(self) -> PassReport:
        """One pass (see the module docstring)."""
        if not self._group_ready:
            self.queue.ensure_group()
            self._group_ready = True
        if self._unacked:
            self.queue.keep_fresh(self._unacked + self._retries)
            with self._kept_fresh(self._unacked):
                self._deliver_and_ack(self._unacked, self._unacked_report)
        ticked = self._run_ticks()
        jobs = self._claim_if_due()
        jobs += self.queue.read(self.policy.batch_size, self._block_ms(bool(jobs)))
        codes = self.queue.take(jobs)
        gone = [job for job, code in zip(jobs, codes, strict=True) if code == TAKE_GONE]
        work = [job for job, code in zip(jobs, codes, strict=True) if code != TAKE_GONE]
        now = self.clock()
        due_retries = [job for job in self._retries if job.retry_at_s <= now]
        self._retries = [job for job in self._retries if job.retry_at_s > now]
        outcome = self._handle_all(due_retries + work)
        outcome.finished += gone
        outcome.report.skipped = len(gone)
        for name, count in ticked.items():
            outcome.report.handled[name] = outcome.report.handled.get(name, 0) + count
        with self._kept_fresh(outcome.finished + self._retries):
            self._deliver_and_ack(outcome.finished, outcome.report)
        return outcome.report

    def close(self) -> None:
        for plugin in self.plugins:
            try:
                plugin.close()
            except Exception as exc:  # noqa: BLE001 - one plugin's close must not stop the others
                self.logger.warning("plugin %s failed to close: %s", plugin.name, exc)

    # --- steps ------------------------------------------------------------------------------
    def _run_ticks(self) -> dict[str, int]:
        done: dict[str, int] = {}
        for plugin in self.plugins:
            interval = plugin.tick_interval_s
            if not interval or self.clock() < self._next_tick_s[plugin.name]:
                continue
            self._next_tick_s[plugin.name] = self.clock() + interval
            try:
                count = plugin.tick()
            except Exception as exc:
                if is_redis_outage(exc):
                    raise
                self.logger.error("plugin %s tick failed: %s", plugin.name, exc, exc_info=exc,
                                  extra={"plugin": plugin.name})
                continue
            if count:
                done[plugin.name] = count
        if done:
            self.answers.flush()
        return done

    def _claim_if_due(self) -> list[Job]:
        if self.clock() < self._next_claim_s:
            return []
        self._next_claim_s = self.clock() + self.policy.claim_interval_s
        claimed = self.queue.claim(self.policy.batch_size)
        if claimed:
            self.logger.info("claimed %d jobs left by another monitor", len(claimed),
                             extra={"claimed": len(claimed)})
        return claimed

    def _block_ms(self, have_work: bool) -> int:
        if have_work:
            return 1
        now = self.clock()
        due = [now + MAX_BLOCK_S, self._next_claim_s, *self._next_tick_s.values(),
               *(job.retry_at_s for job in self._retries)]
        return max(1, int((min(due) - now) * 1000))

    def _handle_all(self, jobs: list[Job]) -> _Outcome:
        outcome = _Outcome()
        with self._kept_fresh(jobs):
            for index, job in enumerate(jobs):
                try:
                    self._handle_one(job, outcome)
                except Exception:
                    # Redis outage: keep this job and the rest for the next pass, answered
                    # ones included (their answers are delivered before they are acknowledged).
                    self._retries.extend(jobs[index:])
                    self._unacked.extend(outcome.finished)
                    _merge(self._unacked_report, outcome.report)
                    raise
        return outcome

    def _handle_one(self, job: Job, outcome: _Outcome) -> None:
        plugin = next((plugin for plugin in self.plugins if plugin.accepts(job)), None)
        try:
            if job.error:
                raise JobError(job.error)
            if plugin is None:
                raise JobError(f"no plugin handles job type {job.type!r} (key {job.key!r})")
            if not plugin.check_precondition(job):
                outcome.report.deferred += 1
                return  # left pending: offered again once idle (REDIS_LOCK_EXPIRATION)
            plugin.handle(job)
        except JobError as exc:
            self._drop(job, str(exc), outcome)
            return
        except Exception as exc:
            if is_redis_outage(exc):
                raise
            job.attempts += 1
            if job.attempts <= self.policy.retry_max:
                job.retry_at_s = self.clock() + RETRY_BACKOFF_S[
                    min(job.attempts, len(RETRY_BACKOFF_S)) - 1]
                self._retries.append(job)
                outcome.report.retried += 1
                self.logger.warning("job failed, will retry (%d of %d): %s", job.attempts,
                                    self.policy.retry_max, exc, extra={"key": job.key})
                return
            self._drop(job, f"{type(exc).__name__}: {exc}", outcome, exc)
            return
        outcome.finished.append(job)
        outcome.report.handled[plugin.name] = outcome.report.handled.get(plugin.name, 0) + 1

    def _drop(self, job: Job, reason: str, outcome: _Outcome,
              exc: BaseException | None = None) -> None:
        self.logger.error("job dropped: %s", reason, exc_info=exc,
                          extra={"key": job.key, "type": job.type, "attempts": job.attempts,
                                 "reason": reason})
        outcome.finished.append(job)
        outcome.report.dropped += 1
        request = job.payload or {}
        if isinstance(request.get("appid"), str) or isinstance(request.get("uuid"), str):
            echo: dict[str, Any] = {name: request[name] for name in ("action", "stats", "crawlid", "spiderid",
                                                     "domain") if name in request}
            self.answers.send({"uuid": request.get("uuid"), "appid": request.get("appid"),
                               **echo, "server_time": int(time.time()), "error": reason})

    def _deliver_and_ack(self, finished: list[Job], report: PassReport) -> None:
        """Flush the answers, then acknowledge and count in one MULTI/EXEC."""
        try:
            self.answers.flush()
        except BusError:
            if finished is not self._unacked:
                self._unacked.extend(finished)
                _merge(self._unacked_report, report)
            raise
        pipe = self.redis.pipeline(transaction=True)
        self.queue.queue_finish(pipe, finished)
        self._queue_stats(pipe, report)
        if self.heartbeat.due():
            self.heartbeat.queue(pipe)
        pipe.execute()
        if finished is self._unacked:
            self._unacked = []
            self._unacked_report = PassReport()

    def _queue_stats(self, pipe: Any, report: PassReport) -> None:
        answered = report.answered
        if self.policy.count_total and answered + report.dropped:
            self.stats.increment(TOTAL, pipe=pipe, amount=answered + report.dropped)
        if self.policy.count_total and report.dropped:
            self.stats.increment(FAIL, pipe=pipe, amount=report.dropped)
        if self.policy.count_plugins:
            for name, count in report.handled.items():
                self.stats.increment(name, pipe=pipe, amount=count)

    @contextmanager
    def _kept_fresh(self, jobs: list[Job]) -> Iterator[None]:
        """While ``jobs`` are handled, refresh their entries' idle time every third of
        REDIS_LOCK_EXPIRATION so no other monitor claims a slow job."""
        if not jobs:
            yield
            return
        stop = threading.Event()
        period_s = max(0.2, self.queue.claim_idle_ms / 3000)

        def refresh() -> None:
            while not stop.wait(period_s):
                try:
                    self.queue.keep_fresh(jobs)
                except redis.RedisError as exc:
                    self.logger.warning("could not refresh jobs in hand: %s", exc)

        thread = threading.Thread(target=refresh, name="redis-monitor-keep-fresh", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def _merge(into: PassReport, other: PassReport) -> None:
    for name, count in other.handled.items():
        into.handled[name] = into.handled.get(name, 0) + count
    into.dropped += other.dropped
    into.skipped += other.skipped


def plugin_settings_names(plugins: Sequence[BaseMonitor]) -> list[str]:
    """The counter names the monitor writes: total, fail and one per plugin."""
    return [TOTAL, FAIL, *(plugin.name for plugin in plugins)]

