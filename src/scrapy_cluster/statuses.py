"""Which response statuses count as errors (CIRCUIT_BREAKER_ERROR_STATUSES).

Shared by the crawlers (last error per domain), the Redis Monitor's circuit breaker and the
dashboard, so all three agree on one grammar: a code (``403``, or ``0`` for no response), a
class (``"5xx"``) or an inclusive range (``"520-599"``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from scrapy_cluster.errors import SettingsError

_CLASS = re.compile(r"^([1-9])xx$")
_RANGE = re.compile(r"^(\d{1,3})-(\d{1,3})$")


@dataclass(frozen=True)
class ErrorStatuses:
    """The statuses that count as errors, as inclusive ranges."""

    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, entries: Iterable[int | str]) -> ErrorStatuses:
        return cls(tuple(_status_range(entry) for entry in entries))

    def __contains__(self, status: object) -> bool:
        return isinstance(status, int) and any(low <= status <= high for low, high in self.ranges)


def _status_range(entry: int | str) -> tuple[int, int]:
    text = str(entry).strip().lower()
    if text.isdigit():
        return int(text), int(text)
    if match := _CLASS.match(text):
        return int(match[1]) * 100, int(match[1]) * 100 + 99
    if (match := _RANGE.match(text)) and int(match[1]) <= int(match[2]):
        return int(match[1]), int(match[2])
    raise SettingsError(f"CIRCUIT_BREAKER_ERROR_STATUSES: {entry!r} is not a status code, "
                        "a class like '5xx' or a range like '500-599'")
