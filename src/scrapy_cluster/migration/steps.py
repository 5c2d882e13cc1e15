"""The small imports: stopped crawls, crawl expiries and the operators' domain configuration.

Each is safe to repeat: blacklist members are added (SADD), expiries registered only when
absent (ZADD NX, SET NX), and the domain document written only when the merge changes it.
"""

from __future__ import annotations

import dataclasses

import redis

from scrapy_cluster import keys
from scrapy_cluster.domain_config import DomainConfigStore, DomainDocument, update
from scrapy_cluster.migration import legacy
from scrapy_cluster.migration.summary import Summary


def import_blacklists(source: redis.Redis, target: redis.Redis, names: list[str],
                      summary: Summary, *, dry_run: bool) -> None:
    """``<appid>||<crawlid>`` members become crawlids in our ``<spiderid>:blacklist`` (same
    key; original members are left in place, harmless). Round trips: 2 per key."""
    for name in names:
        spiderid = legacy.blacklist_spiderid(name, reserved=frozenset())
        assert spiderid is not None
        members = source.smembers(name)
        crawlids = sorted({legacy.blacklisted_crawlid(m) for m in members})
        if not crawlids:
            continue
        target_key = keys.crawl_blacklist(spiderid)
        if dry_run:
            known = target.smismember(target_key, crawlids)
            summary.blacklisted_crawls += sum(1 for flag in known if not flag)
        else:
            summary.blacklisted_crawls += int(target.sadd(target_key, *crawlids))


def import_timeouts(source: redis.Redis, target: redis.Redis, names: list[str],
                    summary: Summary, *, same: bool, dry_run: bool) -> None:
    """Register each ``timeout:<spiderid>:<appid>:<crawlid>`` in ``redis-monitor:timeouts`` (as
    the Kafka Monitor does), so the Redis Monitor expires the crawl. Round trips: 2 per
    1,000 keys."""
    for start in range(0, len(names), 1000):
        page = names[start:start + 1000]
        values = source.mget(page)
        expiries = {}
        for name, value in zip(page, values, strict=True):
            expiry = legacy.timeout_expiry(value)
            if expiry is None:
                summary.skipped.append(f"{name}: value {value!r} is not an epoch time")
            else:
                expiries[name] = expiry
        if not expiries:
            continue
        if dry_run:
            scores = target.zmscore(keys.crawl_timeouts(), list(expiries))
            summary.timeouts += sum(1 for score in scores if score is None)
            continue
        pipe = target.pipeline(transaction=True)
        if not same:
            for name, expiry in expiries.items():
                pipe.set(name, expiry, nx=True)
        pipe.zadd(keys.crawl_timeouts(), expiries, nx=True)
        summary.timeouts += int(pipe.execute()[-1])


def merge_documents(ours: DomainDocument, theirs: DomainDocument,
                    summary: Summary) -> DomainDocument:
    """``ours`` plus the original's throttles and blacklist; a domain both configure keeps
    ours (reported in ``summary.domain_conflicts``). Our re-crawl defaults are kept (the
    original had none), and so are the sitemaps defaults."""
    throttles = dict(ours.throttles)
    for domain, throttle in sorted(theirs.throttles.items()):
        if domain not in throttles:
            throttles[domain] = throttle
            summary.domain_throttles += 1
        elif throttles[domain] != throttle:
            summary.domain_conflicts.append(f"throttle of {domain} (the original's differs)")
    added = theirs.blacklist - ours.blacklist
    summary.domain_blacklisted += len(added)
    return dataclasses.replace(ours, throttles=throttles, blacklist=ours.blacklist | added)


def import_domain_config(store: DomainConfigStore, theirs: DomainDocument, summary: Summary,
                         *, dry_run: bool) -> None:
    """Merge the original's document into ours through the store (a compare-and-set, so a
    concurrent ``domain-update`` is not lost). Nothing is written when nothing changes."""
    current = store.read().document
    if dry_run or merge_documents(current, theirs, Summary()) == current:
        merge_documents(current, theirs, summary)
        return
    counted: list[Summary] = []

    def change(document: DomainDocument) -> DomainDocument:
        counted.append(Summary())
        return merge_documents(document, theirs, counted[-1])

    update(store, change)
    last = counted[-1]
    summary.domain_throttles += last.domain_throttles
    summary.domain_blacklisted += last.domain_blacklisted
    summary.domain_conflicts += last.domain_conflicts

