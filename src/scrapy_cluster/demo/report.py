"""Judge a demo crawl and render its summary; pure functions over what was observed."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scrapy_cluster.sitegen.throttle_measure import Limit, max_in_window, span_utilisation

MIN_UTILISATION = 0.5
"""A domain kept busy must use at least this share of its limit (the demo fails otherwise)."""


@dataclass(frozen=True)
class DomainRate:
    host: str
    limit_hits: int
    window_s: float
    requests: int
    max_in_window: int
    achieved_per_s: float
    utilisation: float | None = None

    @property
    def limit_per_s(self) -> float:
        return self.limit_hits / self.window_s

    @property
    def within_limit(self) -> bool:
        return self.max_in_window <= self.limit_hits

    @property
    def judged_for_use(self) -> bool:
        """Enough requests (two windows' worth) that the domain had backlog to use its limit."""
        return self.utilisation is not None and self.requests >= 2 * self.limit_hits

    @property
    def underused(self) -> bool:
        return self.judged_for_use and (self.utilisation or 0.0) < MIN_UTILISATION


@dataclass
class DemoReport:
    expected: set[str]
    crawled: Counter[str]
    statuses: dict[str, int]
    disallowed_linked: set[str]
    disallowed_fetched: set[str]
    errors: dict[str, str] = field(default_factory=dict)
    rates: list[DomainRate] = field(default_factory=list)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """API answers by name: ``info`` (asked halfway through the crawl) and ``stats``."""
    api_failures: list[str] = field(default_factory=list)

    @property
    def unexplained_errors(self) -> dict[str, str]:
        """Error items other than the robots.txt refusals the demo expects."""
        return {url: error for url, error in self.errors.items()
                if url not in self.disallowed_linked}

    @property
    def missing(self) -> set[str]:
        return self.expected - set(self.crawled)

    @property
    def unexpected(self) -> set[str]:
        return set(self.crawled) - self.expected

    @property
    def duplicates(self) -> dict[str, int]:
        return {url: n for url, n in self.crawled.items() if n > 1}

    def failures(self) -> list[str]:
        """Why the demo failed; empty when every check passed."""
        reasons = list(self.api_failures)
        if self.missing:
            reasons.append(f"{len(self.missing)} expected page(s) not crawled: "
                           + ", ".join(sorted(self.missing)[:5]))
        if self.unexpected:
            reasons.append(f"{len(self.unexpected)} unexpected page(s) crawled: "
                           + ", ".join(sorted(self.unexpected)[:5]))
        if self.duplicates:
            reasons.append(f"{len(self.duplicates)} page(s) crawled more than once: "
                           + ", ".join(sorted(self.duplicates)[:5]))
        if self.unexplained_errors:
            reasons.append(f"{len(self.unexplained_errors)} page(s) failed: " + ", ".join(
                f"{url} ({error})" for url, error in sorted(self.unexplained_errors.items())[:5]))
        if self.disallowed_fetched:
            reasons.append("robots.txt-disallowed page(s) fetched: "
                           + ", ".join(sorted(self.disallowed_fetched)))
        reasons += [f"{rate.host} exceeded its limit: {rate.max_in_window} requests in "
                    f"{rate.window_s:g}s (limit {rate.limit_hits})"
                    for rate in self.rates if not rate.within_limit]
        reasons += [f"{rate.host} used {rate.utilisation:.0%} of its limit of "
                    f"{rate.limit_hits}/{rate.window_s:g}s over {rate.requests} requests "
                    f"(at least {MIN_UTILISATION:.0%} expected): the throttle woke too late"
                    for rate in self.rates if rate.underused]
        return reasons


def domain_rate(host: str, limit_hits: int, window_s: float, times_s: Sequence[float], *,
                moderated: bool = True) -> DomainRate:
    """What the site saw of one domain: requests, the busiest window, rate and utilisation."""
    span_s = (max(times_s) - min(times_s)) if len(times_s) > 1 else 0.0
    achieved = (len(times_s) - 1) / span_s if span_s > 0 else 0.0
    return DomainRate(host, limit_hits, window_s, len(times_s), max_in_window(times_s, window_s),
                      achieved, span_utilisation(times_s, Limit(limit_hits, window_s),
                                                 moderated=moderated))


def render_summary(report: DemoReport) -> str:
    """The table the demo prints: pages and statuses per domain, rate vs limit, robots."""
    per_domain: dict[str, Counter[int]] = defaultdict(Counter)
    for url in report.crawled:
        per_domain[urlsplit(url).hostname or "?"][report.statuses.get(url, 0)] += 1
    lines = ["", "Demo crawl summary", "",
             f"{'domain':<14}{'pages':>6}  {'statuses':<22}{'limit':>14}{'achieved':>12}"
             f"{'used':>7}{'max/window':>12}"]
    rates = {rate.host: rate for rate in report.rates}
    for host in sorted(set(per_domain) | set(rates)):
        statuses = per_domain.get(host, Counter())
        status_text = ", ".join(f"{code}x{n}" for code, n in sorted(statuses.items()))
        rate = rates.get(host)
        limit = f"{rate.limit_hits}/{rate.window_s:g}s" if rate else "-"
        achieved = f"{rate.achieved_per_s:.2f}/s" if rate else "-"
        used = f"{rate.utilisation:.0%}" if rate and rate.utilisation is not None else "-"
        peak = f"{rate.max_in_window}/{rate.limit_hits}" if rate else "-"
        lines.append(f"{host:<14}{sum(statuses.values()):>6}  {status_text:<22}{limit:>14}"
                     f"{achieved:>12}{used:>7}{peak:>12}")
    lines += ["", f"pages expected {len(report.expected)}, crawled {len(report.crawled)} "
              f"(duplicates {len(report.duplicates)})",
              f"robots.txt-disallowed pages linked {len(report.disallowed_linked)}, "
              f"skipped {len(report.disallowed_linked - report.disallowed_fetched)}"]
    lines += render_answers(report.answers)
    return "\n".join(lines)


def render_answers(answers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The API answers the demo asked for, in a few lines each."""
    lines: list[str] = []
    info = answers.get("info")
    if info:
        domains = ", ".join(f"{name} {counts['total']}" for name, counts in
                            sorted(info.get("domains", {}).items()))
        lines += ["", "info answer (asked halfway, through the API):",
                  f"  crawl {info.get('crawlid')}: {info.get('total_pending')} pending over "
                  f"{info.get('total_domains')} domain(s)" + (f" ({domains})" if domains else "")]
    stats = answers.get("stats")
    if stats:
        spiders = stats.get("spiders", {})
        codes = {code: windows.get("lifetime", 0)
                 for code, windows in spiders.get("link", {}).items() if code != "count"}
        lines += ["", "stats answer (crawler, through the API):",
                  f"  live spiders {spiders.get('total_spider_count')}, link responses "
                  f"(lifetime) {codes}, machines {stats.get('machines', {}).get('count')}, "
                  f"backlog {stats.get('queues', {}).get('total_backlog')}"]
    return lines


def count_results(items: Iterable[Mapping[str, object]]) -> tuple[Counter[str], dict[str, int],
                                                                   dict[str, str]]:
    """Fetched URL counts, each fetched URL's status code, and the error of each URL that
    produced an error item instead of a response (robots.txt refusals, connection errors)."""
    crawled: Counter[str] = Counter()
    statuses: dict[str, int] = {}
    errors: dict[str, str] = {}
    for item in items:
        url = str(item.get("url"))
        status = item.get("status_code")
        if isinstance(status, int):
            crawled[url] += 1
            statuses[url] = status
            continue
        error = item.get("error")
        message = error.get("message") if isinstance(error, Mapping) else None
        errors[url] = str(message or error or "no status and no error")
    return crawled, statuses, errors
