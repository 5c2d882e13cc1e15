"""The Redis Monitor's job queue: a consumer group on ``redis-monitor:jobs``, each job taken once.

The Kafka Monitor writes each job twice over (``kafka_monitor/jobs.py``): the job key in the
original shape (``info:<spiderid>:<appid>:<crawlid>:<uuid>`` ...) and an entry
``{key, type, payload}`` in the stream. Here:

- **read**: ``XREADGROUP`` in group ``redis-monitor`` (created from the start of the stream, so
  jobs written before any monitor ran are answered); members of the group get disjoint entries.
- **take** (``lua/redis_monitor_take.lua``, one call per batch): an entry whose job key still
  exists deletes it and records ``job key -> entry id`` in ``redis-monitor:taken``. A second
  entry for the same key (the bus delivered the request twice) finds the key gone and is skipped,
  so a job is handled once even with many monitors.
- **finish** (one MULTI/EXEC per batch, shared with the stats): ``HDEL`` the taken record and
  ``XACK`` the entry, after the answers were flushed to the bus.
- **claim**: entries a dead monitor read but never acknowledged are taken over with
  ``XAUTOCLAIM`` once idle for ``REDIS_LOCK_EXPIRATION`` seconds; the take script recognises
  the entry in ``redis-monitor:taken`` and the job is handled again from the entry's payload.
  While a job is being handled its entry is kept fresh (``XCLAIM ... JUSTID``), so a slow job
  is not taken over by another monitor.

Answers are at-least-once: a monitor killed after its answer reached the bus but before the
finish round trip has its job answered again by the monitor that claims it.

Round trips per batch: 1 read (blocking), 1 take, 1 finish; plus 1 claim every
``REDIS_LOCK_EXPIRATION / 2`` seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier.scripts import lua_source
from scrapy_cluster.text import as_text

GROUP = "redis-monitor"
TAKE_NEW, TAKE_RESUME, TAKE_GONE = 1, 2, 0


@dataclass
class Job:
    """One job read from the stream. ``payload`` is the request's JSON object, or None with
    ``error`` saying why it could not be read."""

    entry_id: str
    key: str
    type: str
    payload: dict[str, Any] | None
    error: str | None = None
    attempts: int = 0
    retry_at_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def parse_entry(entry_id: bytes | str, fields: dict[bytes, bytes]) -> Job:
    """A ``Job`` from one stream entry. A malformed entry keeps its id, what could be read of
    it (so its error can still be answered to the ``appid``/``uuid`` of its payload) and
    ``error`` saying what is wrong."""
    ident = as_text(entry_id)
    key = as_text(fields.get(b"key", b""))
    job_type = as_text(fields.get(b"type", b""))
    raw = fields.get(b"payload")
    if raw is None:
        return Job(ident, key, job_type, None, "job entry has no payload")
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Job(ident, key, job_type, None, f"job payload is not JSON: {exc}")
    if not isinstance(payload, dict):
        return Job(ident, key, job_type, None, "job payload is not a JSON object")
    missing = [name for name, value in (("key", key), ("type", job_type)) if not value]
    if missing:
        return Job(ident, key, job_type, payload,
                   f"job entry has no {' and no '.join(missing)}")
    return Job(ident, key, job_type, payload)


class JobQueue:
    """One Redis Monitor's member of the job stream's consumer group."""

    def __init__(self, client: redis.Redis, consumer: str, *, claim_idle_ms: int) -> None:
        self.redis = client
        self.consumer = consumer
        self.claim_idle_ms = claim_idle_ms
        self.stream = keys.redis_monitor_jobs()
        self._take = client.register_script(lua_source("redis_monitor_take.lua"))
        self._claim_cursor = "0-0"

    def ensure_group(self) -> None:
        """Create the group from the stream's start (MKSTREAM); an existing group is kept."""
        try:
            self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read(self, count: int, block_ms: int) -> list[Job]:
        """New entries for this member, waiting up to ``block_ms``. One round trip.

        A group lost with a Redis restart is created again and the read retried.
        """
        try:
            reply = self.redis.xreadgroup(GROUP, self.consumer, {self.stream: ">"},
                                          count=count, block=max(1, block_ms))
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.ensure_group()
            return []
        streams: Any = reply or []
        return [parse_entry(entry_id, fields) for _, entries in streams
                for entry_id, fields in entries if fields]

    def claim(self, count: int) -> list[Job]:
        """Entries idle for ``claim_idle_ms`` in any member (a dead monitor's). One round trip.

        Entries whose data was trimmed from the stream meanwhile are acknowledged and dropped.
        """
        try:
            reply = self.redis.xautoclaim(self.stream, GROUP, self.consumer, self.claim_idle_ms,
                                          start_id=self._claim_cursor, count=count)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.ensure_group()
            return []
        cursor, entries = reply[0], reply[1]
        deleted = reply[2] if len(reply) > 2 else []
        self._claim_cursor = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        if deleted:
            self.redis.xack(self.stream, GROUP, *deleted)
        return [parse_entry(entry_id, fields) for entry_id, fields in entries if fields]

    def take(self, jobs: Sequence[Job]) -> list[int]:
        """Take each job (see module docstring); returns TAKE_NEW / TAKE_RESUME / TAKE_GONE per
        job. A malformed entry (``error`` set) is this member's alone and reported new, to be
        dropped with its error. One round trip for the whole batch."""
        named = [job for job in jobs if job.key and not job.error]
        codes: dict[str, int] = {}
        if named:
            reply = self._take(keys=[keys.redis_monitor_taken(), *(job.key for job in named)],
                               args=[job.entry_id for job in named])
            codes = {job.entry_id: int(code) for job, code in zip(named, reply, strict=True)}
        return [TAKE_NEW if job.error else codes.get(job.entry_id, TAKE_GONE) for job in jobs]

    def keep_fresh(self, jobs: Sequence[Job]) -> None:
        """Reset the idle time of entries still being handled, so nobody claims them. 1 round trip."""
        if jobs:
            self.redis.xclaim(self.stream, GROUP, self.consumer, 0,
                              [job.entry_id for job in jobs], justid=True)

    def queue_finish(self, pipe: Any, jobs: Sequence[Job]) -> None:
        """Queue forgetting the taken records and acknowledging the entries on ``pipe``."""
        if not jobs:
            return
        named = [job.key for job in jobs if job.key and not job.error]
        if named:
            pipe.hdel(keys.redis_monitor_taken(), *named)
        pipe.xack(self.stream, GROUP, *(job.entry_id for job in jobs))
