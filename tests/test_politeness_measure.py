"""How politeness is judged from a site's request log (pure functions, no server)."""

from __future__ import annotations

import pytest

from scrapy_cluster.sitegen.throttle_measure import (
    Limit,
    gaps,
    max_in_window,
    percentile,
    span_utilisation,
    utilisation,
)


def test_max_in_window_counts_half_open_windows() -> None:
    assert max_in_window([0.0, 0.5, 1.0, 1.2, 1.4], 1.0) == 4
    assert max_in_window([1.0, 0.999, 0.0], 1.0) == 2
    assert max_in_window([], 1.0) == 0


def test_evenly_spaced_requests_at_the_limit_use_all_of_it() -> None:
    times = [i * 0.5 for i in range(40)]
    assert utilisation(times, Limit(2, 1.0), 2.0, 12.0) == pytest.approx(1.0)


@pytest.mark.parametrize("start", [0.0, 0.3, 0.999, 1.5])
def test_bursts_at_the_limit_use_all_of_it_wherever_the_interval_starts(start: float) -> None:
    times = [window * 2.0 for window in range(20) for _ in range(4)]
    assert utilisation(times, Limit(4, 2.0), start, start + 20.0) == pytest.approx(1.0)


def test_half_the_rate_is_half_the_limit() -> None:
    times = [float(i) for i in range(30)]
    assert utilisation(times, Limit(2, 1.0), 5.0, 25.0) == pytest.approx(0.5)


def test_utilisation_needs_more_than_one_window() -> None:
    with pytest.raises(ValueError):
        utilisation([0.0], Limit(2, 1.0), 0.0, 1.0)


def test_span_utilisation_of_a_finished_crawl() -> None:
    assert span_utilisation([0.0, 0.5, 1.0, 2.0], Limit(2, 1.0), moderated=True) == 0.75
    assert span_utilisation([0.0, 0.0, 1.0, 1.0, 4.0], Limit(2, 1.0), moderated=False) == 0.5
    assert span_utilisation([0.0, 0.0], Limit(2, 1.0), moderated=False) is None
    assert span_utilisation([3.0], Limit(2, 1.0), moderated=True) is None


def test_gaps_and_percentiles() -> None:
    assert gaps([2.0, 0.0, 0.5]) == [0.5, 1.5]
    assert (percentile([3.0, 1.0, 2.0], 0.0), percentile([3.0, 1.0, 2.0], 0.5),
            percentile([3.0, 1.0, 2.0], 1.0)) == (1.0, 2.0, 3.0)
    with pytest.raises(ValueError):
        percentile([], 0.5)
