"""The settings the Redis Streams bus obeys (docs/settings.md, section Bus)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StreamsPolicy:
    """Limits and timings shared by the bus's producers and consumers.

    ``maxlen`` trims every stream (dead-letter streams included) to about that many entries;
    ``batch_size`` XADDs go in one round trip, sent after ``linger_ms`` at the latest;
    ``max_buffered`` messages wait while Redis is down (then ``produce`` refuses);
    entries pending for ``claim_idle_ms`` are claimed by another member; an entry handed
    out ``max_deliveries`` times without being acknowledged goes to its dead-letter stream
    instead of being handed out again (0: never).
    """

    max_message_bytes: int
    maxlen: int
    claim_idle_ms: int
    batch_size: int
    linger_ms: int
    max_buffered: int
    max_deliveries: int

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> StreamsPolicy:
        return cls(max_message_bytes=int(settings["BUS_MAX_MESSAGE_BYTES"]),
                   maxlen=int(settings["REDIS_STREAM_MAXLEN"]),
                   claim_idle_ms=int(settings["REDIS_STREAM_CLAIM_IDLE_MS"]),
                   batch_size=int(settings["REDIS_STREAM_BATCH_SIZE"]),
                   linger_ms=int(settings["REDIS_STREAM_LINGER_MS"]),
                   max_buffered=int(settings["REDIS_STREAM_MAX_BUFFERED"]),
                   max_deliveries=int(settings["BUS_MAX_DELIVERIES"]))
