"""Python cost of the frontier's enqueue path, per request, with and without Redis.

    .venv/bin/python benchmarks/frontier_enqueue.py [--redis-url URL] [--requests N]
        [--profile FILE]

N requests (default 100,000; 100-character URLs over 1,000 hosts, with the
crawl API's fields as the Kafka Monitor passes them) go through, in batches
of 500 with dedupe on:

- ``build``: ``FrontierCalls.enqueue`` only (validation, registered domain,
  fingerprint, item encoding: the pure-Python part), best of three passes;
- ``enqueue_many``: the whole call on a fresh database, one round trip per
  batch; wall time, this process's CPU time per request, and the time Redis
  spent in the enqueue script per request (``INFO commandstats``).

``--profile FILE`` writes a cProfile of one ``build`` pass to FILE.
"""

from __future__ import annotations

import argparse
import cProfile
import time
from typing import Any

import redis
from frontier_support import throwaway_redis

from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.calls import FrontierCalls, FrontierPolicy
from scrapy_cluster.frontier.codec import DomainExtractor
from scrapy_cluster.settings import load_settings

BATCH = 500
PASSES = 3


def crawl_request(index: int) -> dict[str, Any]:
    head = f"http://www.site{index % 1000}.example.org/articles/{index:08d}/"
    return {"url": head + "x" * (100 - len(head)), "appid": "benchapp",
            "crawlid": f"crawl{index % 10}", "spiderid": "link", "priority": 1 + index % 100,
            "maxdepth": 2, "curdepth": 0, "expires": 0, "attrs": {}}


def batches(requests: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [requests[start:start + BATCH] for start in range(0, len(requests), BATCH)]


def build_pass(calls: FrontierCalls, chunks: list[list[dict[str, Any]]]) -> float:
    started = time.perf_counter()
    for chunk in chunks:
        calls.enqueue(chunk, dedupe=True, now_ms=None)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url")
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--profile")
    args = parser.parse_args()
    chunks = batches([crawl_request(i) for i in range(args.requests)])
    calls = FrontierCalls(FrontierPolicy(), DomainExtractor())
    build_s = min(build_pass(calls, chunks) for _ in range(PASSES))
    print(f"build:        {build_s / args.requests * 1e6:6.2f} us/request "
          f"({args.requests / build_s:,.0f} requests/s)")
    if args.profile:
        cProfile.runctx("build_pass(calls, chunks)", globals(), locals(), args.profile)
    settings = load_settings("crawler", environ={})
    with throwaway_redis(args.redis_url) as url:
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.config_resetstat()
        frontier = Frontier.from_settings(settings, client)
        wall, cpu = time.perf_counter(), time.process_time()
        queued = sum(frontier.enqueue_many(chunk, dedupe=True).queued for chunk in chunks)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        server_us = client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0)
        print(f"enqueue_many: {args.requests / wall:,.0f} requests/s, client CPU "
              f"{cpu / args.requests * 1e6:.2f} us/request, Redis script "
              f"{server_us / args.requests:.2f} us/request, {queued:,} queued")


if __name__ == "__main__":
    main()
