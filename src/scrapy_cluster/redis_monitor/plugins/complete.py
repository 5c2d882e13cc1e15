"""``CompleteMonitor``: announces every crawl that is complete, once.

A crawl is complete when it has had nothing queued and nothing leased (no page in flight:
a page's lease is acknowledged only after its links were enqueued and its crawler's funnel
counts are written in that same acknowledgement) continuously for CRAWL_COMPLETE_GRACE_S.
The frontier scripts keep the index of such crawls (``frontier:crawls:idle``); each tick
is one script call (``Frontier.take_completed``, ``lua/frontier_complete.lua``) that declares
the due ones complete and holds them for REDIS_LOCK_EXPIRATION seconds, so with several
monitors each crawl is taken by one; the notices are flushed to the bus and confirmed with
one more call. A monitor that dies in between has its notices sent again by another once
the hold is over (at-least-once, as every answer).

Notice: ``{action: "complete", appid, crawlid, spiderid, server_time, started, finished,
totals: {fetched, by_status, errors, retried, filtered, duplicates, delivered}}`` (docs/api.md,
"Crawl complete"). Round trips per tick: 1, plus 1 confirm and the bus flush when any.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapy_cluster.frontier import CompletedCrawl, CrawlFunnel
from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor
from scrapy_cluster.statuses import ErrorStatuses

COMPLETE_BATCH = 100


def crawl_totals(funnel: CrawlFunnel, errors: ErrorStatuses) -> dict[str, Any]:
    """The notice's ``totals`` from a crawl's URL funnel (definitions in docs/api.md)."""
    by_status = funnel.as_dict()["fetched"]
    return {"fetched": sum(by_status.values()), "by_status": by_status,
            "errors": sum(count for status, count in by_status.items()
                          if status.isdigit() and int(status) in errors),
            "retried": funnel.retried, "filtered": sum(funnel.filtered.values()),
            "duplicates": funnel.deduplicated, "delivered": funnel.delivered}


def epoch_s(ms: int | None) -> float | None:
    return None if ms is None else round(ms / 1000, 3)


class CompleteMonitor(BaseMonitor):
    tick_interval_s = 0.5

    def setup(self, settings: Mapping[str, Any]) -> None:
        self.grace_ms = int(float(settings["CRAWL_COMPLETE_GRACE_S"]) * 1000)
        self.hold_ms = max(1000, int(float(settings["REDIS_LOCK_EXPIRATION"]) * 1000))
        self.errors = ErrorStatuses.parse(settings["CIRCUIT_BREAKER_ERROR_STATUSES"])

    def tick(self) -> int:
        completed = self.frontier.take_completed(grace_ms=self.grace_ms, hold_ms=self.hold_ms,
                                                 most=COMPLETE_BATCH)
        if not completed:
            return 0
        for crawl in completed:
            self.send(self.notice(crawl))
        self.answers.flush()
        self.frontier.confirm_completed(completed)
        for crawl in completed:
            self.logger.info("Crawl complete", extra={
                "crawlid": crawl.crawlid, "appid": crawl.appid, "spiderid": crawl.spiderid,
                "delivered": crawl.funnel.delivered})
        return len(completed)

    def notice(self, crawl: CompletedCrawl) -> dict[str, Any]:
        return {"action": "complete", "appid": crawl.appid, "crawlid": crawl.crawlid,
                "spiderid": crawl.spiderid, "server_time": self.server_time(),
                "started": epoch_s(crawl.started_ms), "finished": epoch_s(crawl.finished_ms),
                "totals": crawl_totals(crawl.funnel, self.errors)}
