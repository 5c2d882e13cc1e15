"""``StopMonitor`` and ``ExpireMonitor``: purge a crawl, blacklist it, and say so.

Both go through ``frontier.purge_detail``: the crawl id joins ``<spiderid>:blacklist`` first, so
no crawler enqueues links of a page it is still fetching and no lease of the crawl is handed
back; then its queued requests and leases are removed in chunks of FRONTIER_PURGE_CHUNK (one
round trip each, so Redis never stalls), and its timeout is deleted. The crawl's status becomes
``stopped`` or ``expired`` unless it had already ended: the first end wins, so a crawl that
completed gets no ``expired`` notice (a ``stop`` request is still answered), and a stopped or
expired crawl never completes (docs/api.md, "Crawl complete").
"""

from __future__ import annotations

from typing import Any

from scrapy_cluster import keys
from scrapy_cluster.frontier.scripts import lua_source
from scrapy_cluster.redis_monitor.jobs import Job
from scrapy_cluster.redis_monitor.plugins.base import BaseMonitor

EXPIRE_BATCH = 50


class _Purging(BaseMonitor):
    reason = "stopped"

    def purge(self, spiderid: str, appid: str, crawlid: str | None) -> int:
        """Purge and forget the timeouts; returns the queued requests removed."""
        return self.purge_crawls(spiderid, appid, crawlid)[0]

    def purge_crawls(self, spiderid: str, appid: str,
                     crawlid: str | None) -> tuple[int, str | None]:
        """``purge``, plus the status the (last) crawl had before (None without state)."""
        crawlids = [crawlid] if crawlid else self.frontier.crawl_info(spiderid, appid).crawlids
        removed, prior = 0, None
        for crawl in crawlids:
            result = self.frontier.purge_detail(spiderid, appid, crawl, reason=self.reason)
            removed, prior = removed + result.queued, result.prior_status
        if crawlids:
            timeouts = [keys.crawl_timeout(spiderid, appid, crawl) for crawl in crawlids]
            pipe = self.redis.pipeline(transaction=True)
            pipe.delete(*timeouts)
            pipe.zrem(keys.crawl_timeouts(), *timeouts)
            pipe.execute()
        return removed, prior


class StopMonitor(_Purging):
    """``stop`` action: one crawl, or every crawl of the app when ``crawlid`` is absent.

    Answer: ``{action: "stop", total_purged, server_time, crawlid, uuid, spiderid, appid}``.
    """

    job_types = ("stop",)
    regex = r"^stop:"
    required = {"appid": str, "spiderid": str, "uuid": str}
    optional = {"crawlid": str}

    def handle(self, job: Job) -> None:
        request = self.validate(job)
        crawlid = request.get("crawlid") or None
        purged = self.purge(request["spiderid"], request["appid"], crawlid)
        answer: dict[str, Any] = {"action": "stop", "total_purged": purged,
                                  "server_time": self.server_time(), "crawlid": crawlid,
                                  "uuid": request["uuid"], "spiderid": request["spiderid"],
                                  "appid": request["appid"]}
        self.send(answer)
        self.logger.info("Sent stop ack to bus", extra={"key": job.key, "total_purged": purged})


class ExpireMonitor(_Purging):
    """Expires crawls whose ``expires`` time passed (``redis-monitor:timeouts``).

    Every ``tick_interval_s`` one round trip (``lua/redis_monitor_due.lua``) takes the due
    crawls, holding them for REDIS_LOCK_EXPIRATION seconds so two monitors never expire the
    same crawl; each is purged and announced with
    ``{action: "expired", total_expired, server_time, crawlid, spiderid, appid}``.
    """

    tick_interval_s = 0.5
    reason = "expired"

    def setup(self, settings: Any) -> None:
        self.hold_s = max(1, int(float(settings["REDIS_LOCK_EXPIRATION"])))
        self._due = self.redis.register_script(lua_source("redis_monitor_due.lua"))

    def tick(self) -> int:
        due = self._due(keys=[keys.crawl_timeouts()],
                        args=[self.clock(), self.hold_s, EXPIRE_BATCH])
        expired = 0
        for i in range(0, len(due), 2):
            member = due[i].decode()
            parsed = keys.parse_crawl_timeout(member)
            if parsed is None:
                self.logger.error("malformed timeout key dropped", extra={"key": member})
                self.redis.zrem(keys.crawl_timeouts(), member)
                continue
            spiderid, appid, crawlid = parsed
            purged, prior = self.purge_crawls(spiderid, appid, crawlid)
            if prior in ("complete", "stopped"):  # it ended first: no second notice
                self.logger.info("Crawl ended before its expiry", extra={
                    "crawlid": crawlid, "appid": appid, "status": prior})
                continue
            self.send({"total_expired": purged, "server_time": self.server_time(),
                       "crawlid": crawlid, "spiderid": spiderid, "appid": appid,
                       "action": "expired"})
            self.logger.info("Expired crawl", extra={"crawlid": crawlid, "appid": appid,
                                                     "total_expired": purged})
            expired += 1
        return expired
