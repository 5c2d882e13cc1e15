"""One ``scrapy-cluster migrate`` run: every import, in an order that keeps each safe to repeat.

1. refuse a target whose layout version this code does not know (before any write);
2. the operators' domain document (``--domain-config`` / ``--zookeeper``), merged into ours;
3. find the original keys (one SCAN of the source);
4. stopped crawls (``<spiderid>:blacklist``) — before the queues, so that requests of stopped
   crawls are refused by the frontier instead of queued;
5. crawl expiries (``timeout:...``) registered in ``redis-monitor:timeouts``;
6. stage every original dupefilter (our enqueue writes a HASH under the same name), then stage
   and import each queue;
7. convert what is left of the dupefilters;
8. stamp our layout version (running the registered upgrades).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import redis

from scrapy_cluster import layout
from scrapy_cluster.domain_config import DomainConfigStore, DomainDocument
from scrapy_cluster.frontier.calls import FrontierCalls
from scrapy_cluster.migration import legacy, steps, upgrades
from scrapy_cluster.migration.dupefilters import DupefilterImporter, SeenUrls
from scrapy_cluster.migration.queues import (
    ApiValidator,
    ImportPacing,
    Progress,
    QueueImporter,
)
from scrapy_cluster.migration.source import Journal, LegacyKeys, LegacySource
from scrapy_cluster.migration.summary import Summary

ProgressFactory = Callable[[int], Progress]
"""Given the number of queued requests to import, returns the function advancing the bar."""


@dataclass(frozen=True)
class MigrationOptions:
    dry_run: bool = False
    batch_size: int = 500
    pause_s: float = 0.0
    dupefilter_ttl_ms: int = 600_000


@dataclass(frozen=True)
class MigrationParts:
    """What a run works with besides the two Redis clients: the frontier's call builders, the
    crawl schema's check, the ``--seen-urls`` list and the operators' domain document with
    the store it is merged into (both or neither)."""

    calls: FrontierCalls
    validate: ApiValidator | None
    seen: SeenUrls | None = None
    domain_document: DomainDocument | None = None
    domain_store: DomainConfigStore | None = None


class Migration:
    """Imports an original deployment's Redis state from ``source`` into ``target``."""

    def __init__(self, source: redis.Redis, target: redis.Redis, parts: MigrationParts, *,
                 same: bool, source_name: str, options: MigrationOptions) -> None:
        self.source, self.target, self.same, self.options = source, target, same, options
        self.journal = Journal(target, "same" if same else source_name)
        self.legacy = LegacySource(source, target, same=same, journal=self.journal)
        self.queues = QueueImporter(
            target, parts.calls, journal=self.journal, validate=parts.validate,
            pacing=ImportPacing(batch_size=options.batch_size, pause_s=options.pause_s))
        self.dupefilters = DupefilterImporter(
            target, journal=self.journal, seen=parts.seen or SeenUrls(),
            batch_size=options.batch_size, dupefilter_ttl_ms=options.dupefilter_ttl_ms)
        self.domain_document, self.domain_store = parts.domain_document, parts.domain_store

    def run(self, progress_factory: ProgressFactory) -> Summary:
        dry_run = self.options.dry_run
        summary = Summary(dry_run=dry_run)
        layout.read_version(self.target)  # a non-integer version refuses here
        upgrades.upgrade(self.target, dry_run=True)  # a newer version refuses here
        if self.domain_document is not None and self.domain_store is not None:
            steps.import_domain_config(self.domain_store, self.domain_document, summary,
                                       dry_run=dry_run)
        found = self.legacy.find()
        summary.skipped += [f"{name}: members are neither JSON requests nor ours"
                            for name in found.unreadable_queues]
        steps.import_blacklists(self.source, self.target, found.blacklists, summary,
                                dry_run=dry_run)
        steps.import_timeouts(self.source, self.target, found.timeouts, summary,
                              same=self.same, dry_run=dry_run)
        if dry_run:
            self._dry_run_queues(found, summary, progress_factory)
        else:
            self._import_queues(found, summary, progress_factory)
        summary.schema_steps = upgrades.upgrade(self.target, dry_run=dry_run)
        return summary

    def _import_queues(self, found: LegacyKeys, summary: Summary,
                       progress_factory: ProgressFactory) -> None:
        staged_filters = {name: self.legacy.stage(name, "set") for name in found.dupefilters}
        progress = progress_factory(sum(self.legacy.size(name) for name in found.queues))
        for name in found.queues:
            staging = self.legacy.stage(name, "zset")
            if staging is None:
                summary.skipped.append(f"{name}: changed or gone while staging; run again")
            else:
                self.queues.import_key(name, staging, summary, progress)
        for name, staging in staged_filters.items():
            if staging is not None:
                self.dupefilters.import_key(name, staging, summary)

    def _dry_run_queues(self, found: LegacyKeys, summary: Summary,
                        progress_factory: ProgressFactory) -> None:
        total = sum(int(self.source.zcard(name)) for name in found.queues)
        progress = progress_factory(total)
        for name in found.queues:
            self.queues.dry_run_key(self.source, name, summary, progress)
        for name in found.dupefilters:
            crawl = legacy.dupefilter_crawl(name) or ("", "")
            self.dupefilters.dry_run_key(self.source, name,
                                         self.queues.seen_in_dry_run.get(crawl, set()), summary)
