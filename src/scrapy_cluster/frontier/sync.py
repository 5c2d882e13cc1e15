"""``Frontier``: the distributed frontier for synchronous code (the Scrapy scheduler, the
Redis Monitor, the command line).

Written from ``aio.py`` by ``python -m scrapy_cluster.frontier.unasync``: do not edit this
file, edit ``aio.py`` and run that command (a test fails when the two differ).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import FrontierError
from scrapy_cluster.frontier import codec, waiting
from scrapy_cluster.frontier.calls import FrontierCalls, FrontierPolicy, summarize_counts
from scrapy_cluster.frontier.model import (
    Backlog,
    Clock,
    CompletedCrawl,
    CrawlCounts,
    CrawlFunnel,
    CrawlInfo,
    DispatchView,
    EnqueueResult,
    FunnelCounts,
    LateSend,
    PopResult,
    PurgeResult,
    Revisit,
)
from scrapy_cluster.frontier.scripts import FrontierScripts
from scrapy_cluster.frontier.seen import SeenCache


class Frontier:
    """Per-domain throttled priority queues in Redis, shared by every crawler process.

    All logic lives in the Lua scripts and in ``calls``; this class adds the round trip.
    Round trips: ``enqueue_many``, ``pop``, ``ack``, ``release``, ``restamp``,
    ``late_slot``, ``reap``, ``crawl_info``, ``crawl_funnels``, ``backlog``,
    ``touch_domain``, ``take_completed``, ``confirm_completed`` and
    ``crawl_funnels_and_statuses`` one each; ``app_counts`` two; ``purge`` one per chunk;
    ``wait_for_work`` one blocking BLPOP per slice of at most 5 s (none in its last ~0.1 s,
    which is slept locally to the millisecond; see ``waiting``).

    ``clock`` (ms) replaces Redis server time; inject it in tests only, since
    production processes must agree on time.
    """

    def __init__(self, redis_client: redis.Redis, calls: FrontierCalls, *,
                 clock: Clock | None = None, seen: SeenCache | None = None) -> None:
        self.redis = redis_client
        self.calls = calls
        self.clock = clock
        self.seen = seen
        self.scripts = FrontierScripts(redis_client)
        self._held: set[str] = set()
        self.redis_timer_slack_s = waiting.DEFAULT_REDIS_TIMER_SLACK_S

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], redis_client: redis.Redis,
                      clock: Clock | None = None, *,
                      seen_cache: bool = False) -> Frontier:
        """``seen_cache``: remember links known to be recorded (crawlers only: the skipped
        duplicates reach the URL funnel through their lease acks; ``frontier/seen.py``)."""
        calls = FrontierCalls(FrontierPolicy.from_settings(settings), codec.DomainExtractor())
        seen = SeenCache.from_settings(settings) if seen_cache else None
        return cls(redis_client, calls, clock=clock, seen=seen)

    def _now(self) -> int | None:
        return None if self.clock is None else int(self.clock())

    def _run(self, script: Any, call: tuple[list[str], list[Any]]) -> Any:
        try:
            return script(keys=call[0], args=call[1])
        except redis.ResponseError as exc:
            raise FrontierError(f"frontier script failed: {exc}") from exc

    def enqueue_many(
            self, requests: Sequence[dict[str, Any]], *, dedupe: bool = False,
            funnel: bool = True) -> EnqueueResult:
        """Queue ``requests`` (invalid ones are reported, not queued). One round trip, which
        also counts them in their crawls' URL funnels unless ``funnel`` is False (a retry);
        none when the seen cache knew every request for a duplicate (the result's
        ``cached_by_crawl``: the caller counts those in its funnel; ``frontier/seen.py``)."""
        batch = self.calls.enqueue_batch(requests, dedupe=dedupe, now_ms=self._now(),
                                         funnel=funnel, seen=self.seen)
        reply = None if batch.empty else self._run(self.scripts.enqueue, batch.call)
        return self.calls.finish_enqueue(batch, reply, self.seen)

    def pop(self, view: DispatchView, n: int) -> PopResult:
        """Lease up to ``n`` dispatchable requests. One round trip, whatever the number of domains."""
        if n <= 0:
            raise ValueError("n must be positive")
        reply = self._run(self.scripts.pop, self.calls.pop(view, n, self._now()))
        result = self.calls.parse_pop(reply, view.spiderid, time.monotonic())
        self._held.update(leased.lease_id for leased in result.requests)
        return result

    def ack(self, lease_ids: Sequence[str], *, funnel: FunnelCounts | None = None,
                  revisits: Mapping[str, Revisit] | None = None) -> int:
        """Finish leased requests; returns how many were still held. One round trip, which
        also adds ``funnel`` (a crawler's URL funnel counts) to the crawls' funnels, schedules
        the ``revisits`` (lease id -> ``Revisit``; each must be among ``lease_ids``) to be
        queued again when due, and moves a crawl left with nothing queued, leased or scheduled
        into the idle index. A bad revisit state raises ValueError before anything is sent."""
        if not lease_ids and not funnel:
            return 0
        call = self.calls.ack(lease_ids, self._now(), funnel, revisits)
        self._held.difference_update(lease_ids)
        return int(self._run(self.scripts.ack, call))

    def release(self, lease_ids: Sequence[str], *, priority_delta: int = 0) -> int:
        """Put leased requests back (``priority_delta`` < 0 for retries). One round trip."""
        if not lease_ids:
            return 0
        self._held.difference_update(lease_ids)
        call = self.calls.release(lease_ids, priority_delta, self._now())
        return int(self._run(self.scripts.release, call))

    def release_held(self) -> int:
        """Graceful shutdown: give back every lease this object handed out and still holds."""
        return self.release(sorted(self._held))

    def restamp(self, view: DispatchView, late: Sequence[LateSend]) -> int:
        """Count the throttle slots of requests sent late from their send (``LateSend``);
        returns how many slots moved. One round trip for any number."""
        if not late:
            return 0
        return int(self._run(self.scripts.restamp, self.calls.restamp(view, late)))

    def late_slot(self, view: DispatchView, domain: str, dispatched_ms: int) -> int:
        """A fresh throttle slot for a request of ``domain`` leaving more than the send
        allowance after its dispatch at ``dispatched_ms``: 0 when it was taken (send now),
        else the ms to wait before asking again. One round trip, only for late sends."""
        call = self.calls.late_slot(view, domain, dispatched_ms, self._now())
        return int(self._run(self.scripts.late_slot, call))

    def reap(self, limit: int = 1000) -> int:
        """Requeue up to ``limit`` expired leases (their crawler died). One round trip."""
        reply = self._run(self.scripts.reap, self.calls.reap(limit, self._now()))
        return int(reply[0])

    def wait_for_work(self, view: DispatchView, until: PopResult | float | None) -> bool:
        """Block until work may be dispatchable for ``view``; True when woken by a wake token.

        ``until``: the ``PopResult`` of the pop that came back short (the wait ends when its
        earliest throttled domain may dispatch), a ``time.monotonic()`` deadline, or None
        (nothing queued: one 5 s slice, then pop again). Any enqueue, release or domain
        config change ends the wait early (a token on ``<spiderid>:wake``, BLPOPed; no
        polling). Ends within about a millisecond of the deadline: see ``waiting``.
        """
        deadline_s = waiting.wait_deadline(until)
        wake = [keys.wake_list(view.spiderid)]
        while True:
            step = waiting.next_step(deadline_s, time.monotonic(), self.redis_timer_slack_s)
            if not step.blpop_s:
                time.sleep(step.sleep_s)
                return False
            started_s = time.monotonic()
            if self.redis.blpop(wake, timeout=step.blpop_s):
                return True
            self.redis_timer_slack_s = waiting.learn_slack(
                self.redis_timer_slack_s, step.blpop_s, time.monotonic() - started_s)
            if deadline_s is None:
                return False

    def crawl_info(self, spiderid: str, appid: str, crawlid: str | None = None) -> CrawlInfo:
        """Counts per domain and priority from the crawl indexes, and the re-crawl schedule's
        size, due count and next due time. One round trip."""
        reply = self._run(self.scripts.info,
                                self.calls.info(spiderid, appid, crawlid, self._now()))
        return self.calls.parse_info(reply, spiderid, appid, crawlid)

    def crawl_funnels(
            self, spiderid: str, crawlids: Sequence[str]) -> dict[str, CrawlFunnel]:
        """The URL funnel of each crawl (all zeros for an unknown one). One round trip (one
        pipelined HGETALL per crawl; none without crawls)."""
        pipe = self.redis.pipeline(transaction=False)
        for key in self.calls.funnel_keys(spiderid, crawlids):
            pipe.hgetall(key)
        replies = pipe.execute() if crawlids else []
        return self.calls.parse_funnels(crawlids, replies)

    def app_counts(self, spiderid: str, appid: str) -> dict[str, CrawlCounts]:
        """Every crawl of an app with work left, per domain ``(total, low priority, high
        priority)`` and in-flight leases. Two round trips (the app's crawl set, then one
        pipelined HGETALL per crawl): plain reads, so Redis is never busy for long whatever
        the app's size; the summing happens here. Crawls with nothing left are dropped from
        the app's set (one more round trip, only then)."""
        members: Any = self.redis.smembers(keys.app_crawls(spiderid, appid))
        crawlids = sorted(member.decode() for member in members)
        pipe = self.redis.pipeline(transaction=False)
        for crawlid in crawlids:
            pipe.hgetall(keys.crawl_counts(spiderid, crawlid))
        result: dict[str, CrawlCounts] = {}
        finished = []
        for crawlid, counts in zip(crawlids, pipe.execute(), strict=True):
            if counts:
                result[crawlid] = summarize_counts(counts)
            else:
                finished.append(crawlid)
        if finished:
            self.redis.srem(keys.app_crawls(spiderid, appid), *finished)
        return result

    def backlog(self, most_domains: int = 10_000) -> dict[str, Backlog]:
        """Queued requests per spider and domain (at most ``most_domains`` domains listed per
        spider; all counted in its total). One round trip; reads lengths, never items."""
        reply = self._run(self.scripts.backlog, self.calls.backlog(most_domains))
        return self.calls.parse_backlog(reply)

    def purge(self, spiderid: str, appid: str, crawlid: str | None = None) -> int:
        """Blacklist and remove the crawl(s) and their leases; returns requests removed.
        Round trips as ``purge_detail``."""
        result = self.purge_detail(spiderid, appid, crawlid)
        return result.total

    def purge_detail(
            self, spiderid: str, appid: str, crawlid: str | None = None, *,
            reason: str = "stopped") -> PurgeResult:
        """``purge``, telling queued requests from in-flight leases removed. The crawl ends
        with status ``reason`` (``stopped`` or ``expired``) unless it had ended already
        (``prior_status``, of the one crawl or of the last one); its keys get CRAWL_STATE_TTL.

        One round trip per chunk of FRONTIER_PURGE_CHUNK requests, so Redis is never blocked
        for long (plus one, ``crawl_info``, to list the app's crawls when ``crawlid`` is None).
        """
        if crawlid:
            crawlids = [crawlid]
        else:
            info = self.crawl_info(spiderid, appid)
            crawlids = info.crawlids
        queued = in_flight = 0
        prior: str | None = None
        for crawl in crawlids:
            phase = "q0"
            first = True
            while phase != "done":
                call = self.calls.purge(spiderid, appid, crawl, phase, reason=reason,
                                        now_ms=self._now())
                reply = self._run(self.scripts.purge, call)
                if first:
                    prior, first = self.calls.purge_prior_status(reply), False
                removed, leases, phase = self.calls.parse_purge(reply)
                queued += removed
                in_flight += leases
        return PurgeResult(queued, in_flight, prior)

    def touch_domain(self, domain: str) -> int:
        """Make ``domain`` due now in every ready set (after a domain config change). One
        round trip."""
        return int(self._run(self.scripts.touch, self.calls.touch(domain, self._now())))

    def fingerprint(self, request: dict[str, Any]) -> bytes:
        """The request's dedupe fingerprint (no round trip)."""
        return codec.fingerprint(request)

    def take_completed(
            self, *, grace_ms: int, hold_ms: int, most: int = 100) -> list[CompletedCrawl]:
        """Crawls idle (nothing queued, nothing leased) for ``grace_ms``, now declared
        complete, plus notices a dead monitor took and never confirmed; each is held for
        ``hold_ms`` so no other caller takes it. One round trip (``frontier_complete.lua``)."""
        call = self.calls.take_completed(grace_ms, hold_ms, most, self._now())
        return self.calls.parse_completed(self._run(self.scripts.complete, call))

    def confirm_completed(self, completed: Sequence[CompletedCrawl]) -> int:
        """The notices of ``completed`` were delivered: release their index entries. One
        round trip (none when empty)."""
        if not completed:
            return 0
        call = self.calls.confirm_completed(completed)
        return int(self._run(self.scripts.complete_done, call))

    def crawl_funnels_and_statuses(
            self, spiderid: str, crawlids: Sequence[str],
    ) -> tuple[dict[str, CrawlFunnel], dict[str, str | None]]:
        """``crawl_funnels`` and each crawl's status (``running``, ``complete``, ``stopped``,
        ``expired``; None without state). One round trip (pipelined HGETALL + HGET per crawl;
        none without crawls)."""
        if not crawlids:
            return {}, {}
        pipe = self.redis.pipeline(transaction=False)
        for key in self.calls.funnel_keys(spiderid, crawlids):
            pipe.hgetall(key)
        for crawlid in crawlids:
            pipe.hget(self.calls.state_key(spiderid, crawlid), "status")
        replies = pipe.execute()
        count = len(crawlids)
        return (self.calls.parse_funnels(crawlids, replies[:count]),
                self.calls.parse_statuses(crawlids, replies[count:]))
