"""Finding the original deployment's keys, staging them, and the journal of what is done.

Staging: before a queue or dupefilter is imported it is moved aside to ``migrate:src:<key>``
in the target Redis, because our layout uses the same key names for different types (our
``<spiderid>:<domain>:queue`` is an index ZSET, our dupefilter a HASH). On the same Redis that
is one RENAMENX (atomic: the key is either still original or staged, never both or neither); from
another Redis the key is copied into ``migrate:copy:<key>`` and renamed when complete. The
staged key is deleted only in the transaction that records the import as done.

Journal (``migrate:journal``): per ``<source>|<key>`` the number of items imported so far, or
``done``. Written in the same MULTI/EXEC as the writes it accounts for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import MigrationError
from scrapy_cluster.migration import legacy

SCAN_COUNT = 1000
COPY_BATCH = 5000
DONE = b"done"
STAGING_PREFIX = keys.migration_staging("")
OUR_RESERVED = frozenset({keys.domain_blacklist()})


@dataclass
class LegacyKeys:
    """Original keys found (their original names), each list sorted."""

    queues: list[str] = field(default_factory=list)
    dupefilters: list[str] = field(default_factory=list)
    blacklists: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)
    unreadable_queues: list[str] = field(default_factory=list)
    """Queue-shaped ZSETs whose members are neither ours nor JSON objects."""

    def sort(self) -> LegacyKeys:
        for names in (self.queues, self.dupefilters, self.blacklists, self.timeouts):
            names.sort()
        return self


def _text(name: bytes | str) -> str:
    return name.decode("utf-8", errors="surrogateescape") if isinstance(name, bytes) else name


class Journal:
    """Progress per source key in ``migrate:journal`` (see module docstring)."""

    def __init__(self, target: redis.Redis, identity: str) -> None:
        self.target, self.identity = target, identity

    def field(self, legacy_key: str) -> str:
        return f"{self.identity}|{legacy_key}"

    def offset(self, legacy_key: str) -> int:
        """Items already imported from ``legacy_key`` (0 when none). One round trip."""
        raw = self.target.hget(keys.migration_journal(), self.field(legacy_key))
        return 0 if raw is None or raw == DONE else int(raw)

    def done(self, names: list[str]) -> set[str]:
        """Which of ``names`` were fully imported. One round trip."""
        if not names:
            return set()
        values = self.target.hmget(keys.migration_journal(), [self.field(n) for n in names])
        return {name for name, value in zip(names, values, strict=True) if value == DONE}

    def queue_offset(self, pipe: redis.client.Pipeline, legacy_key: str, offset: int) -> None:
        pipe.hset(keys.migration_journal(), self.field(legacy_key), offset)

    def queue_done(self, pipe: redis.client.Pipeline, legacy_key: str) -> None:
        pipe.hset(keys.migration_journal(), self.field(legacy_key), DONE)


class LegacySource:
    """The original keys in ``source`` and their staged copies in ``target``."""

    def __init__(self, source: redis.Redis, target: redis.Redis, *, same: bool,
                 journal: Journal) -> None:
        self.source, self.target, self.same, self.journal = source, target, same, journal

    def find(self) -> LegacyKeys:
        """Every original key (one SCAN of the source keyspace; it is a one-off tool) plus
        the keys a previous interrupted run staged. Round trips: 1 per SCAN page of
        SCAN_COUNT keys, plus 2 pipelined per page (TYPE, then the first queue members)."""
        found = LegacyKeys()
        for page in _chunks(self.source.scan_iter(count=SCAN_COUNT)):
            self._classify([_text(name) for name in page], found)
        staged = [_text(k) for k in self.target.scan_iter(match=STAGING_PREFIX + "*",
                                                          count=SCAN_COUNT)]
        for name in staged:
            original = name[len(STAGING_PREFIX):]
            kinds = found.queues if original.endswith(legacy.QUEUE_SUFFIX) else found.dupefilters
            if original not in kinds:
                kinds.append(original)
        done = self.journal.done(found.queues + found.dupefilters) if not self.same else set()
        found.queues = [k for k in found.queues if k not in done]
        found.dupefilters = [k for k in found.dupefilters if k not in done]
        return found.sort()

    def _classify(self, page: list[str], found: LegacyKeys) -> None:
        candidates = [name for name in page if not keys.is_migration_key(name) and (
            legacy.queue_spiderid(name) or legacy.dupefilter_crawl(name)
            or legacy.blacklist_spiderid(name, reserved=OUR_RESERVED)
            or keys.parse_crawl_timeout(name))]
        if not candidates:
            return
        pipe = self.source.pipeline(transaction=False)
        for name in candidates:
            pipe.type(name)
        types = [_text(t) for t in pipe.execute()]
        zsets = [n for n, t in zip(candidates, types, strict=True)
                 if t == "zset" and legacy.queue_spiderid(n)]
        for name, kind in zip(candidates, types, strict=True):
            if kind == "set" and legacy.dupefilter_crawl(name):
                found.dupefilters.append(name)
            elif kind == "set" and legacy.blacklist_spiderid(name, reserved=OUR_RESERVED):
                found.blacklists.append(name)
            elif kind == "string" and keys.parse_crawl_timeout(name):
                found.timeouts.append(name)
        if zsets:
            pipe = self.source.pipeline(transaction=False)
            for name in zsets:
                pipe.zrange(name, 0, 0)
            for name, first in zip(zsets, pipe.execute(), strict=True):
                if first and legacy.is_legacy_queue_member(bytes(first[0])):
                    found.queues.append(name)
                elif first and not _looks_like_ours(first[0]):
                    found.unreadable_queues.append(name)

    def size(self, legacy_key: str) -> int:
        """Members of an original queue: staged (target) or not yet (source). 2 round trips."""
        staged = int(self.target.zcard(keys.migration_staging(legacy_key)))
        return staged or int(self.source.zcard(legacy_key))

    def stage(self, legacy_key: str, kind: str) -> str | None:
        """The staging key holding ``legacy_key``'s content (staging it now if needed), or None
        when there is nothing to stage (already imported, or gone). ``kind``: zset or set."""
        staging = keys.migration_staging(legacy_key)
        if self.target.exists(staging):
            return staging
        if self.same:
            return staging if self._rename(legacy_key, staging, kind) else None
        return staging if self._copy(legacy_key, staging, kind) else None

    def _rename(self, legacy_key: str, staging: str, kind: str) -> bool:
        """RENAMENX under WATCH, only while the key still holds original data. Round trips: 3."""
        with self.target.pipeline(transaction=True) as pipe:
            pipe.watch(legacy_key)
            if _text(pipe.type(legacy_key)) != kind:
                return False
            if kind == "zset":
                first: Any = pipe.zrange(legacy_key, 0, 0)
                if not first or not legacy.is_legacy_queue_member(first[0]):
                    return False
            pipe.multi()
            pipe.renamenx(legacy_key, staging)
            pipe.persist(staging)
            try:
                renamed, _ = pipe.execute()
            except redis.WatchError as exc:
                raise MigrationError(f"{legacy_key} changed while being staged: stop every "
                                     "component writing to this Redis, then run again") from exc
        return bool(renamed)

    def _copy(self, legacy_key: str, staging: str, kind: str) -> bool:
        """Copy from the source into ``migrate:copy:<key>``, then RENAME it to ``staging``.
        Round trips: 2 per COPY_BATCH items, plus 2."""
        if _text(self.source.type(legacy_key)) != kind:
            return False
        copy = keys.migration_copy(legacy_key)
        self.target.delete(copy)
        if kind == "zset":
            total = int(self.source.zcard(legacy_key))
            for start in range(0, total, COPY_BATCH):
                rows: Any = self.source.zrange(legacy_key, start, start + COPY_BATCH - 1,
                                          withscores=True)
                if rows:
                    self.target.zadd(copy, dict(rows))
        else:
            for page in _chunks(self.source.sscan_iter(legacy_key, count=COPY_BATCH),
                                size=COPY_BATCH):
                self.target.sadd(copy, *page)
        if not self.target.exists(copy):
            return False
        self.target.rename(copy, staging)
        return True


def _looks_like_ours(member: bytes) -> bool:
    priority, separator, _ = member.partition(b"|")
    return bool(separator) and priority.lstrip(b"-").isdigit()


def _chunks(values: Iterator[Any], size: int = SCAN_COUNT) -> Iterator[list[Any]]:
    page: list[Any] = []
    for value in values:
        page.append(value)
        if len(page) >= size:
            yield page
            page = []
    if page:
        yield page
