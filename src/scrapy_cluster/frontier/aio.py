"""``AsyncFrontier``: the same frontier for asyncio code (Rest service, asyncio crawlers).

Same scripts, same ``calls``, same round-trip counts as ``Frontier``; only
the client (``redis.asyncio.Redis``) differs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis
import redis.asyncio

from scrapy_cluster import keys
from scrapy_cluster.errors import FrontierError
from scrapy_cluster.frontier import codec, waiting
from scrapy_cluster.frontier.calls import FrontierCalls, FrontierPolicy
from scrapy_cluster.frontier.model import (
    Clock,
    CrawlFunnel,
    CrawlInfo,
    DispatchView,
    EnqueueResult,
    FunnelCounts,
    LateSend,
    PopResult,
)
from scrapy_cluster.frontier.scripts import FrontierScripts
from scrapy_cluster.frontier.seen import SeenCache


class AsyncFrontier:
    """See ``Frontier``; every method is a coroutine with the same contract."""

    def __init__(self, redis_client: redis.asyncio.Redis, calls: FrontierCalls, *,
                 clock: Clock | None = None, seen: SeenCache | None = None) -> None:
        self.redis = redis_client
        self.calls = calls
        self.clock = clock
        self.seen = seen
        self.scripts = FrontierScripts(redis_client)
        self._held: set[str] = set()
        self.redis_timer_slack_s = waiting.DEFAULT_REDIS_TIMER_SLACK_S

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], redis_client: redis.asyncio.Redis,
                      clock: Clock | None = None, *,
                      seen_cache: bool = False) -> AsyncFrontier:
        """``seen_cache``: remember links known to be recorded (crawlers only: the skipped
        duplicates reach the URL funnel through their lease acks; ``frontier/seen.py``)."""
        calls = FrontierCalls(FrontierPolicy.from_settings(settings), codec.DomainExtractor())
        seen = SeenCache.from_settings(settings) if seen_cache else None
        return cls(redis_client, calls, clock=clock, seen=seen)

    def _now(self) -> int | None:
        return None if self.clock is None else int(self.clock())

    async def _run(self, script: Any, call: tuple[list[str], list[Any]]) -> Any:
        try:
            return await script(keys=call[0], args=call[1])
        except redis.ResponseError as exc:
            raise FrontierError(f"frontier script failed: {exc}") from exc

    async def enqueue_many(self, requests: Sequence[dict[str, Any]], *, dedupe: bool = False,
                           funnel: bool = True) -> EnqueueResult:
        batch = self.calls.enqueue_batch(requests, dedupe=dedupe, now_ms=self._now(),
                                         funnel=funnel, seen=self.seen)
        reply = None if batch.empty else await self._run(self.scripts.enqueue, batch.call)
        return self.calls.finish_enqueue(batch, reply, self.seen)

    async def pop(self, view: DispatchView, n: int) -> PopResult:
        if n <= 0:
            raise ValueError("n must be positive")
        reply = await self._run(self.scripts.pop, self.calls.pop(view, n, self._now()))
        result = self.calls.parse_pop(reply, view.spiderid, time.monotonic())
        self._held.update(leased.lease_id for leased in result.requests)
        return result

    async def ack(self, lease_ids: Sequence[str], *, funnel: FunnelCounts | None = None) -> int:
        if not lease_ids and not funnel:
            return 0
        self._held.difference_update(lease_ids)
        return int(await self._run(self.scripts.ack,
                                   self.calls.ack(lease_ids, self._now(), funnel)))

    async def release(self, lease_ids: Sequence[str], *, priority_delta: int = 0) -> int:
        if not lease_ids:
            return 0
        self._held.difference_update(lease_ids)
        call = self.calls.release(lease_ids, priority_delta, self._now())
        return int(await self._run(self.scripts.release, call))

    async def release_held(self) -> int:
        return await self.release(sorted(self._held))

    async def restamp(self, view: DispatchView, late: Sequence[LateSend]) -> int:
        if not late:
            return 0
        return int(await self._run(self.scripts.restamp, self.calls.restamp(view, late)))

    async def late_slot(self, view: DispatchView, domain: str, dispatched_ms: int) -> int:
        call = self.calls.late_slot(view, domain, dispatched_ms, self._now())
        return int(await self._run(self.scripts.late_slot, call))

    async def reap(self, limit: int = 1000) -> int:
        reply = await self._run(self.scripts.reap, self.calls.reap(limit, self._now()))
        return int(reply[0])

    async def wait_for_work(self, view: DispatchView, until: PopResult | float | None) -> bool:
        deadline_s = waiting.wait_deadline(until)
        wake = [keys.wake_list(view.spiderid)]
        while True:
            step = waiting.next_step(deadline_s, time.monotonic(), self.redis_timer_slack_s)
            if not step.blpop_s:
                await asyncio.sleep(step.sleep_s)
                return False
            started_s = time.monotonic()
            if await self.redis.blpop(wake, timeout=step.blpop_s):
                return True
            self.redis_timer_slack_s = waiting.learn_slack(
                self.redis_timer_slack_s, step.blpop_s, time.monotonic() - started_s)
            if deadline_s is None:
                return False

    async def crawl_info(self, spiderid: str, appid: str, crawlid: str | None = None) -> CrawlInfo:
        reply = await self._run(self.scripts.info, self.calls.info(spiderid, appid, crawlid))
        return self.calls.parse_info(reply, spiderid, appid, crawlid)

    async def crawl_funnels(self, spiderid: str,
                            crawlids: Sequence[str]) -> dict[str, CrawlFunnel]:
        pipe = self.redis.pipeline(transaction=False)
        for key in self.calls.funnel_keys(spiderid, crawlids):
            pipe.hgetall(key)
        return self.calls.parse_funnels(crawlids, await pipe.execute() if crawlids else [])

    async def purge(self, spiderid: str, appid: str, crawlid: str | None = None, *,
                    reason: str = "stopped") -> int:
        crawlids = [crawlid] if crawlid else (await self.crawl_info(spiderid, appid)).crawlids
        removed = 0
        for crawl in crawlids:
            phase = "q0"
            while phase != "done":
                queued, leases, phase = self.calls.parse_purge(await self._run(
                    self.scripts.purge, self.calls.purge(spiderid, appid, crawl, phase,
                                                         reason=reason, now_ms=self._now())))
                removed += queued + leases
        return removed

    async def touch_domain(self, domain: str) -> int:
        return int(await self._run(self.scripts.touch, self.calls.touch(domain, self._now())))

    def fingerprint(self, request: dict[str, Any]) -> bytes:
        return codec.fingerprint(request)
