"""``InfoMonitor``: answers ``info`` actions from the frontier's count indexes.

Round trips per job: for one crawl 1 for the counts (``frontier_info.lua`` reads only the
crawl's count hash, never a queued item), 1 for its expiry and 1 for its URL funnel and
status; for an app 2 for the counts (``Frontier.app_counts``: plain HGETALLs, so a large app
never blocks Redis), 1 MGET and 1 for the funnels and statuses of all its crawls
(``Frontier.crawl_funnels_and_statuses``). Every crawl in an answer carries ``funnel`` (see
docs/api.md, "URL funnel") and ``status``: ``running``, ``complete``, ``stopped``, ``expired``,
or ``unknown`` (no record: never seen, or forgotten CRAWL_STATE_TTL after it ended).

A crawl that is doing nothing also carries ``reason`` (``stats.reasons.crawl_reason``): ``no
crawler for this spider`` while it has work and no live crawler runs its spider (read from
the crawler heartbeats: one more round trip, only for an answer with such a crawl), or
``nothing fetched: 1 refused (ssrf 1)`` once it ended without a download because its URLs
were refused or filtered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapy_cluster import keys
from scrapy_cluster.frontier import CrawlInfo
from scrapy_cluster.frontier.model import CrawlFunnel
from scrapy_cluster.redis_monitor.jobs import Job
from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor
from scrapy_cluster.stats.coverage import live_spiders
from scrapy_cluster.stats.reasons import crawl_reason


def crawl_status(status: str | None, has_work: bool, *, waiting: bool = False) -> str:
    """The ``status`` of an info answer; a crawl with work but no state (queued by a version
    without crawl states) is running. A running crawl whose only work is its re-crawl
    schedule (``waiting``: nothing queued, nothing in flight, URLs scheduled) is
    ``scheduled``."""
    if status is not None:
        return "scheduled" if status == "running" and waiting else status
    return "running" if has_work else "unknown"


def _schedule_answer(info: CrawlInfo) -> dict[str, Any]:
    """The re-crawl fields of one crawl's info (only for a crawl with a schedule): URLs in its schedule, how many are due (a
    lower bound past 100 due buckets), and when the next one is (epoch s, None when every
    scheduled URL is due)."""
    return {"scheduled": info.scheduled, "due": info.due,
            "next_due": None if info.next_due_ms is None else round(info.next_due_ms / 1000.0, 3)}


def domains_answer(info: CrawlInfo) -> dict[str, dict[str, int]]:
    return {name: {"low_priority": count.low_priority, "high_priority": count.high_priority,
                   "total": count.total}
            for name, count in sorted(info.domains.items())}


class InfoMonitor(BaseMonitor):
    """Info of one crawl (``crawlid`` given) or of every crawl of an app."""

    job_types = ("info",)
    regex = r"^info:"
    required = {"appid": str, "spiderid": str, "uuid": str}
    optional = {"crawlid": str}
    heartbeat_timeout_s = 120.0

    def setup(self, settings: Mapping[str, Any]) -> None:
        self.heartbeat_timeout_s = float(settings["HEARTBEAT_TIMEOUT"])

    def _served(self, spiderid: str) -> bool:
        """A live crawler runs ``spiderid``. One round trip."""
        return spiderid in live_spiders(self.redis, heartbeat_timeout_s=self.heartbeat_timeout_s,
                                        now_s=self.clock())

    def _explain(self, entry: dict[str, Any], spiderid: str, pending: int,
                 funnel: CrawlFunnel, served: dict[str, bool]) -> None:
        """Add ``reason`` to a crawl's ``entry`` when it is doing nothing (module docstring);
        ``served`` remembers the heartbeat read for the rest of the answer."""
        needs_read = entry["status"] == "running" and pending > 0
        if needs_read and spiderid not in served:
            served[spiderid] = self._served(spiderid)
        reason = crawl_reason(status=entry["status"], pending=pending, funnel=funnel,
                              served=served.get(spiderid, True))
        if reason is not None:
            entry["reason"] = reason

    def handle(self, job: Job) -> None:
        request = self.validate(job)
        spiderid, appid, crawlid = request["spiderid"], request["appid"], request.get("crawlid")
        answer: dict[str, Any] = {"server_time": self.server_time(), "uuid": request["uuid"],
                                  "spiderid": spiderid, "appid": appid}
        if crawlid:
            info = self.frontier.crawl_info(spiderid, appid, str(crawlid))
            expires: Any = self.redis.get(keys.crawl_timeout(spiderid, appid, str(crawlid)))
            answer.update({"crawlid": crawlid, "total_pending": info.total_pending,
                           "total_domains": info.total_domains, "domains": domains_answer(info)})
            if info.scheduled:
                answer.update(_schedule_answer(info))
            if expires is not None:
                answer["expires"] = expires.decode()
            funnels, statuses = self.frontier.crawl_funnels_and_statuses(spiderid, [str(crawlid)])
            answer["status"] = crawl_status(
                statuses[str(crawlid)], bool(info.total_pending or info.in_flight or info.scheduled),
                waiting=bool(info.scheduled and not (info.total_pending or info.in_flight)))
            answer["funnel"] = funnels[str(crawlid)].as_dict()
            self._explain(answer, spiderid, info.total_pending + info.in_flight,
                          funnels[str(crawlid)], {})
        else:
            answer.update(self._app_answer(spiderid, appid))
        self.send(answer)
        self.logger.info("Sent info to bus", extra={"key": job.key, "uuid": request["uuid"]})

    def _app_answer(self, spiderid: str, appid: str) -> dict[str, Any]:
        """From ``Frontier.app_counts`` (two round trips), one MGET of the expiries and one
        read of the funnels."""
        crawls = self.frontier.app_counts(spiderid, appid)
        expiries: Any = self.redis.mget([keys.crawl_timeout(spiderid, appid, crawlid)
                                         for crawlid in crawls]) if crawls else []
        funnels, statuses = self.frontier.crawl_funnels_and_statuses(spiderid, list(crawls))
        per_crawl: dict[str, Any] = {}
        every_domain: set[str] = set()
        served: dict[str, bool] = {}
        for (crawlid, counts), expires in zip(crawls.items(), expiries, strict=True):
            entry: dict[str, Any] = {
                "domains": {name: {"low_priority": low, "high_priority": high, "total": total}
                            for name, (total, low, high) in counts.domains.items()},
                "distinct_domains": len(counts.domains), "total": counts.total}
            if expires is not None:
                entry["expires"] = expires.decode()
            entry["status"] = crawl_status(
                statuses[crawlid], True,
                waiting=bool(counts.scheduled and not (counts.domains or counts.in_flight)))
            if counts.scheduled:
                entry["scheduled"] = counts.scheduled
            entry["funnel"] = funnels[crawlid].as_dict()
            self._explain(entry, spiderid, counts.total, funnels[crawlid], served)
            per_crawl[crawlid] = entry
            every_domain.update(counts.domains)
        return {"total_pending": sum(entry["total"] for entry in per_crawl.values()),
                "total_domains": len(every_domain), "total_crawlids": len(per_crawl),
                "crawlids": per_crawl}
