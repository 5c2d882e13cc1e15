"""Feeding API requests onto the incoming topic, validated locally first.

``feed_one`` sends one request and waits for the bus to confirm it (within
KAFKA_FEED_TIMEOUT). ``feed_lines`` sends many (JSON lines), confirming them
in chunks so a failed delivery is attributed to the requests of its chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from scrapy_cluster.api.validation import Accepted, RequestValidator
from scrapy_cluster.errors import BusError, ValidationError
from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes

FLUSH_EVERY = 1000
ERRORS_KEPT = 20


class FeedProducer(Protocol):
    def produce(self, topic: str, value: Any, *, key: str | bytes | None = None) -> None: ...

    def flush(self, timeout_s: float = 10.0) -> None: ...


@dataclass
class FeedSummary:
    """Counts of a multi-request feed; ``errors`` keeps the first ERRORS_KEPT reasons."""

    sent: int = 0
    failed: int = 0
    invalid: int = 0
    errors: list[str] = field(default_factory=list)

    def note(self, error: str) -> None:
        if len(self.errors) < ERRORS_KEPT:
            self.errors.append(error)


def parse_request(validator: RequestValidator, text: str | bytes) -> tuple[str, dict[str, Any]]:
    """``(plugin, request)`` for valid JSON some plugin accepts; else ``ValidationError``."""
    try:
        message = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"not valid JSON: {exc}") from exc
    match = validator.match(message)
    if not isinstance(match, Accepted):
        raise ValidationError(match.reason)
    return match.plugin, message


class Feeder:
    """Validates requests with the plugins' schemas and produces them to ``topic``."""

    def __init__(self, *, producer: FeedProducer, validator: RequestValidator, topic: str,
                 timeout_s: float, flush_every: int = FLUSH_EVERY) -> None:
        self.producer = producer
        self.validator = validator
        self.topic = topic
        self.timeout_s = timeout_s
        self.flush_every = flush_every

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], producer: FeedProducer,
                      validator: RequestValidator | None = None) -> Feeder:
        return cls(producer=producer,
                   validator=validator or build_validator(plugin_classes(settings), settings),
                   topic=str(settings["KAFKA_INCOMING_TOPIC"]),
                   timeout_s=float(settings["KAFKA_FEED_TIMEOUT"]))

    def parse(self, text: str | bytes) -> tuple[str, dict[str, Any]]:
        """``(plugin, request)`` for valid JSON some plugin accepts; else ``ValidationError``."""
        return parse_request(self.validator, text)

    def feed_one(self, text: str | bytes) -> tuple[str, dict[str, Any]]:
        """Validate, produce and confirm one request; returns ``(plugin, request)``.

        Raises ``ValidationError`` (nothing sent) or ``BusError`` (not confirmed in time).
        """
        plugin, message = self.parse(text)
        self.send(message)
        return plugin, message

    def send(self, message: dict[str, Any]) -> None:
        """Produce one already validated request and wait for the bus to confirm it."""
        self.producer.produce(self.topic, message)
        self.producer.flush(self.timeout_s)

    def feed_lines(self, lines: Iterable[str | bytes],
                   progress: Callable[[int], None] = lambda done: None) -> FeedSummary:
        """Feed one request per non-blank line; invalid lines are counted and skipped."""
        summary = FeedSummary()
        pending = 0
        for number, line in enumerate(lines, start=1):
            if line.strip():
                pending += self._feed_line(number, line, summary)
            if pending >= self.flush_every:
                self._confirm(pending, summary)
                pending = 0
            progress(1)
        self._confirm(pending, summary)
        return summary

    def _feed_line(self, number: int, line: str | bytes, summary: FeedSummary) -> int:
        try:
            _, message = self.parse(line)
        except ValidationError as exc:
            summary.invalid += 1
            summary.note(f"line {number}: {exc.reason}")
            return 0
        try:
            self.producer.produce(self.topic, message)
        except BusError as exc:
            summary.failed += 1
            summary.note(f"line {number}: {exc}")
            return 0
        return 1

    def _confirm(self, pending: int, summary: FeedSummary) -> None:
        if not pending:
            return
        try:
            self.producer.flush(self.timeout_s)
            summary.sent += pending
        except BusError as exc:
            summary.failed += pending
            summary.note(f"{pending} requests not confirmed by the bus: {exc}")
