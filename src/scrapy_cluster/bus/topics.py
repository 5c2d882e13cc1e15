"""Topic names of the cluster's API, built from ``KAFKA_TOPIC_PREFIX``.

The same names are used on both backends (on Redis Streams each topic is one
stream, see ``keys.bus_stream``). ``dead_letter`` names where a consumer group
puts a message that was delivered ``BUS_MAX_DELIVERIES`` times without being
acknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def incoming(settings: Mapping[str, Any]) -> str:
    """The topic API requests arrive on (``KAFKA_INCOMING_TOPIC``, e.g. ``demo.incoming``)."""
    return str(settings["KAFKA_INCOMING_TOPIC"])


def crawled_firehose(prefix: str) -> str:
    """``<prefix>.crawled_firehose``: every crawled page."""
    return f"{prefix}.crawled_firehose"


def crawled_app(prefix: str, appid: str) -> str:
    """``<prefix>.crawled_<appid>``: crawled pages of one application."""
    return f"{prefix}.crawled_{appid}"


def outbound_firehose(prefix: str) -> str:
    """``<prefix>.outbound_firehose``: every answer to an action request."""
    return f"{prefix}.outbound_firehose"


def outbound_app(prefix: str, appid: str) -> str:
    """``<prefix>.outbound_<appid>``: answers for one application."""
    return f"{prefix}.outbound_{appid}"


def dead_letter(topic: str) -> str:
    """``<topic>.dead_letter``: messages of ``topic`` that no consumer could handle.

    Any group reading ``topic`` moves a message here after ``BUS_MAX_DELIVERIES``
    deliveries without acknowledgement (value and key unchanged; headers name the
    origin topic, the group and the delivery count). ``scrapy-cluster dump -t
    demo.incoming.dead_letter --from-beginning`` shows them.
    """
    return f"{topic}.dead_letter"
