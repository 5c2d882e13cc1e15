"""The original per-crawl dupefilters: what can honestly be carried over.

An original dupefilter is a SET of SHA1 digests of (method, canonical URL, body); ours holds
BLAKE2b digests. A digest cannot be turned back into its URL, so a fingerprint converts only when
we know its URL from elsewhere:

* the crawl's requests still queued in the original: they are imported with dedupe on, so our
  dupefilter records them (the queue import removes their digests from the staged set);
* ``--seen-urls FILE``: URLs the operator knows were fetched (for example the ``url`` of every
  item archived from the crawled topic). Each line is a URL, or a JSON object with ``url`` and
  optionally ``crawlid``, ``spiderid``, ``method``, ``body``. A URL whose original digest is in
  a crawl's set is recorded in our dupefilter of that crawl as seen at depth 0
  (``lua/migration_mark_seen.lua``), so the crawl never fetches it again.

The digests left are counted as not convertible and dropped: their crawls may fetch those pages
once more if they find them again. Dupefilters of stopped crawls are dropped (their crawls never
run again).

Round trips per batch of MIGRATE_BATCH_SIZE candidate URLs: 1 SMISMEMBER, then for the matches
one MULTI/EXEC (mark script, SREM; plus redis-py's SCRIPT EXISTS); per dupefilter 3 more.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import orjson
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import codec
from scrapy_cluster.frontier.scripts import lua_source
from scrapy_cluster.migration import legacy
from scrapy_cluster.migration.source import Journal
from scrapy_cluster.migration.summary import Summary


@dataclass(frozen=True)
class SeenUrl:
    """A URL known to be fetched: its original digest, and our (bucket, fingerprint) slot."""

    spiderid: str | None
    crawlid: str | None
    legacy_fingerprint: str
    slot: tuple[bytes, bytes]


class SeenUrls:
    """The ``--seen-urls`` file, indexed by crawl (entries without a crawl apply to all)."""

    def __init__(self, entries: Iterable[SeenUrl] = ()) -> None:
        self.by_crawl: dict[str | None, list[SeenUrl]] = defaultdict(list)
        for entry in entries:
            self.by_crawl[entry.crawlid].append(entry)

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.by_crawl.values())

    def for_crawl(self, spiderid: str, crawlid: str) -> list[SeenUrl]:
        entries = self.by_crawl.get(crawlid, []) + self.by_crawl.get(None, [])
        return [e for e in entries if e.spiderid in (None, spiderid)]

    @classmethod
    def parse(cls, lines: Iterable[bytes]) -> tuple[SeenUrls, list[str]]:
        """Entries and one error per unusable line (``line N: why``)."""
        entries, errors = [], []
        for number, line in enumerate(lines, start=1):
            text = line.strip()
            if not text or text.startswith(b"#"):
                continue
            try:
                entries.append(_seen_url(text))
            except (ValueError, TypeError, KeyError) as exc:
                errors.append(f"line {number}: {exc}")
        return cls(entries), errors


def _seen_url(text: bytes) -> SeenUrl:
    data = orjson.loads(text) if text.startswith(b"{") else {"url": text.decode()}
    url = data["url"]
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"not a URL: {url!r}")
    method = str(data.get("method") or "GET")
    body = data.get("body") or ""
    body_bytes = body.encode() if isinstance(body, str) else b""
    ours = codec.fingerprint({"url": url, "method": method, "body": body_bytes})
    return SeenUrl(data.get("spiderid"), data.get("crawlid"),
                   legacy.legacy_fingerprint(url, method, body_bytes), codec.dupe_slot(ours))


class DupefilterImporter:
    """Converts staged original dupefilters (see module docstring)."""

    def __init__(self, target: redis.Redis, *, journal: Journal, seen: SeenUrls,
                 batch_size: int, dupefilter_ttl_ms: int) -> None:
        self.target, self.journal, self.seen = target, journal, seen
        self.batch_size, self.ttl_ms = max(1, batch_size), dupefilter_ttl_ms
        self.mark_seen = target.register_script(lua_source("migration_mark_seen.lua"))

    def import_key(self, legacy_key: str, staging: str, summary: Summary) -> None:
        spiderid, crawlid = legacy.dupefilter_crawl(legacy_key) or ("", "")
        if self.target.sismember(keys.crawl_blacklist(spiderid), crawlid):
            summary.dupefilters_of_stopped_crawls += 1
        else:
            candidates = self.seen.for_crawl(spiderid, crawlid)
            for start in range(0, len(candidates), self.batch_size):
                chunk = candidates[start:start + self.batch_size]
                self._convert(spiderid, crawlid, staging, chunk, summary)
            summary.fingerprints_not_convertible += int(self.target.scard(staging))
        pipe = self.target.pipeline(transaction=True)
        pipe.delete(staging)
        self.journal.queue_done(pipe, legacy_key)
        pipe.execute()

    def _convert(self, spiderid: str, crawlid: str, staging: str, chunk: list[SeenUrl],
                 summary: Summary) -> None:
        flags = self.target.smismember(staging, [entry.legacy_fingerprint for entry in chunk])
        matched = [entry for entry, flag in zip(chunk, flags, strict=True) if flag]
        if not matched:
            return
        args: list[bytes | int] = [self.ttl_ms]
        for entry in matched:
            args.extend(entry.slot)
        pipe = self.target.pipeline(transaction=True)
        self.mark_seen(keys=[keys.dupefilter(spiderid, crawlid)], args=args, client=pipe)
        pipe.srem(staging, *{entry.legacy_fingerprint for entry in matched})
        _, removed = pipe.execute()
        summary.fingerprints_from_seen_urls += int(removed)

    def dry_run_key(self, source: redis.Redis, legacy_key: str, queued: set[str],
                    summary: Summary) -> None:
        """Count without writing: digests of queued requests, of seen URLs, and the rest."""
        spiderid, crawlid = legacy.dupefilter_crawl(legacy_key) or ("", "")
        total = int(source.scard(legacy_key))
        seen = {e.legacy_fingerprint for e in self.seen.for_crawl(spiderid, crawlid)} - queued
        counted = {}
        for kind, digests in (("queued", sorted(queued)), ("seen", sorted(seen))):
            flags = source.smismember(legacy_key, digests) if digests else []
            counted[kind] = sum(1 for flag in flags if flag)
        summary.fingerprints_of_queued += counted["queued"]
        summary.fingerprints_from_seen_urls += counted["seen"]
        summary.fingerprints_not_convertible += total - counted["queued"] - counted["seen"]
