"""The warnings ``POST /feed`` adds to its answer (``warnings`` in the wrapper; docs/rest.md).

Today one: a crawl request for a spider no live crawler runs (``stats.coverage``). The request
is still sent: the crawl waits in its queue until a crawler of that spider starts.

Round trips: 0 for a request that is not a crawl, and for a crawl while the service's
``SpiderCoverage`` is fresh (COVERAGE_MAX_AGE_S); otherwise ONE (a ZRANGEBYSCORE of the
crawler heartbeats) per process per COVERAGE_MAX_AGE_S, shared by concurrent requests. The
read runs in a worker thread and a request waits for it at most ``wait_s``: a slow Redis never
holds up a feed (the read goes on in the background and the next request uses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import redis
from starlette.concurrency import run_in_threadpool

from scrapy_cluster.stats.coverage import SpiderCoverage, crawl_spider

WAIT_S = 1.0
"""The longest a /feed request waits for a read of the crawler heartbeats."""
logger = logging.getLogger(__name__)


def _refresh(coverage: SpiderCoverage) -> None:
    try:
        coverage.refresh()
    except redis.RedisError as exc:  # no warning this time; /feed does not need Redis
        logger.debug("crawler heartbeats not read for /feed warnings: %s", exc)


async def feed_warnings(coverage: SpiderCoverage, request: Mapping[str, Any], *,
                        wait_s: float = WAIT_S) -> list[str]:
    """The warnings for a validated request (the schema's defaults filled in)."""
    if crawl_spider(request) is None:
        return []
    if not coverage.fresh():
        read = asyncio.ensure_future(run_in_threadpool(_refresh, coverage))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(read), wait_s)
    return coverage.warnings(request)
