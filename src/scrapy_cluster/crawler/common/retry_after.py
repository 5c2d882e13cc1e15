"""``Retry-After`` on a 429 or 503 response: the domain is paused for every crawler.

The header (RFC 9110, section 10.2.3) is either a number of seconds or an HTTP date. The wait
is capped at RETRY_AFTER_MAX_S and applied through ``frontier.pause.DomainPauses`` (only ever
lengthening a pause), so no crawler of the cluster dispatches the domain before then. ONE
round trip per such response; none for any other response.
"""

from __future__ import annotations

import logging
from datetime import UTC
from email.utils import parsedate_to_datetime

import redis

from scrapy_cluster.frontier.pause import DomainPauses

RETRY_AFTER_STATUSES = frozenset({429, 503})
logger = logging.getLogger(__name__)


def retry_after_s(value: str, now_s: float) -> float | None:
    """Seconds the header asks to wait from ``now_s`` (epoch s); None when it is unreadable.

    ``"120"`` -> 120.0; ``"Wed, 21 Oct 2015 07:28:00 GMT"`` -> that moment minus ``now_s``
    (negative when it is past).
    """
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp() - now_s


class RetryAfterPauser:
    """Pauses a domain cluster-wide for the wait its 429/503 ``Retry-After`` asks for."""

    def __init__(self, pauses: DomainPauses, *, max_s: float) -> None:
        self.pauses = pauses
        self.max_s = max_s

    def wait_s(self, status: int, header: str | None, now_s: float) -> float:
        """How long the response asks to pause its domain (0: not at all). No I/O."""
        if status not in RETRY_AFTER_STATUSES or header is None or self.max_s <= 0:
            return 0.0
        wait = retry_after_s(header, now_s)
        return 0.0 if wait is None or wait <= 0 else min(wait, self.max_s)

    def apply(self, domain: str, wait_s: float) -> int | None:
        """Pause ``domain`` for ``wait_s``; the pause's end (epoch ms), None when Redis failed.
        ONE round trip."""
        try:
            until_ms = self.pauses.pause(domain, max(1, round(wait_s * 1000)))
        except redis.RedisError as exc:
            logger.warning("could not pause the domain for its Retry-After: %s", exc,
                           extra={"domain": domain})
            return None
        logger.info("Retry-After pauses the domain for the cluster",
                    extra={"domain": domain, "retry_after_s": wait_s, "until_ms": until_ms})
        return until_ms
