"""Reading the frontier's lease records (``frontier:lease_items`` values).

The pop script stores each lease as ``cmsgpack.pack(spider, domain, priority, crawl, item)``:
five MessagePack values back to back (see ``lua/frontier_pop.lua``), read here with the
``msgpack`` library's streaming unpacker.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack
import orjson

from scrapy_cluster.text import as_text


@dataclass(frozen=True)
class LeaseRecord:
    """A request in flight: its spider, domain, crawl and app."""

    spiderid: str
    domain: str
    crawlid: str
    appid: str | None


def _values(data: bytes) -> list[object]:
    unpacker = msgpack.Unpacker(raw=False, unicode_errors="replace")
    unpacker.feed(data)
    try:
        return list(unpacker)
    except (msgpack.UnpackException, ValueError) as exc:
        raise ValueError(f"not a lease record: {exc}") from exc


def parse_lease(record: bytes) -> LeaseRecord | None:
    """The lease's spider, domain, crawl and app (from the item's ``a`` field); None when the
    record is not in the expected shape."""
    try:
        spider, domain, _, crawl, item = _values(record)[:5]
    except ValueError:
        return None
    if not all(isinstance(value, str) for value in (spider, domain, crawl, item)):
        return None
    return LeaseRecord(str(spider), str(domain), str(crawl), _appid_of_item(str(item)))


def _appid_of_item(item: str) -> str | None:
    """The ``appid`` of a queued item ``<seq> <compact json>`` (codec.encode_item)."""
    _, _, body = item.partition(" ")
    try:
        appid = orjson.loads(body).get("a")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return appid if isinstance(appid, str) else None


def appid_of_item(item: bytes | str | None) -> str | None:
    if item is None:
        return None
    return _appid_of_item(as_text(item))
