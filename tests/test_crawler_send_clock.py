"""LateSendBook: which sends are late enough to move their throttle slot (pure, no server)."""

from __future__ import annotations

from scrapy_cluster.crawler.send_clock import LateSendBook
from scrapy_cluster.frontier import LateSend, LeasedRequest


def leased(lease_id: str, domain: str = "a.com", dispatched_ms: int = 1_000) -> LeasedRequest:
    return LeasedRequest(request={}, lease_id=lease_id, domain=domain,
                         dispatched_at_ms=dispatched_ms)


def test_a_prompt_send_is_not_reported() -> None:
    book = LateSendBook(late_ms=10)
    book.dispatched(leased("1"), received_at_s=50.0)
    assert book.sent("1", now_s=50.009) is None
    assert (book.take(), len(book)) == ([], 0)


def test_a_late_send_is_reported_on_the_frontier_clock() -> None:
    book = LateSendBook(late_ms=10)
    book.dispatched(leased("1", "b.com", 7_000), received_at_s=50.0)
    expected = LateSend("b.com", 7_000, 7_250)
    assert book.sent("1", now_s=50.25) == expected
    assert book.take() == [expected]
    assert book.take() == []


def test_only_the_first_send_of_a_lease_counts() -> None:
    """A redirect keeps the lease id of the request it replaces; only the first send is timed."""
    book = LateSendBook(late_ms=10)
    book.dispatched(leased("1"), received_at_s=50.0)
    assert book.sent("1", now_s=50.0) is None
    assert book.sent("1", now_s=53.0) is None
    assert book.take() == []


def test_requests_without_a_lease_are_ignored() -> None:
    book = LateSendBook(late_ms=10)
    assert book.sent(None, now_s=1.0) is None
    assert book.sent("unknown", now_s=1.0) is None


def test_a_lease_finished_unsent_is_forgotten() -> None:
    book = LateSendBook(late_ms=10)
    book.dispatched(leased("1"), received_at_s=50.0)
    book.dispatched(leased("2"), received_at_s=50.0)
    book.forget("1")
    book.forget(None)
    assert len(book) == 1
    assert book.sent("1", now_s=60.0) is None


def test_a_send_later_than_the_urgent_limit_is_urgent() -> None:
    book = LateSendBook(late_ms=20, urgent_ms=100)
    assert not book.is_urgent(LateSend("a.com", 1_000, 1_099))
    assert book.is_urgent(LateSend("a.com", 1_000, 1_100))
    assert LateSendBook(late_ms=20).urgent_ms == 20


def test_a_request_of_an_unthrottled_domain_is_not_tracked() -> None:
    book = LateSendBook(late_ms=10)
    book.dispatched(LeasedRequest(request={}, lease_id="1", domain="a.com",
                                  dispatched_at_ms=1_000, throttled=False), received_at_s=50.0)
    assert len(book) == 0
    assert book.sent("1", now_s=60.0) is None
