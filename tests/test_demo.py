"""The demo's judgement is exact, and `scrapy-cluster demo` really passes on the embedded cluster."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest

from scrapy_cluster.demo.report import DemoReport, count_results, domain_rate, max_in_window


def test_max_in_window_counts_half_open_windows() -> None:
    assert max_in_window([0.0, 0.5, 1.0, 1.2, 1.4], 1.0) == 4
    assert max_in_window([0.0, 0.999, 1.0], 1.0) == 2
    assert max_in_window([], 1.0) == 0


def test_domain_rate_flags_a_burst_over_the_limit() -> None:
    rate = domain_rate("127.0.0.9", 2, 1.0, [0.0, 0.1, 0.2, 5.0])
    assert (rate.requests, rate.max_in_window, rate.within_limit) == (4, 3, False)


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
def test_demo_command_crawls_the_demo_site_exactly() -> None:
    result = subprocess.run([sys.executable, "-m", "scrapy_cluster", "demo", "--no-progress"],
                            capture_output=True, text=True, timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "DEMO OK" in output
    totals = re.search(r"pages expected (\d+), crawled (\d+) \(duplicates (\d+)\)", output)
    assert totals is not None, output
    expected, crawled, duplicates = map(int, totals.groups())
    assert expected == crawled and expected >= 10 and duplicates == 0
    assert "robots.txt-disallowed pages linked 1, skipped 1" in output
    for host in ("127.0.0.21", "127.0.0.22", "127.0.0.23"):
        assert re.search(rf"^{re.escape(host)}\s+\d+\s+200x\d+", output, re.MULTILINE), output
