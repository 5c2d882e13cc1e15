"""Sending the Redis Monitor's answers: ``<prefix>.outbound_firehose`` and, with
``KAFKA_APPID_TOPICS``, ``<prefix>.outbound_<appid>``.

Answers are buffered by the bus producer; the monitor flushes once per batch, before it
acknowledges the batch's jobs, so an answer is never lost to a crash (it may be sent twice).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapy_cluster.bus import topics


class AnswerSender:
    """Routes one answer to the firehose and, when enabled, to its app's topic."""

    def __init__(self, producer: Any, *, prefix: str, appid_topics: bool) -> None:
        self.producer = producer
        self.prefix = prefix
        self.appid_topics = appid_topics
        self.sent = 0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], producer: Any) -> AnswerSender:
        return cls(producer, prefix=str(settings["KAFKA_TOPIC_PREFIX"]),
                   appid_topics=bool(settings["KAFKA_APPID_TOPICS"]))

    def send(self, answer: Mapping[str, Any]) -> None:
        """Buffer ``answer`` (keyed by its uuid, so one request's answers keep their order)."""
        key = str(answer.get("uuid") or answer.get("crawlid") or "") or None
        self.producer.produce(topics.outbound_firehose(self.prefix), answer, key=key)
        appid = answer.get("appid")
        if self.appid_topics and isinstance(appid, str) and appid:
            self.producer.produce(topics.outbound_app(self.prefix, appid), answer, key=key)
        self.sent += 1

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every buffered answer is delivered (raises ``BusError`` otherwise)."""
        self.producer.flush(timeout_s)
