"""A result item is encoded once on its way to the bus, and the bus carries the same bytes as
when it was encoded twice (``items.fit_to_limit`` to measure, then the producer's
``encode_value``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_cluster.bus.base import encode_key, encode_value
from scrapy_cluster.crawler.common import items
from scrapy_cluster.crawler.fast.item_sender import ItemSender
from scrapy_cluster.errors import MessageTooLargeError

BUS_LIMIT = 64 * 1024


class RecordingProducer:
    """Encodes as both buses' ``produce`` do (``encode_value``, ``encode_key``) and keeps the
    bytes; refuses a value over ``limit`` like them."""

    def __init__(self, limit: int = BUS_LIMIT) -> None:
        self.limit = limit
        self.sent: list[tuple[str, bytes, bytes | None]] = []

    def produce(self, topic: str, value: Any, *, key: str | bytes | None = None) -> None:
        self.sent.append((topic, encode_value(value, self.limit), encode_key(key)))

    def flush(self, timeout_s: float = 10.0) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Nothing to release."""


class LegacySender(ItemSender):
    """``ItemSender.send`` as it was: the item measured, then encoded again by the producer."""

    def send(self, item: dict[str, Any]) -> None:
        data = items.fit_to_limit(item, self.max_bytes)
        key = str(data.get("crawlid") or "") or None
        names = [f"{self.prefix}.crawled_firehose"]
        if self.appid_topics and data.get("appid"):
            names.append(f"{self.prefix}.crawled_{data['appid']}")
        for topic in names:
            try:
                self.producer.produce(topic, data, key=key)
            except MessageTooLargeError:
                smaller = items.fit_to_limit(data, self.max_bytes // 2)
                self.producer.produce(topic, {**smaller, "body_truncated": True}, key=key)


def page(body: bytes, *, links: int = 3, crawlid: Any = "c1", appid: Any = "app",
         base64_body: bool = False) -> dict[str, Any]:
    class Link:
        def __init__(self, n: int) -> None:
            self.url, self.text = f"http://a.test/{n}/\u00e9", f"l\u00efnk {n} \"q\""

    return items.page_item(
        url="http://a.test/", response_url="http://a.test/", status=200,
        response_headers={"Content-Type": ["text/html"]}, request_headers={}, body=body,
        encoding="utf-8", links=[Link(n) for n in range(links)],
        meta={"appid": appid, "crawlid": crawlid, "spiderid": "link", "attrs": {"x": [1]}},
        now_s=1.7e9, base64_body=base64_body)


_BODIES = st.one_of(st.binary(max_size=3000),
                    st.text(max_size=3000).map(lambda text: text.encode("utf-8", "surrogatepass")),
                    st.sampled_from([b"x" * 5000, "\u00e9\u4e2d\U0001f600".encode() * 800,
                                     b"\xff" * 4000, b"\"\\\n\x00" * 1000]))


@settings(max_examples=300, deadline=None)
@given(_BODIES, st.integers(min_value=0, max_value=60), st.sampled_from([400, 2000, 8000, 10**6]),
       st.booleans())
def test_fit_encoded_is_fit_to_limit_and_its_json(body: bytes, links: int, limit: int,
                                                 base64_body: bool) -> None:
    item = page(body, links=links, base64_body=base64_body)
    fitted, raw = items.fit_encoded(item, limit)
    assert fitted == items.fit_to_limit(item, limit)
    assert raw == orjson.dumps(fitted)
    if len(orjson.dumps(item)) <= limit:
        assert fitted is item


@settings(max_examples=200, deadline=None)
@given(_BODIES, st.integers(min_value=0, max_value=40),
       st.sampled_from([None, "", "c1", "cr\u00e9", 7]), st.sampled_from([None, "", "app", 3]),
       st.booleans(), st.sampled_from([600, 3000, 10**6]))
def test_the_sender_puts_the_same_bytes_on_the_bus_as_when_it_encoded_twice(
        body: bytes, links: int, crawlid: Any, appid: Any, appid_topics: bool,
        max_bytes: int) -> None:
    item = page(body, links=links, crawlid=crawlid, appid=appid)
    once, twice = RecordingProducer(), RecordingProducer()
    ItemSender(once, prefix="p", appid_topics=appid_topics, max_bytes=max_bytes).send(item)
    LegacySender(twice, prefix="p", appid_topics=appid_topics, max_bytes=max_bytes).send(item)
    assert once.sent == twice.sent


def test_an_item_the_bus_refuses_is_sent_again_cut_to_half_the_limit() -> None:
    item = page(b"y" * 20_000)
    once, twice = RecordingProducer(limit=12_000), RecordingProducer(limit=12_000)
    sender = ItemSender(once, prefix="p", appid_topics=True, max_bytes=30_000)
    sender.send(item)
    LegacySender(twice, prefix="p", appid_topics=True, max_bytes=30_000).send(item)
    assert once.sent == twice.sent
    assert [orjson.loads(raw)["body_truncated"] for _, raw, _ in once.sent] == [True, True]
    assert sender._unconfirmed == Counter({("link", "c1"): 1})


def test_a_fragment_passes_encode_value_byte_for_byte_and_is_still_measured() -> None:
    raw = orjson.dumps({"a": "\u00e9" * 10, "b": [1, 2.5, None]})
    assert encode_value(orjson.Fragment(raw), len(raw)) == raw
    with pytest.raises(MessageTooLargeError):
        encode_value(orjson.Fragment(raw), len(raw) - 1)
