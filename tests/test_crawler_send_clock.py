"""LateSendBook: which sends are late enough to move their throttle slot (pure, no server)."""

from __future__ import annotations

from scrapy_cluster.crawler.common.late_sends import LateSendBook
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


# --- the fresh slot of a late send (take_fresh_slot, both engines' rule) -------------------

class FrontierSeam:
    """The frontier's ``late_slot`` answers, in order, and the calls it got."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, int]] = []

    async def late_slot(self, domain: str, dispatched_ms: int) -> int:
        self.calls.append((domain, dispatched_ms))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self, now_s: float) -> None:
        self.now_s = now_s
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now_s += seconds


def fresh_slot(book: LateSendBook, lease_id: str, frontier: FrontierSeam, clock: Clock) -> int:
    import asyncio

    from scrapy_cluster.crawler.common.late_sends import take_fresh_slot

    return asyncio.run(take_fresh_slot(book, lease_id, frontier.late_slot, sleep=clock.sleep,
                                       clock=clock))


def test_a_request_within_the_allowance_costs_no_round_trip() -> None:
    book = LateSendBook(late_ms=20, urgent_ms=100)
    book.dispatched(leased("1"), received_at_s=50.0)
    frontier, clock = FrontierSeam(), Clock(50.1)
    assert fresh_slot(book, "1", frontier, clock) == 0
    assert frontier.calls == []


def test_a_late_request_waits_until_the_frontier_gives_it_a_fresh_slot() -> None:
    book = LateSendBook(late_ms=20, urgent_ms=100)
    book.dispatched(leased("1", "b.com", 7_000), received_at_s=50.0)
    frontier, clock = FrontierSeam(150, 30, 0), Clock(50.44)
    assert fresh_slot(book, "1", frontier, clock) == 3
    assert frontier.calls == [("b.com", 7_000)] * 3
    assert clock.slept == [0.15, 0.03]
    # measured from the fresh slot, the send is on time: nothing left to restamp
    assert book.sent("1", now_s=clock.now_s + 0.005) is None
    assert book.take() == []


def test_a_late_request_goes_on_its_stale_slot_when_redis_is_unreachable(caplog) -> None:
    book = LateSendBook(late_ms=20, urgent_ms=100)
    book.dispatched(leased("1", "b.com", 7_000), received_at_s=50.0)
    frontier, clock = FrontierSeam(ConnectionError("Redis is down")), Clock(50.5)
    with caplog.at_level("WARNING", logger="scrapy_cluster.crawler.common.late_sends"):
        assert fresh_slot(book, "1", frontier, clock) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "late send of b.com goes on its stale slot: Redis is down"]
    assert book.sent("1", now_s=50.5) == LateSend("b.com", 7_000, 7_500)  # restamped after


def test_an_unknown_or_unthrottled_request_costs_no_round_trip() -> None:
    book = LateSendBook(late_ms=20, urgent_ms=100)
    frontier, clock = FrontierSeam(), Clock(99.0)
    assert fresh_slot(book, "nope", frontier, clock) == 0
    assert frontier.calls == []
