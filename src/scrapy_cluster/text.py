"""Text from Redis and broker replies, which arrive as ``bytes`` (or ``str`` from a client that
decodes): one conversion for the whole package."""

from __future__ import annotations


def as_text(value: bytes | str) -> str:
    """``value`` as ``str``: bytes are UTF-8, an invalid sequence becomes U+FFFD (never an
    error: a stray byte in a key or member must not fail a reader)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
