"""The operators' per-domain crawl-request defaults (``recrawl`` and ``sitemaps``), given to
crawl requests that carry no such field.

The defaults are the ``recrawl`` and ``sitemaps`` entries of the domain configuration document
(``domain_config.document``), read from the copy in Redis that the crawlers obey (the document
itself with DOMAIN_CONFIG_BACKEND ``redis``; the mirror ``config sync`` keeps with
``zookeeper``). The document is looked at no more often than every ``refresh_s`` seconds and
only while requests lacking one of these fields arrive: one HGET of its version, plus one HMGET
and a parse when the version changed. A request is matched by the registered domain of its seed
URL (as the frontier keys its queues). A default is copied into the request, so changing it
later does not change crawls already submitted. A ``recrawl`` default whose ``until`` passed is
no longer given.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scrapy_cluster.api import recrawl as recrawl_api
from scrapy_cluster.api import sitemaps as sitemaps_api
from scrapy_cluster.domain_config.document import Normalize, frontier_domain
from scrapy_cluster.domain_config.redis_store import read_document_if_changed
from scrapy_cluster.domain_config.store import VersionedDocument
from scrapy_cluster.errors import DomainConfigError, InvalidRequestError
from scrapy_cluster.frontier.codec import DomainExtractor

REFRESH_S = 5.0
"""How long the defaults read from the document are used before its version is looked at."""
FIELDS = (recrawl_api.FIELD, sitemaps_api.FIELD)
"""The crawl-request fields a domain may give a default for (the document's keys too)."""

ReadIfChanged = Callable[[int], VersionedDocument | None]
"""Given the version in hand, the stored document when its version differs, else None."""


class DomainDefaults:
    """Fills in ``recrawl`` and ``sitemaps`` from the domain defaults (module docstring)."""

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
        self.defaults: dict[str, Mapping[str, Any]] = {name: {} for name in FIELDS}
        self._read_at: float | None = None

    @classmethod
    def from_redis(cls, redis_client: Any, *, logger: logging.Logger,
                   normalize: Normalize | None = None,
                   refresh_s: float = REFRESH_S) -> DomainDefaults:
        names = normalize or frontier_domain()
        return cls(lambda known: read_document_if_changed(redis_client, names, known),
                   logger=logger, refresh_s=refresh_s)

    def apply(self, requests: Sequence[dict[str, Any]]) -> dict[str, int]:
        """Give each request its seed domain's default (a copy) of each of ``FIELDS`` it lacks;
        returns how many requests got one, by field. Round trips: 0, or those of a refresh
        (module docstring); a Redis outage propagates (the Kafka Monitor retries the batch)."""
        given = dict.fromkeys(FIELDS, 0)
        if all(name in request for request in requests for name in FIELDS):
            return given
        self._refresh()
        if not any(self.defaults.values()):
            return given
        now = self.wall_clock()
        for request in requests:
            missing = [name for name in FIELDS if name not in request and self.defaults[name]]
            domain = self._domain_of(request) if missing else None
            if domain is None:
                continue
            for name in missing:
                default = self.defaults[name].get(domain)
                if default is None or (name == recrawl_api.FIELD
                                       and recrawl_api.problem(default, now=now) is not None):
                    continue
                request[name] = copy.deepcopy(default)
                given[name] += 1
        return given

    def _domain_of(self, request: Mapping[str, Any]) -> str | None:
        try:
            return self.domain_of(str(request.get("url", "")))
        except InvalidRequestError:
            return None  # the frontier refuses the request with the reason

    def _refresh(self) -> None:
        now = self.clock()
        if self._read_at is not None and now - self._read_at < self.refresh_s:
            return
        try:
            current = self.read_if_changed(self.version)
        except DomainConfigError as exc:
            self.logger.warning("domain configuration unreadable, request defaults kept: %s",
                                exc, extra={"error": str(exc)})
            self._read_at = now
            return
        self._read_at = now
        if current is not None:
            self.version = current.version
            self.defaults = {name: dict(current.document.defaults(name)) for name in FIELDS}
