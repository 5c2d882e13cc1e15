"""LeaseBook: finished leases are acknowledged, given-back leases released and never acked."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis.exceptions

from scrapy_cluster.crawler.lease_book import LeaseBook


class RecordingFrontier:
    """Our own seam: records ack/release calls; ``down`` makes every call fail like Redis."""

    def __init__(self) -> None:
        self.acked: list[str] = []
        self.released: list[str] = []
        self.down = False

    def ack(self, lease_ids: list[str], *,
            funnel: Mapping[tuple[str, str], Mapping[str, int]] | None = None) -> int:
        if self.down:
            raise redis.exceptions.ConnectionError("Connection refused")
        self.acked += lease_ids
        return len(lease_ids)

    def release(self, lease_ids: list[str], *, priority_delta: int = 0) -> int:
        if self.down:
            raise redis.exceptions.ConnectionError("Connection refused")
        self.released += lease_ids
        return len(lease_ids)


def book_with(frontier: RecordingFrontier, *lease_ids: str) -> LeaseBook:
    book = LeaseBook(frontier, logger=logging.getLogger("test.leases"))
    for lease_id in lease_ids:
        book.hold(lease_id, {"url": f"http://a.test/{lease_id}"})
    return book


def test_a_given_back_lease_is_released_at_the_next_flush_and_never_acked() -> None:
    frontier = RecordingFrontier()
    book = book_with(frontier, "a", "b")
    assert book.give_back("a") is True
    book.outputs_done("a")  # the callback's finally still runs: it must not ack
    book.outputs_done("b")
    assert book.flush() == 1
    assert (frontier.released, frontier.acked) == (["a"], ["b"])
    assert book.held_count == 0


def test_a_release_that_fails_is_tried_again_at_the_following_flush() -> None:
    frontier = RecordingFrontier()
    book = book_with(frontier, "a")
    book.give_back("a")
    frontier.down = True
    assert book.flush() == 0
    assert frontier.released == []
    frontier.down = False
    book.flush()
    assert frontier.released == ["a"]
    book.flush()
    assert frontier.released == ["a"], "released twice"


def test_giving_back_a_lease_not_held_changes_nothing() -> None:
    frontier = RecordingFrontier()
    book = book_with(frontier, "a")
    book.finish("a")
    assert book.give_back("a") is False
    assert book.give_back(None) is False
    book.flush()
    assert (frontier.released, frontier.acked) == ([], ["a"])


def test_release_all_at_shutdown_includes_given_back_leases() -> None:
    frontier = RecordingFrontier()
    book = book_with(frontier, "a", "b")
    book.give_back("a")
    assert book.release_all() == 2
    assert sorted(frontier.released) == ["a", "b"]
