"""API keys of the Rest service (REST_API_KEYS).

A request carries its key in the ``X-API-Key`` header, as ``Authorization: Bearer <key>`` or
in the dashboard's login cookie ``sc_api_key``. Keys are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

KEY_HEADER = "x-api-key"
KEY_COOKIE = "sc_api_key"
PUBLIC_PATHS = frozenset({"/", "/ui/login"})
"""Paths served without a key: the health summary (reveals nothing sensitive) and the
dashboard's login form."""


def configured_keys(settings: Mapping[str, Any]) -> list[str]:
    """The accepted keys; a single string is one key, empty values are ignored."""
    raw = settings.get("REST_API_KEYS") or []
    if isinstance(raw, str):
        raw = [part.strip() for part in raw.split(",")]
    return [str(key) for key in raw if str(key)]


def key_is_valid(settings: Mapping[str, Any], key: str | None) -> bool:
    """True when ``key`` is one of the configured keys (always False when none is set)."""
    if not key:
        return False
    given = key.encode()
    return any(hmac.compare_digest(given, known.encode()) for known in configured_keys(settings))


def presented_key(headers: Mapping[str, str], cookies: Mapping[str, str]) -> str | None:
    """The key a request presents, header first, then bearer token, then cookie."""
    if headers.get(KEY_HEADER):
        return headers[KEY_HEADER]
    authorization = headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return cookies.get(KEY_COOKIE) or None
