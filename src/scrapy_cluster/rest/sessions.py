"""The dashboard's login sessions: signed, expiring cookie values that never hold a key.

A session is ``1.<expires_at_s>.<signature>``: the signature is HMAC-SHA256 of
``1.<expires_at_s>`` under the *session secret* of the API key the user signed in with, and a
key's session secret is HMAC-SHA256 of a fixed label under the key. Nothing is stored: a
session is valid while it has not expired and one of the configured keys' secrets signs it.
So every Rest instance with the same keys accepts it, a restart keeps it, and removing a key
from REST_API_KEYS ends its sessions. The key cannot be read back from the cookie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Sequence

COOKIE = "sc_session"
VERSION = "1"
_LABEL = b"scrapy-cluster dashboard session v1"


def _secret(key: str) -> bytes:
    return hmac.new(key.encode(), _LABEL, hashlib.sha256).digest()


def _sign(secret: bytes, payload: str) -> str:
    digest = hmac.new(secret, payload.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Sessions:
    """Issues and checks session values (module docstring); ``clock`` is the wall clock in
    seconds, since an expiry must mean the same on every instance."""

    def __init__(self, keys: Sequence[str], *, ttl_s: int, clock: Callable[[], float]) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._secrets = [_secret(key) for key in keys]

    def issue(self, key: str) -> str:
        """A new session for someone who presented ``key`` (a configured key)."""
        payload = f"{VERSION}.{int(self.clock()) + self.ttl_s}"
        return f"{payload}.{_sign(_secret(key), payload)}"

    def valid(self, value: str | None) -> bool:
        """True when ``value`` is an unexpired session signed for a configured key."""
        if not value:
            return False
        version, _, rest = value.partition(".")
        expires, _, signature = rest.partition(".")
        if version != VERSION or not (expires.isascii() and expires.isdigit()) \
                or len(expires) > 12 or int(expires) <= self.clock():
            return False
        payload = f"{version}.{expires}"
        matches = [hmac.compare_digest(_sign(secret, payload), signature)
                   for secret in self._secrets]
        return any(matches)
