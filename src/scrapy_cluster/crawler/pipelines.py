"""The item pipeline that sends result items to the bus.

Every item goes to ``<prefix>.crawled_firehose`` and, with ``KAFKA_APPID_TOPICS``, to
``<prefix>.crawled_<appid>`` (message key: the crawlid). An item larger than the bus limit is
cut to fit (``items.fit_to_limit``); nothing is dropped silently. A produce that fails is
remembered: the next lease acknowledgement (``confirm``, run before each ack batch) raises, so
the batch is released and the pages crawled again instead of being lost. Items confirmed by
the bus are counted as ``delivered`` in their crawl's URL funnel (``funnel.py``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from itemadapter import ItemAdapter
from scrapy import Spider, signals
from scrapy.crawler import Crawler

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.crawler.common.funnel import FunnelCounter
from scrapy_cluster.crawler.common.items import fit_encoded, fit_to_limit
from scrapy_cluster.crawler.common.resolution import cluster_settings
from scrapy_cluster.crawler.funnel_hooks import funnel_for
from scrapy_cluster.crawler.middlewares import cluster_scheduler
from scrapy_cluster.errors import BusError, MessageTooLargeError

ENVELOPE_MARGIN_BYTES = 1024
FLUSH_TIMEOUT_S = 10.0
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ItemRouting:
    """Where items go and how large they may be: KAFKA_TOPIC_PREFIX, KAFKA_APPID_TOPICS and
    BUS_MAX_MESSAGE_BYTES."""

    prefix: str
    appid_topics: bool
    max_bytes: int

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ItemRouting:
        return cls(prefix=str(settings["KAFKA_TOPIC_PREFIX"]),
                   appid_topics=bool(settings["KAFKA_APPID_TOPICS"]),
                   max_bytes=int(settings["BUS_MAX_MESSAGE_BYTES"]))


class BusPipeline:
    """Produces result items (see module docstring). Produce calls buffer; ``confirm`` flushes."""

    def __init__(self, bus: Any, producer: Any, routing: ItemRouting, *,
                 crawler: Crawler | None = None, funnel: FunnelCounter | None = None) -> None:
        self.bus, self.producer = bus, producer
        self.prefix, self.appid_topics = routing.prefix, routing.appid_topics
        self.max_bytes = max(4096, routing.max_bytes - ENVELOPE_MARGIN_BYTES)
        self.crawler = crawler
        self._failure: BaseException | None = None
        self.funnel = funnel
        self._unconfirmed: Counter[tuple[str, str]] = Counter()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BusPipeline:
        settings = cluster_settings(crawler)
        bus = create_bus(settings)
        pipeline = cls(bus, bus.producer(), ItemRouting.from_settings(settings),
                       crawler=crawler, funnel=funnel_for(crawler))
        crawler.signals.connect(pipeline.spider_opened, signal=signals.spider_opened)
        return pipeline

    def spider_opened(self, spider: Spider) -> None:
        scheduler = cluster_scheduler(self.crawler) if self.crawler is not None else None
        if scheduler is not None:
            scheduler.leases.before_ack = self.confirm

    def topics_for(self, item: dict[str, Any]) -> list[str]:
        names = [topics.crawled_firehose(self.prefix)]
        if self.appid_topics and item.get("appid"):
            names.append(topics.crawled_app(self.prefix, str(item["appid"])))
        return names

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Encoded once (``items.fit_encoded``): the JSON that measured the item is what the
        producer sends (``orjson.Fragment``)."""
        data, raw = fit_encoded(item if type(item) is dict else ItemAdapter(item).asdict(),
                                self.max_bytes)
        key = str(data.get("crawlid") or "") or None
        value = orjson.Fragment(raw)
        for topic in self.topics_for(data):
            self._produce(topic, data, value, key)
        if key is not None and data.get("spiderid"):
            self._unconfirmed[(str(data["spiderid"]), key)] += 1
        return item

    def _produce(self, topic: str, data: dict[str, Any], value: orjson.Fragment,
                 key: str | None) -> None:
        """``value``: the JSON of ``data``."""
        try:
            self.producer.produce(topic, value, key=key)
        except MessageTooLargeError:
            smaller = fit_to_limit(data, self.max_bytes // 2)
            self._produce_once(topic, {**smaller, "body_truncated": True}, key)
        except BusError as exc:
            self._remember(exc, data)

    def _produce_once(self, topic: str, data: dict[str, Any], key: str | None) -> None:
        try:
            self.producer.produce(topic, data, key=key)
        except BusError as exc:
            self._remember(exc, data)

    def _remember(self, exc: BaseException, data: dict[str, Any]) -> None:
        self._failure = exc
        logger.error("result item not sent to the bus: %s", exc, extra={"url": data.get("url")})

    def confirm(self) -> None:
        """Raise unless everything produced since the last call was delivered."""
        failure, self._failure = self._failure, None
        unconfirmed, self._unconfirmed = self._unconfirmed, Counter()
        if failure is not None:
            raise failure
        self.producer.flush(FLUSH_TIMEOUT_S)
        self._count_delivered(unconfirmed)

    def _count_delivered(self, confirmed: Counter[tuple[str, str]]) -> None:
        if self.funnel is None:
            return
        for (spiderid, crawlid), count in confirmed.items():
            self.funnel.add({"spiderid": spiderid, "crawlid": crawlid}, "delivered", count)

    def close_spider(self, spider: Spider | None = None) -> None:
        try:
            self.producer.close()
            if self._failure is None:
                self._count_delivered(self._unconfirmed)
            self._unconfirmed = Counter()
        finally:
            self.bus.close()
