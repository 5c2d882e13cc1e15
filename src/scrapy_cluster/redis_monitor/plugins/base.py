"""The Redis Monitor plugin contract.

A plugin is a class named in the ``PLUGINS`` setting (``{'dotted.path.Class': rank}``). The
monitor hands each job to the first plugin, lowest rank first, whose ``job_types`` holds the
job's type and whose ``regex`` (if set) matches the job key, as the original matched keys by
regular expression. Plugins that act on time rather than on jobs (expiring crawls, the circuit
breaker) set ``tick_interval_s`` and implement ``tick``. See "Redis Monitor plugins" in
``docs/api.md``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import redis

from scrapy_cluster.errors import JobError
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.redis_monitor.answer_sender import AnswerSender
from scrapy_cluster.redis_monitor.jobs import Job


class BaseMonitor:
    """A Redis Monitor plugin.

    Attributes given to every plugin: ``self.logger`` (the monitor's logger), ``self.redis``
    (also ``self.redis_conn``, the seed's name; a synchronous client), ``self.frontier``,
    ``self.answers`` (use ``self.send(answer)``), ``self.clock`` (epoch seconds).

    ``handle`` raising ``JobError`` drops the job at once (it can never succeed); any other
    exception is retried up to RETRY_FAILURES_MAX times. A Redis outage is not a failure: the
    monitor waits and retries. ``check_precondition`` returning False leaves the job pending;
    it is offered again after REDIS_LOCK_EXPIRATION seconds.
    """

    job_types: ClassVar[tuple[str, ...]] = ()
    regex: ClassVar[str | None] = None
    required: ClassVar[Mapping[str, type | tuple[type, ...]]] = {}
    optional: ClassVar[Mapping[str, type | tuple[type, ...]]] = {}
    tick_interval_s: ClassVar[float | None] = None

    def __init__(self, *, logger: logging.Logger, redis_client: redis.Redis, frontier: Frontier,
                 answers: AnswerSender, clock: Callable[[], float] = time.time) -> None:
        self.logger = logger
        self.redis = redis_client
        self.frontier = frontier
        self.answers = answers
        self.clock = clock
        self._pattern = re.compile(self.regex) if self.regex else None

    @property
    def redis_conn(self) -> redis.Redis:
        return self.redis

    @property
    def name(self) -> str:
        """The plugin's name in stats keys (``stats:redis-monitor:<name>:<window>``)."""
        return type(self).__name__

    def server_time(self) -> int:
        return int(self.clock())

    def accepts(self, job: Job) -> bool:
        return job.type in self.job_types and (
            self._pattern is None or self._pattern.match(job.key) is not None)

    def validate(self, job: Job) -> dict[str, Any]:
        """The job's payload, checked against ``required`` and ``optional`` (field -> type);
        raises ``JobError`` naming the field."""
        if job.payload is None:
            raise JobError(job.error or "job has no payload")
        for name, kinds in [*self.required.items(), *self.optional.items()]:
            value = job.payload.get(name)
            if value is None:
                if name in self.required:
                    raise JobError(f"{job.type} job lacks required field {name!r}")
                continue
            if not isinstance(value, kinds) or isinstance(value, bool):
                raise JobError(f"{job.type} job field {name!r} has the wrong type "
                               f"({type(value).__name__})")
        return job.payload

    def send(self, answer: Mapping[str, Any]) -> None:
        """Queue an answer for the outbound topics (flushed by the monitor before the job is
        acknowledged)."""
        self.answers.send(answer)

    # --- the hooks a plugin implements ---------------------------------------------------
    def setup(self, settings: Mapping[str, Any]) -> None:
        """Read settings and prepare connections; raise ``NotConfigured`` to be skipped."""

    def check_precondition(self, job: Job) -> bool:
        """False leaves the job for later (see the class docstring)."""
        return True

    def handle(self, job: Job) -> None:
        """Process one job."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement handle()")

    def tick(self) -> int:
        """Periodic work for plugins with ``tick_interval_s``; returns units of work done
        (counted in the plugin's stats)."""
        return 0

    def close(self) -> None:
        """Called once when the monitor stops."""
