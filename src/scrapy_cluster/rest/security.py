"""Who may call the Rest service: API keys (REST_API_KEYS), the dashboard's sessions and the
guard against key guessing.

A request carries its key in the ``X-API-Key`` header or as ``Authorization: Bearer <key>``;
a browser that signed in at ``/ui/login`` carries a session cookie instead (``sessions``).
Keys are compared in constant time and must be at least REST_API_KEY_MIN_LENGTH characters.
Wrong keys are counted per client address (``key_guard``).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scrapy_cluster.errors import SettingsError
from scrapy_cluster.rest.key_guard import GuardPolicy, KeyGuard
from scrapy_cluster.rest.sessions import COOKIE as SESSION_COOKIE
from scrapy_cluster.rest.sessions import Sessions

KEY_HEADER = "x-api-key"
PUBLIC_PATHS = frozenset({"/", "/ui/login"})
"""Paths served without a key: the health summary (reveals nothing sensitive) and the
dashboard's login form (which checks the key it is given, under the same guard)."""
OPEN_WARNING = ("The Rest service listens on %s, which is not a loopback address, and "
                "REST_API_KEYS is empty: anyone who can reach it can submit crawls and read the "
                "cluster's state. Set REST_API_KEYS, or REST_HOST = \"127.0.0.1\" behind a proxy.")


def configured_keys(settings: Mapping[str, Any]) -> list[str]:
    """The accepted keys; a single string is a comma-separated list, empty values are ignored."""
    raw = settings.get("REST_API_KEYS") or []
    if isinstance(raw, str):
        raw = [part.strip() for part in raw.split(",")]
    return [str(key) for key in raw if str(key)]


def checked_keys(settings: Mapping[str, Any]) -> list[str]:
    """``configured_keys``, refusing any shorter than REST_API_KEY_MIN_LENGTH (the error names
    the key by its position, never by its value)."""
    keys = configured_keys(settings)
    minimum = int(settings.get("REST_API_KEY_MIN_LENGTH", 16))
    for position, key in enumerate(keys, 1):
        if len(key) < minimum:
            raise SettingsError(
                f"REST_API_KEYS: key {position} of {len(keys)} has {len(key)} characters; an API "
                f"key needs at least {minimum} (REST_API_KEY_MIN_LENGTH). Generate one with: "
                "python -c 'import secrets; print(secrets.token_urlsafe(24))'")
    return keys


def key_matches(keys: Sequence[str], key: str | None) -> bool:
    """True when ``key`` is one of ``keys`` (always False when there are none)."""
    if not key:
        return False
    given = key.encode()
    matches = [hmac.compare_digest(given, known.encode()) for known in keys]
    return any(matches)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request presents: the ``X-API-Key`` header, else a bearer token."""
    if headers.get(KEY_HEADER):
        return headers[KEY_HEADER]
    authorization = headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_open(host: str, keys: Sequence[str], logger: logging.Logger) -> bool:
    """Warn (a log record and a line on stderr) when ``host`` is reachable from other machines
    and no key is needed; True when it warned."""
    if keys or is_loopback(host):
        return False
    logger.warning(OPEN_WARNING, host or "every interface", extra={"host": host})
    print("WARNING: " + OPEN_WARNING % (host or "every interface"), file=sys.stderr)
    return True


def parsed_proxies(settings: Mapping[str, Any]) -> list[str]:
    """REST_TRUSTED_PROXIES as uvicorn's ``forwarded_allow_ips``, each entry checked."""
    raw = settings.get("REST_TRUSTED_PROXIES") or []
    if isinstance(raw, str):
        raw = [part.strip() for part in raw.split(",") if part.strip()]
    proxies = []
    for entry in raw:
        try:
            proxies.append(str(ipaddress.ip_network(str(entry), strict=False)))
        except ValueError as exc:
            raise SettingsError(f"REST_TRUSTED_PROXIES: {entry!r} is not an address or a "
                                "network such as 10.0.0.0/8") from exc
    return proxies


@dataclass(frozen=True)
class Decision:
    """The answer to a request's credentials: allowed, refused (401), or locked out for
    ``retry_after_s`` seconds (429)."""

    allowed: bool
    retry_after_s: int = 0


ALLOWED, REFUSED = Decision(True), Decision(False)


class Access:
    """The keys, the sessions and the guard, for the Gate and the login form."""

    def __init__(self, keys: Sequence[str], *, sessions: Sessions, guard: KeyGuard,
                 cookie_secure: bool) -> None:
        self.keys = list(keys)
        self.sessions = sessions
        self.guard = guard
        self.cookie_secure = cookie_secure

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], *, clock: Callable[[], float],
                      logger: logging.Logger) -> Access:
        keys = checked_keys(settings)
        return cls(keys, sessions=Sessions(keys, ttl_s=int(settings["REST_SESSION_TTL_S"]),
                                           clock=clock),
                   guard=KeyGuard(GuardPolicy.from_settings(settings), clock=clock,
                                  logger=logger),
                   cookie_secure=bool(settings["REST_COOKIE_SECURE"]))

    @property
    def required(self) -> bool:
        return bool(self.keys)

    def check_request(self, headers: Mapping[str, str], cookies: Mapping[str, str],
                      host: str | None) -> Decision:
        """A request's key (guarded) or, without one, its session cookie."""
        key = presented_key(headers)
        if key is not None:
            return self.check_key(key, host)
        return ALLOWED if self.sessions.valid(cookies.get(SESSION_COOKIE)) else REFUSED

    def check_key(self, key: str, host: str | None) -> Decision:
        """``key`` from ``host``: refused unchecked while ``host`` is locked out."""
        wait_s = self.guard.wait_s(host)
        if wait_s > 0:
            return Decision(False, retry_after_s=max(1, math.ceil(wait_s)))
        if key_matches(self.keys, key):
            self.guard.succeeded(host)
            return ALLOWED
        self.guard.failed(host)
        return REFUSED
