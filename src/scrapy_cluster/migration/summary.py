"""What one ``migrate`` run did, and how it is printed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from scrapy_cluster import keys


@dataclass
class Summary:
    """Counts of one run. ``moved`` counts changes written to the target; a run that finds
    everything already imported reports 0."""

    dry_run: bool = False
    domain_throttles: int = 0
    domain_blacklisted: int = 0
    domain_conflicts: list[str] = field(default_factory=list)
    blacklisted_crawls: int = 0
    timeouts: int = 0
    queue_keys: int = 0
    queued: int = 0
    duplicates: int = 0
    stopped_crawl_requests: int = 0
    rejected: int = 0
    rejected_reasons: list[str] = field(default_factory=list)
    mapped_fields: Counter[str] = field(default_factory=Counter)
    """Original fields carried over in another form, by label (``migration/fields.py``)."""
    dropped_fields: Counter[str] = field(default_factory=Counter)
    """Original fields left out of the imported requests, by label."""
    fingerprints_of_queued: int = 0
    fingerprints_from_seen_urls: int = 0
    fingerprints_not_convertible: int = 0
    dupefilters_of_stopped_crawls: int = 0
    schema_steps: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def fingerprints(self) -> int:
        """Original dupefilter digests handled by this run."""
        return (self.fingerprints_of_queued + self.fingerprints_from_seen_urls
                + self.fingerprints_not_convertible)

    @property
    def moved(self) -> int:
        return (self.domain_throttles + self.domain_blacklisted + self.blacklisted_crawls
                + self.timeouts + self.queued + self.fingerprints_from_seen_urls)

    def lines(self) -> list[str]:
        """The report printed at the end of a run."""
        verb = "would move" if self.dry_run else "moved"
        lines = [
            f"{verb} {self.moved} item(s)" + (" (nothing to do: already migrated)"
                                              if self.moved == 0 and not self.rejected else ""),
            f"  domain config: {self.domain_throttles} throttle(s), {self.domain_blacklisted} "
            f"blacklisted domain(s)",
            f"  stopped crawls blacklisted: {self.blacklisted_crawls}",
            f"  crawl expiries registered: {self.timeouts}",
            f"  requests queued: {self.queued} from {self.queue_keys} original queue(s)",
        ]
        lines += [f"  {kind} fields: {_tally(counts)}" for kind, counts in
                  (("mapped", self.mapped_fields), ("dropped", self.dropped_fields)) if counts]
        if self.duplicates:
            lines.append(f"  skipped {self.duplicates} duplicate request(s) (same URL already "
                         "queued or seen by its crawl)")
        if self.stopped_crawl_requests:
            lines.append(f"  skipped {self.stopped_crawl_requests} request(s) of stopped or "
                         "expired crawls (blacklisted)")
        if self.rejected:
            where = "not written (dry run)" if self.dry_run else \
                f"kept in Redis list {keys.migration_rejected()}"
            lines.append(f"  rejected {self.rejected} request(s) our crawl schema refuses, "
                         f"{where}:")
            lines += [f"    {reason}" for reason in self.rejected_reasons]
        if self.fingerprints or self.dupefilters_of_stopped_crawls:
            lines.append(
                f"  dupefilters: {self.fingerprints} original fingerprint(s): "
                f"{self.fingerprints_of_queued} of requests imported above, "
                f"{self.fingerprints_from_seen_urls} converted from --seen-urls, "
                f"{self.fingerprints_not_convertible} not convertible (SHA1 digests of URLs "
                "we cannot know; see docs/migration.md)")
        if self.dupefilters_of_stopped_crawls:
            lines.append(f"  dropped {self.dupefilters_of_stopped_crawls} dupefilter(s) of "
                         "stopped crawls")
        lines += [f"  kept yours: {conflict}" for conflict in self.domain_conflicts]
        lines += [f"  {step}" for step in self.schema_steps]
        lines += [f"  skipped: {reason}" for reason in self.skipped]
        return lines


def _tally(counts: Counter[str]) -> str:
    """``ts × 3, meta.ts × 2``: labels by name, each with its count."""
    return ", ".join(f"{label} × {count}" for label, count in sorted(counts.items()))
