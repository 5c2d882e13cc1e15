"""The distributed frontier: per-domain throttled priority queues in Redis.

``Frontier`` (sync) and ``AsyncFrontier`` (asyncio) are thin wrappers over the
same Lua scripts (``scrapy_cluster/lua/frontier_*.lua``) and the same pure
argument builders (``calls``); ``sync.py`` is written from ``aio.py`` by
``python -m scrapy_cluster.frontier.unasync``. See docs/architecture.md, section "Frontier".
"""

from __future__ import annotations

from scrapy_cluster.frontier.aio import AsyncFrontier
from scrapy_cluster.frontier.model import (
    Backlog,
    Clock,
    CompletedCrawl,
    CrawlCounts,
    CrawlFunnel,
    CrawlInfo,
    DispatchView,
    DomainCount,
    EnqueueResult,
    FunnelCounts,
    LateSend,
    LeasedRequest,
    PopResult,
    PurgeResult,
    Revisit,
)
from scrapy_cluster.frontier.sync import Frontier

__all__ = [
    "AsyncFrontier", "Backlog", "Clock", "CompletedCrawl", "CrawlCounts", "CrawlFunnel", "CrawlInfo", "DispatchView", "DomainCount", "EnqueueResult",
    "Frontier", "FunnelCounts", "LateSend", "LeasedRequest", "PopResult", "PurgeResult", "Revisit",
]

