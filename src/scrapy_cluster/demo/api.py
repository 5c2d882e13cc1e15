"""Asking the cluster a question through the JSON API and waiting for its answer, as an
application would: feed the request to the incoming topic, read ``<prefix>.outbound_firehose``
until an answer with the request's ``uuid`` arrives."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from scrapy_cluster.bus import topics
from scrapy_cluster.kafka_monitor.feed import Feeder


class ApiClient:
    """Feeds requests and collects their answers by uuid (one outbound consumer)."""

    def __init__(self, bus: Any, settings: Mapping[str, Any]) -> None:
        self.producer = bus.producer()
        self.feeder = Feeder.from_settings(settings, self.producer)
        self.answers = bus.consumer([topics.outbound_firehose(settings["KAFKA_TOPIC_PREFIX"])],
                                    f"demo-api-{uuid.uuid4().hex[:8]}", from_beginning=True)
        self._seen: dict[str, dict[str, Any]] = {}

    def send(self, request: Mapping[str, Any]) -> str:
        """Feed one request; returns its uuid (added when missing, except to crawl requests,
        which have none: their answers are pages on the crawled topics)."""
        if "url" in request:
            self.feeder.feed_one(orjson.dumps(request))
            return ""
        uid = str(request.get("uuid") or uuid.uuid4().hex[:12])
        self.feeder.feed_one(orjson.dumps({**request, "uuid": uid}))
        return uid

    def wait(self, uids: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
        """The answers of ``uids`` that arrived within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(uid in self._seen for uid in uids):
            batch = self.answers.poll(max_messages=100, timeout_s=0.2)
            for message in batch:
                if isinstance(message.value, dict) and message.value.get("uuid"):
                    self._seen[str(message.value["uuid"])] = message.value
            self.answers.ack(batch)
        return {uid: self._seen[uid] for uid in uids if uid in self._seen}

    def ask(self, request: Mapping[str, Any], timeout_s: float = 15.0) -> dict[str, Any] | None:
        uid = self.send(request)
        return self.wait([uid], timeout_s).get(uid)

    def close(self) -> None:
        self.producer.close()
        self.answers.close()
