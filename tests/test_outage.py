"""QuietFailures: one connection-failure line per quiet period, the count of dropped ones."""

from __future__ import annotations

import logging

import pytest

from scrapy_cluster.outage import QuietFailures

REFUSED = ("FAIL [rdkafka#consumer-2] [thrd:127.0.0.1:9092/bootstrap]: Connect to "
           "ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def captured(caplog: pytest.LogCaptureFixture) -> tuple[logging.Logger, logging.Logger, Clock,
                                                        pytest.LogCaptureFixture]:
    clock = Clock()
    quiet = QuietFailures(quiet_s=60, clock=clock)
    first, second = logging.getLogger("test.quiet.a"), logging.getLogger("test.quiet.b")
    for logger in (first, second):
        logger.filters.clear()
        logger.addFilter(quiet)
    caplog.set_level(logging.DEBUG, logger="test.quiet")
    return first, second, clock, caplog


def test_repeated_connection_failures_of_several_clients_give_one_line(captured: tuple) -> None:
    first, second, clock, caplog = captured
    for _ in range(50):
        first.error(REFUSED)
        second.warning("Kafka client error: KafkaError{code=_TRANSPORT,val=-195}")
        clock.now += 0.05
    second.warning("Kafka client error: KafkaError{code=_ALL_BROKERS_DOWN,str=\"1/1 brokers are down\"}")
    assert [record.getMessage() for record in caplog.records] == [REFUSED]


def test_after_the_quiet_period_the_next_failure_says_how_many_were_dropped(
        captured: tuple) -> None:
    first, _, clock, caplog = captured
    for _ in range(3):
        first.error(REFUSED)
    clock.now += 61
    first.error("Connect to ipv4#127.0.0.1:9092 failed: Connection refused")
    assert [record.getMessage() for record in caplog.records] == [
        REFUSED, "Connect to ipv4#127.0.0.1:9092 failed: Connection refused "
                 "(2 similar lines dropped)"]


def test_other_lines_always_pass(captured: tuple) -> None:
    first, _, _, caplog = captured
    first.error(REFUSED)
    first.warning("commit skipped during a rebalance")
    first.warning("commit skipped during a rebalance")
    assert [record.getMessage() for record in caplog.records] == [
        REFUSED, "commit skipped during a rebalance", "commit skipped during a rebalance"]
