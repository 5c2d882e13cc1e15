"""Result items to the bus for the fast engine: ``pipelines.BusPipeline``'s rules on asyncio.

Every item goes to ``<prefix>.crawled_firehose`` (and ``<prefix>.crawled_<appid>`` with
KAFKA_APPID_TOPICS), key = crawlid, cut to the bus limit (``items.fit_encoded``) and encoded
once: the producer gets that JSON as an ``orjson.Fragment`` and sends it byte for byte (both
buses encode a value with ``orjson.dumps``, which copies a fragment as it is). ``produce``
only buffers; ``confirm`` (before each ack batch) flushes in a worker thread and raises when a
produce or the flush failed, so the batch is released instead of acknowledged. Items the bus
confirmed are counted ``delivered`` in their crawl's funnel.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import orjson

from scrapy_cluster.bus import topics
from scrapy_cluster.crawler.common.funnel import FunnelCounter
from scrapy_cluster.crawler.common.items import fit_encoded, fit_to_limit
from scrapy_cluster.errors import BusError, MessageTooLargeError

FLUSH_TIMEOUT_S = 10.0
logger = logging.getLogger(__name__)


class ItemSender:
    """Buffers items on the bus producer; ``confirm`` says they were delivered."""

    def __init__(self, producer: Any, *, prefix: str, appid_topics: bool, max_bytes: int,
                 funnel: FunnelCounter | None = None) -> None:
        self.producer, self.prefix, self.appid_topics = producer, prefix, appid_topics
        self.max_bytes, self.funnel = max_bytes, funnel
        self._failure: BaseException | None = None
        self._unconfirmed: Counter[tuple[str, str]] = Counter()

    def send(self, item: dict[str, Any]) -> None:
        """Produce ``item`` (buffered, no flush; no round trip)."""
        data, raw = fit_encoded(item, self.max_bytes)
        value = orjson.Fragment(raw)
        key = str(data.get("crawlid") or "") or None
        names = [topics.crawled_firehose(self.prefix)]
        if self.appid_topics and data.get("appid"):
            names.append(topics.crawled_app(self.prefix, str(data["appid"])))
        for topic in names:
            self._produce(topic, data, value, key)
        if key is not None and data.get("spiderid"):
            self._unconfirmed[(str(data["spiderid"]), key)] += 1

    def _produce(self, topic: str, data: dict[str, Any], value: orjson.Fragment,
                 key: str | None) -> None:
        """``value``: the JSON of ``data``."""
        try:
            try:
                self.producer.produce(topic, value, key=key)
            except MessageTooLargeError:
                smaller = fit_to_limit(data, self.max_bytes // 2)
                self.producer.produce(topic, {**smaller, "body_truncated": True}, key=key)
        except BusError as exc:
            self._failure = exc
            logger.error("result item not sent to the bus: %s", exc,
                         extra={"url": data.get("url")})

    async def confirm(self) -> None:
        """Raise unless everything produced so far was delivered (flush in a thread)."""
        failure, self._failure = self._failure, None
        unconfirmed, self._unconfirmed = self._unconfirmed, Counter()
        if failure is not None:
            raise failure
        await asyncio.to_thread(self.producer.flush, FLUSH_TIMEOUT_S)
        if self.funnel is not None:
            for (spiderid, crawlid), count in unconfirmed.items():
                self.funnel.add({"spiderid": spiderid, "crawlid": crawlid}, "delivered", count)

    def close(self) -> None:
        self.producer.close()
