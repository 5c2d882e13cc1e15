"""The crawler's public IP (its throttle identity), refreshed in a background thread.

Every ``SCHEDULER_IP_REFRESH`` seconds a thread fetches ``PUBLIC_IP_URL`` with a short timeout
and takes the first ``IP_ADDR_REGEX`` match. A failed lookup keeps the last value (or
``PUBLIC_IP``, or ``UNKNOWN_IP``); the first failure of an outage is a warning, the next ones are
DEBUG lines, and the first success after it says so (INFO), so an offline cluster warns once,
not every minute. An empty ``PUBLIC_IP_URL`` makes no lookup at all: the identity is
``PUBLIC_IP`` (or ``UNKNOWN_IP``). Nothing ever waits on it.
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

UNKNOWN_IP = "0.0.0.0"
Fetch = Callable[[str, float], str]


def fetch_text(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:  # noqa: S310 - operator's URL
        return bytes(answer.read(4096)).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class PublicIpLookup:
    """Where and how often the public IP is looked up: ``url`` (PUBLIC_IP_URL, empty: never),
    ``pattern`` (IP_ADDR_REGEX), ``refresh_s`` (SCHEDULER_IP_REFRESH), ``timeout_s``
    (CRAWLER_PUBLIC_IP_TIMEOUT_S) and ``fallback_ip`` (PUBLIC_IP) until a lookup succeeds."""

    url: str
    pattern: str
    refresh_s: float
    timeout_s: float
    fallback_ip: str | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> PublicIpLookup:
        return cls(str(settings["PUBLIC_IP_URL"]), str(settings["IP_ADDR_REGEX"]),
                   refresh_s=float(settings["SCHEDULER_IP_REFRESH"]),
                   timeout_s=float(settings["CRAWLER_PUBLIC_IP_TIMEOUT_S"]),
                   fallback_ip=settings.get("PUBLIC_IP"))


class PublicIpRefresher:
    """Holds the last known public IP; ``start()`` refreshes it periodically off-thread."""

    def __init__(self, lookup: PublicIpLookup, *, logger: logging.Logger,
                 fetch: Fetch = fetch_text) -> None:
        self.url, self.pattern = lookup.url, re.compile(lookup.pattern)
        self.refresh_s, self.timeout_s = lookup.refresh_s, lookup.timeout_s
        self._ip = lookup.fallback_ip or UNKNOWN_IP
        self._logger, self._fetch = logger, fetch
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], logger: logging.Logger) -> PublicIpRefresher:
        return cls(PublicIpLookup.from_settings(settings), logger=logger)

    def current(self) -> str:
        return self._ip

    def refresh_once(self) -> str:
        """Fetch now; on any failure keep the previous value (warned about once per outage).
        Returns the current IP."""
        if not self.url:
            return self._ip
        try:
            match = self.pattern.search(self._fetch(self.url, self.timeout_s))
        except Exception as exc:  # noqa: BLE001 - any network failure keeps the old value
            self._failed("public IP lookup failed; keeping %s", extra={"url": self.url,
                                                                       "error": repr(exc)})
            return self._ip
        if match is None:
            self._failed("public IP answer did not match IP_ADDR_REGEX; keeping %s",
                         extra={"url": self.url})
            return self._ip
        self._ip = match.group(1) if match.groups() else match.group(0)
        if self._failing:
            self._failing = False
            self._logger.info("public IP lookup works again: %s", self._ip,
                              extra={"url": self.url})
        return self._ip

    def _failed(self, message: str, *, extra: dict[str, Any]) -> None:
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        self._logger.log(level, message, self._ip, extra=extra)

    def start(self) -> None:
        if not self.url:
            return
        self._thread = threading.Thread(target=self._run, name="public-ip", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh_once()
            self._stop.wait(self.refresh_s)

    def stop(self) -> None:
        self._stop.set()
