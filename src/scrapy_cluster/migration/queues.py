"""Importing the original's domain queues into the frontier, in their pop order.

The original popped the lowest score (``-priority``) first and equal scores in member order;
``ZRANGE`` reads exactly that order, and the frontier serves a domain by priority, then in
enqueue order, so importing in ``ZRANGE`` order keeps the order within every priority.

Per batch of MIGRATE_BATCH_SIZE members, round trips: 1 ZRANGE of the staged key, then one
MULTI/EXEC holding the frontier's enqueue script (dedupe on), the SREM of the batch's original
fingerprints from the staged dupefilters, the rejected requests and the journal's new offset
(redis-py adds 1 SCRIPT EXISTS before it): 3. The journal moves in the same transaction as the
enqueue, so a run killed at any point resumes after the last batch that landed, nothing twice.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import MigrationError
from scrapy_cluster.frontier.calls import FrontierCalls
from scrapy_cluster.frontier.scripts import FrontierScripts
from scrapy_cluster.migration import legacy
from scrapy_cluster.migration.source import Journal
from scrapy_cluster.migration.summary import Summary
from scrapy_cluster.text import as_text

ApiValidator = Callable[[dict[str, Any]], str | None]
"""Returns why our crawl schema refuses a request's crawl-API fields, or None."""
Progress = Callable[[int], object]
REASONS_SHOWN = 10


@dataclass
class _Batch:
    requests: list[dict[str, Any]] = field(default_factory=list)
    fingerprints: list[tuple[str, str, str]] = field(default_factory=list)
    rejected: list[bytes] = field(default_factory=list)
    fields: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    """Per request: the labels of its mapped and dropped original fields."""

    def count_fields(self, summary: Summary, refused: set[int]) -> None:
        """Count the mapped and dropped fields of the requests the frontier did not refuse."""
        for index, (mapped, dropped) in enumerate(self.fields):
            if index not in refused:
                summary.mapped_fields.update(mapped)
                summary.dropped_fields.update(dropped)


@dataclass(frozen=True)
class ImportPacing:
    """MIGRATE_BATCH_SIZE members per batch, MIGRATE_BATCH_PAUSE_S seconds between batches."""

    batch_size: int
    pause_s: float = 0.0


class QueueImporter:
    """Feeds staged original queues to the frontier (see module docstring)."""

    def __init__(self, target: redis.Redis, calls: FrontierCalls, *, journal: Journal,
                 validate: ApiValidator | None, pacing: ImportPacing,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.target, self.calls, self.journal = target, calls, journal
        self.scripts = FrontierScripts(target)
        self.validate, self.batch_size = validate, max(1, pacing.batch_size)
        self.pause_s, self.sleep = pacing.pause_s, sleep
        self.seen_in_dry_run: dict[tuple[str, str], set[str]] = defaultdict(set)

    def import_key(self, legacy_key: str, staging: str, summary: Summary,
                   progress: Progress) -> None:
        """Import ``staging`` (holding ``legacy_key``) from the journal's offset to its end,
        then delete it and record the key as done, in one transaction."""
        spiderid = legacy.queue_spiderid(legacy_key) or ""
        total = int(self.target.zcard(staging))
        offset = self.journal.offset(legacy_key)
        progress(min(offset, total))
        while offset < total:
            rows: Any = self.target.zrange(staging, offset, offset + self.batch_size - 1,
                                      withscores=True)
            if not rows:
                break
            batch = self._convert(legacy_key, spiderid, rows, summary)
            self._commit(legacy_key, batch, offset, offset + len(rows), summary)
            offset += len(rows)
            progress(len(rows))
            if self.pause_s > 0:
                self.sleep(self.pause_s)
        pipe = self.target.pipeline(transaction=True)
        pipe.delete(staging)
        self.journal.queue_done(pipe, legacy_key)
        pipe.execute()
        summary.queue_keys += 1

    def dry_run_key(self, source: redis.Redis, legacy_key: str, summary: Summary,
                    progress: Progress) -> None:
        """Read and check ``legacy_key`` in the source without writing anything."""
        spiderid = legacy.queue_spiderid(legacy_key) or ""
        total = int(source.zcard(legacy_key))
        for start in range(0, total, self.batch_size):
            rows: Any = source.zrange(legacy_key, start, start + self.batch_size - 1, withscores=True)
            batch = self._convert(legacy_key, spiderid, rows, summary)
            _, invalid = self.calls.enqueue(batch.requests, dedupe=True, now_ms=None)
            summary.queued += len(batch.requests) - len(invalid)
            batch.count_fields(summary, {index for index, _ in invalid})
            self._count_rejected(summary, [f"{legacy_key}: {reason}" for _, reason in invalid])
            for spider, crawl, fingerprint in batch.fingerprints:
                self.seen_in_dry_run[(spider, crawl)].add(fingerprint)
            progress(len(rows))
        summary.queue_keys += 1

    def _convert(self, legacy_key: str, spiderid: str, rows: list[tuple[bytes, float]],
                 summary: Summary) -> _Batch:
        batch = _Batch()
        for raw, score in rows:
            try:
                item = legacy.convert_item(raw, score, spiderid)
                reason = self.validate(item.api_view) if self.validate else None
            except legacy.LegacyItemError as exc:
                reason = str(exc)
            if reason is None:
                batch.requests.append(item.request)
                batch.fingerprints.append((item.request["spiderid"], item.request["crawlid"],
                                           item.fingerprint))
                batch.fields.append((item.mapped, item.dropped))
                continue
            batch.rejected.append(_rejected_entry(legacy_key, raw, -int(score), reason))
            self._count_rejected(summary, [f"{legacy_key}: {reason}"])
        return batch

    def _commit(self, legacy_key: str, batch: _Batch, old_offset: int, new_offset: int,
                summary: Summary) -> None:
        call, invalid = self.calls.enqueue(batch.requests, dedupe=True, now_ms=None)
        refused = {index for index, _ in invalid}
        batch.count_fields(summary, refused)
        for index, reason in invalid:
            request = batch.requests[index]
            batch.rejected.append(_rejected_entry(legacy_key, orjson.dumps(request),
                                                  int(request.get("priority", 0)), reason))
        self._count_rejected(summary, [f"{legacy_key}: {reason}" for _, reason in invalid])
        by_staged_filter: dict[str, list[str]] = defaultdict(list)
        for index, (spider, crawl, fingerprint) in enumerate(batch.fingerprints):
            if index not in refused:
                by_staged_filter[keys.migration_staging(keys.dupefilter(spider, crawl))].append(
                    fingerprint)
        pipe = self.target.pipeline(transaction=True)
        enqueues = not self.calls.enqueue_is_empty(call)
        if enqueues:
            self.scripts.enqueue(keys=call[0], args=call[1], client=pipe)
        for staged, fingerprints in by_staged_filter.items():
            pipe.srem(staged, *fingerprints)
        if batch.rejected:
            pipe.rpush(keys.migration_rejected(), *batch.rejected)
        self.journal.queue_offset(pipe, legacy_key, new_offset)
        replies = pipe.execute(raise_on_error=False)
        if enqueues and isinstance(replies[0], Exception):
            self.target.hset(keys.migration_journal(), self.journal.field(legacy_key), old_offset)
            raise MigrationError(f"{legacy_key}: the frontier refused members {old_offset}-"
                                 f"{new_offset - 1}: {replies[0]}") from replies[0]
        if enqueues:
            result = self.calls.parse_enqueue(replies[0], invalid)
            summary.queued += result.queued
            summary.duplicates += result.duplicates
            summary.stopped_crawl_requests += result.blacklisted
        first_srem = 1 if enqueues else 0
        summary.fingerprints_of_queued += sum(
            int(reply) for reply in replies[first_srem:first_srem + len(by_staged_filter)])

    @staticmethod
    def _count_rejected(summary: Summary, reasons: list[str]) -> None:
        summary.rejected += len(reasons)
        room = REASONS_SHOWN - len(summary.rejected_reasons)
        summary.rejected_reasons += reasons[:max(0, room)]


def _rejected_entry(legacy_key: str, raw: bytes, priority: int, reason: str) -> bytes:
    return orjson.dumps({"key": legacy_key, "priority": priority, "reason": reason,
                         "item": as_text(raw)})
