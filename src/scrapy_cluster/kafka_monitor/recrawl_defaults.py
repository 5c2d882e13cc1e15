"""The operators' per-domain re-crawl defaults, given to crawl requests that carry none.

The defaults are the ``recrawl`` entries of the domain configuration document
(``domain_config.document``), read from the copy in Redis that the crawlers obey (the
document itself with DOMAIN_CONFIG_BACKEND ``redis``; the mirror ``config sync`` keeps with
``zookeeper``). The document is looked at no more often than every ``refresh_s`` seconds and
only while requests without ``recrawl`` arrive: one HGET of its version, plus one HMGET and a
parse when the version changed. A request is matched by the registered domain of its seed URL
(as the frontier keys its queues). The default is copied into the request, so changing the
default later does not change crawls already submitted.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scrapy_cluster.api import recrawl as recrawl_api
from scrapy_cluster.domain_config.document import Normalize, frontier_domain
from scrapy_cluster.domain_config.redis_store import read_document_if_changed
from scrapy_cluster.domain_config.store import VersionedDocument
from scrapy_cluster.errors import DomainConfigError, InvalidRequestError
from scrapy_cluster.frontier.codec import DomainExtractor

REFRESH_S = 5.0
"""How long the defaults read from the document are used before its version is looked at."""

ReadIfChanged = Callable[[int], VersionedDocument | None]
"""Given the version in hand, the stored document when its version differs, else None."""


class RecrawlDefaults:
    """Fills in ``recrawl`` from the domain defaults (see module docstring)."""

    def __init__(self, read_if_changed: ReadIfChanged, *, logger: logging.Logger,
                 refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.read_if_changed = read_if_changed
        self.logger = logger
        self.refresh_s = refresh_s
        self.clock = clock
        self.wall_clock = wall_clock
        self.domain_of = DomainExtractor()
        self.version = -1
        self.defaults: Mapping[str, Mapping[str, Any]] = {}
        self._read_at: float | None = None

    @classmethod
    def from_redis(cls, redis_client: Any, *, logger: logging.Logger,
                   normalize: Normalize | None = None,
                   refresh_s: float = REFRESH_S) -> RecrawlDefaults:
        names = normalize or frontier_domain()
        return cls(lambda known: read_document_if_changed(redis_client, names, known),
                   logger=logger, refresh_s=refresh_s)

    def apply(self, requests: Sequence[dict[str, Any]]) -> int:
        """Give each request without ``recrawl`` its seed domain's default (a copy); returns
        how many got one. Round trips: 0, or those of a refresh (see module docstring); a
        Redis outage propagates (the Kafka Monitor retries the batch)."""
        if all(recrawl_api.FIELD in request for request in requests):
            return 0
        self._refresh()
        if not self.defaults:
            return 0
        given = 0
        now = self.wall_clock()
        for request in requests:
            default = None if recrawl_api.FIELD in request else self._default_for(request)
            if default is not None and recrawl_api.problem(default, now=now) is None:
                request[recrawl_api.FIELD] = copy.deepcopy(dict(default))
                given += 1
        return given

    def _default_for(self, request: Mapping[str, Any]) -> Mapping[str, Any] | None:
        try:
            return self.defaults.get(self.domain_of(str(request.get("url", ""))))
        except InvalidRequestError:
            return None  # the frontier refuses the request with the reason

    def _refresh(self) -> None:
        now = self.clock()
        if self._read_at is not None and now - self._read_at < self.refresh_s:
            return
        try:
            current = self.read_if_changed(self.version)
        except DomainConfigError as exc:
            self.logger.warning("domain configuration unreadable, re-crawl defaults kept: %s",
                                exc, extra={"error": str(exc)})
            self._read_at = now
            return
        self._read_at = now
        if current is not None:
            self.version = current.version
            self.defaults = dict(current.document.recrawls)
