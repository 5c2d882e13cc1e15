"""``LinkBatcher``: pages finishing together share one enqueue call; each page still learns
its call's outcome, and the seen cache's duplicates are counted once. The frontier here is a
recording stand-in for our own ``enqueue_many`` seam (the real frontier is exercised by
tests/test_seen_cache_crawl.py and the fast engine's crawl tests)."""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from scrapy_cluster.crawler.common.funnel import FunnelCounter
from scrapy_cluster.crawler.fast.link_batch import LinkBatcher
from scrapy_cluster.frontier.model import EnqueueResult


class Recorder:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.calls: list[tuple[list[dict[str, Any]], bool, bool]] = []
        self.fail = fail

    async def enqueue_many(self, requests: Any, *, dedupe: bool = False,
                           funnel: bool = True) -> EnqueueResult:
        self.calls.append((list(requests), dedupe, funnel))
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        return EnqueueResult(queued=len(requests), cached=2,
                             cached_by_crawl={("link", "c1"): 2})


def links(page: int, n: int = 3) -> list[dict[str, Any]]:
    return [{"url": f"http://a.com/{page}/{i}", "spiderid": "link", "crawlid": "c1"}
            for i in range(n)]


def test_pages_within_the_linger_share_one_call_and_count_cached_once() -> None:
    async def run() -> tuple[Recorder, FunnelCounter, list[Any]]:
        frontier, funnel = Recorder(), FunnelCounter()
        batcher = LinkBatcher(frontier, funnel, linger_s=0.05)
        results = await asyncio.gather(*(batcher.enqueue_many(links(p), dedupe=True)
                                         for p in range(5)))
        return frontier, funnel, results

    frontier, funnel, results = asyncio.run(run())
    assert len(frontier.calls) == 1
    sent, dedupe, counted = frontier.calls[0]
    assert [r["url"] for r in sent] == [r["url"] for p in range(5) for r in links(p)]
    assert (dedupe, counted) == (True, True)
    assert all(result.queued == 15 and result.cached_by_crawl == {} for result in results)
    assert funnel.take() == {("link", "c1"): {"submitted": 2, "deduplicated": 2}}


def test_a_full_batch_goes_without_waiting_for_the_linger() -> None:
    async def run() -> int:
        frontier = Recorder()
        batcher = LinkBatcher(frontier, None, linger_s=30.0, max_requests=6)
        await asyncio.wait_for(asyncio.gather(batcher.enqueue_many(links(0), dedupe=True),
                                              batcher.enqueue_many(links(1), dedupe=True)), 5)
        return len(frontier.calls)

    assert asyncio.run(run()) == 1


def test_an_outage_fails_every_page_of_the_batch() -> None:
    async def run() -> list[Any]:
        batcher = LinkBatcher(Recorder(fail=redis.ConnectionError("down")), FunnelCounter(),
                              linger_s=0.01)
        return await asyncio.gather(*(batcher.enqueue_many(links(p), dedupe=True)
                                      for p in range(3)), return_exceptions=True)

    outcomes = asyncio.run(run())
    assert [type(outcome) for outcome in outcomes] == [redis.ConnectionError] * 3


def test_retries_and_unfiltered_requests_go_alone_and_keep_their_cached_counts() -> None:
    async def run() -> tuple[Recorder, Any]:
        frontier = Recorder()
        batcher = LinkBatcher(frontier, FunnelCounter(), linger_s=0.05)
        result = await batcher.enqueue_many(links(0, 1), dedupe=False, funnel=False)
        return frontier, result

    frontier, result = asyncio.run(run())
    assert [(dedupe, counted) for _, dedupe, counted in frontier.calls] == [(False, False)]
    assert result.cached_by_crawl == {("link", "c1"): 2}  # the caller counts these itself


def test_a_page_arriving_during_a_call_goes_in_the_next_one() -> None:
    async def run() -> list[int]:
        frontier = Recorder()
        batcher = LinkBatcher(frontier, None, linger_s=0)
        first = asyncio.create_task(batcher.enqueue_many(links(0), dedupe=True))
        await asyncio.sleep(0)  # the first call is in flight
        await asyncio.gather(first, batcher.enqueue_many(links(1), dedupe=True),
                             batcher.enqueue_many(links(2), dedupe=True))
        return [len(sent) for sent, _, _ in frontier.calls]

    assert asyncio.run(run()) == [3, 6]


