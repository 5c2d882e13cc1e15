"""The demo's judgement is exact, and `scrapy-cluster demo` really passes on the embedded cluster."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest

from scrapy_cluster.demo.report import DemoReport, DomainRate, count_results, domain_rate


def test_domain_rate_flags_a_burst_over_the_limit() -> None:
    rate = domain_rate("127.0.0.9", 2, 1.0, [0.0, 0.1, 0.2, 5.0])
    assert (rate.requests, rate.max_in_window, rate.within_limit) == (4, 3, False)


def test_domain_rate_measures_use_of_the_limit_for_its_mode() -> None:
    moderated = domain_rate("h", 2, 1.0, [0.0, 0.5, 1.0, 1.5, 2.0], moderated=True)
    burst = domain_rate("h", 2, 1.0, [0.0, 0.0, 2.0, 2.0], moderated=False)
    assert (moderated.utilisation, burst.utilisation) == (1.0, 0.5)


def test_an_underused_busy_domain_fails_the_demo() -> None:
    slow = DomainRate("127.0.0.9", 5, 2.0, requests=20, max_in_window=2, achieved_per_s=0.5,
                      utilisation=0.2)
    assert report(rates=[slow]).failures() == [
        "127.0.0.9 used 20% of its limit of 5/2s over 20 requests (at least 50% expected): "
        "the throttle woke too late"]


def test_a_domain_with_too_few_requests_is_not_judged_for_use() -> None:
    short = DomainRate("127.0.0.9", 5, 2.0, requests=9, max_in_window=2, achieved_per_s=0.5,
                       utilisation=0.2)
    assert report(rates=[short]).failures() == []


def test_count_results_separates_responses_from_error_items() -> None:
    items = [{"url": "a", "status_code": 200}, {"url": "a", "status_code": 200},
             {"url": "b", "status_code": 404},
             {"url": "c", "status_code": None, "error": {"message": "Forbidden by robots.txt"}}]
    crawled, statuses, errors = count_results(items)
    assert crawled == Counter({"a": 2, "b": 1})
    assert statuses == {"a": 200, "b": 404}
    assert errors == {"c": "Forbidden by robots.txt"}


def report(**changes: object) -> DemoReport:
    base: dict[str, object] = dict(expected={"a", "b"}, crawled=Counter({"a": 1, "b": 1}),
                                   statuses={"a": 200, "b": 404}, disallowed_linked={"p"},
                                   disallowed_fetched=set(), errors={"p": "robots"})
    base.update(changes)
    return DemoReport(**base)  # type: ignore[arg-type]


def test_a_correct_crawl_has_no_failures() -> None:
    assert report().failures() == []


@pytest.mark.parametrize(("changes", "reason"), [
    ({"crawled": Counter({"a": 1})}, "1 expected page(s) not crawled: b"),
    ({"crawled": Counter({"a": 1, "b": 1, "x": 1})}, "1 unexpected page(s) crawled: x"),
    ({"crawled": Counter({"a": 2, "b": 1})}, "1 page(s) crawled more than once: a"),
    ({"disallowed_fetched": {"p"}}, "robots.txt-disallowed page(s) fetched: p"),
    ({"errors": {"b": "connection refused"}}, "1 page(s) failed: b (connection refused)"),
])
def test_each_kind_of_wrong_crawl_is_reported(changes: dict[str, object], reason: str) -> None:
    assert reason in report(**changes).failures()


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.xdist_group("cpu-sensitive")  # judges how fully each limit is used
def test_demo_command_crawls_the_demo_site_exactly() -> None:
    result = subprocess.run([sys.executable, "-m", "scrapy_cluster", "demo", "--no-progress"],
                            capture_output=True, text=True, timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "DEMO OK" in output
    totals = re.search(r"pages expected (\d+), crawled (\d+) \(duplicates (\d+)\)", output)
    assert totals is not None, output
    expected, crawled, duplicates = map(int, totals.groups())
    assert expected == crawled and expected >= 150 and duplicates == 0
    assert "robots.txt-disallowed pages linked 3, skipped 3" in output
    for host in ("127.0.0.21", "127.0.0.22", "127.0.0.23"):
        row = re.search(rf"^{re.escape(host)}\s+(\d+)\s+200x\d+.*\s(\d+)%\s+(\d+)/(\d+)$",
                        output, re.MULTILINE)
        assert row is not None, output
        pages, used_pct, peak, limit = map(int, row.groups())
        assert pages >= 50 and used_pct >= 50 and peak <= limit, row.group(0)
