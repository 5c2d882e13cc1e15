"""Memory of a one-week rolling window after 1,000,000 hits: bucket hash vs one sorted-set member per hit.

Both counters see the same hits, spread evenly over three simulated weeks (an
injected clock, so the run takes seconds, not weeks). The sorted-set counter
stores one member per hit and trims members older than the window, as the
original collector did; ours keeps one hash field per time bucket.

    .venv/bin/python benchmarks/stats_memory.py [--redis-url URL] [--hits N]

Without --redis-url a throwaway redis-server is started on a free loopback port.
"""

from __future__ import annotations

import argparse
import time

import redis
from frontier_support import throwaway_redis  # sibling module: benchmarks/ is on sys.path

from scrapy_cluster.stats import SECONDS_1_WEEK, RollingTimeWindow

BATCH = 10_000
START_S = 1_454_266_800.0


class SimulatedClock:
    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def run(client: redis.Redis, hits: int) -> None:
    clock = SimulatedClock(START_S)
    ours = RollingTimeWindow(client, "bench:buckets", window_s=SECONDS_1_WEEK, clock=clock)
    step_s = 3 * SECONDS_1_WEEK / hits
    started = time.perf_counter()
    for batch_start in range(0, hits, BATCH):
        pipe = client.pipeline(transaction=False)
        for index in range(batch_start, min(batch_start + BATCH, hits)):
            ours.queue_increment(pipe)
            pipe.zadd("bench:zset", {f"{clock.now_s:.6f}:{index}": clock.now_s})
            clock.now_s += step_s
        pipe.zremrangebyscore("bench:zset", "-inf", clock.now_s - SECONDS_1_WEEK)
        pipe.execute()
    elapsed_s = time.perf_counter() - started
    report(client, ours, hits, elapsed_s)


def report(client: redis.Redis, ours: RollingTimeWindow, hits: int, elapsed_s: float) -> None:
    ours_bytes = client.memory_usage("bench:buckets", samples=0)
    zset_bytes = client.memory_usage("bench:zset", samples=0)
    print(f"hits: {hits:,} over 3 simulated weeks; window: 1 week ({elapsed_s:.1f} s wall time)")
    print(f"bucket hash : {client.hlen('bench:buckets'):>9,} fields  {ours_bytes:>12,} bytes  "
          f"value {ours.value():,}")
    print(f"sorted set  : {client.zcard('bench:zset'):>9,} members {zset_bytes:>12,} bytes  "
          f"value {client.zcard('bench:zset'):,}")
    print(f"ratio       : {zset_bytes / ours_bytes:,.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", help="use this Redis (keys bench:* are deleted)")
    parser.add_argument("--hits", type=int, default=1_000_000)
    args = parser.parse_args()
    if args.redis_url:
        client = redis.Redis.from_url(args.redis_url)
        client.delete("bench:buckets", "bench:zset")
        run(client, args.hits)
        return
    with throwaway_redis() as url:
        run(redis.Redis.from_url(url), args.hits)


if __name__ == "__main__":
    main()
