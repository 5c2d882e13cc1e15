"""Unthrottled dispatch rate of the frontier with 10, 1,000 and 100,000 non-empty domains.

    .venv/bin/python benchmarks/frontier_dispatch.py [--redis-url URL] [--scheduled 0,100000]

``--scheduled``: instead, at 1,000 domains, the same measure with that many URLs of another
crawl waiting in re-crawl schedules (due in an hour, so none is queued again during the run):
a pop's cost must not depend on their number.

For each domain count the frontier is filled (2 requests per domain at least,
200,000 in all), then one Python process calls pop(32) until 30,000 requests
were handed out and pop(1) until 5,000 were, three times each; the best run
is reported (the machine is shared, so the best is the least disturbed). Round trips per pop are counted
twice: on the client (commands sent) and on the server (EVALSHA calls in
INFO commandstats).
"""

from __future__ import annotations

import argparse
import time

import redis
from frontier_support import CountingConnection, evalsha_calls, throwaway_redis

from scrapy_cluster.frontier import DispatchView, Frontier
from scrapy_cluster.settings import load_settings

VIEW = DispatchView("link", "10.0.0.1")
TOTAL = 200_000
REPEATS = 3


def fill(frontier: Frontier, domains: int) -> None:
    total = max(TOTAL, 2 * domains)
    batch = []
    for i in range(total):
        batch.append({"url": f"http://site{i % domains}.com/page/{i}", "appid": "bench",
                      "crawlid": "c1", "spiderid": "link"})
        if len(batch) == 5000:
            frontier.enqueue_many(batch)
            batch = []
    if batch:
        frontier.enqueue_many(batch)


def schedule(frontier: Frontier, count: int) -> None:
    """``count`` URLs of crawl ``later`` fetched once and scheduled again in an hour."""
    from scrapy_cluster.frontier import Revisit

    for start in range(0, count, 1000):
        frontier.enqueue_many([{"url": f"http://later{i % 500}.com/p/{i}", "appid": "bench",
                                "crawlid": "later", "spiderid": "link", "priority": 100}
                               for i in range(start, min(count, start + 1000))])
        leased = frontier.pop(VIEW, 1000).requests
        frontier.ack([item.lease_id for item in leased],
                     revisits={item.lease_id: Revisit(3_600_000 + i, "1c,1,0a1b2c3d,,\"e\"")
                               for i, item in enumerate(leased)})


def measure(frontier: Frontier, client: redis.Redis, n: int, wanted: int) -> tuple[float, float, float]:
    calls, got = 0, 0
    sent, evals = CountingConnection.sent, evalsha_calls(client)
    started = time.perf_counter()
    while got < wanted:
        got += len(frontier.pop(VIEW, n).requests)
        calls += 1
    elapsed = time.perf_counter() - started
    client_trips = (CountingConnection.sent - sent) / calls
    server_trips = (evalsha_calls(client) - evals) / calls
    return got / elapsed, client_trips, server_trips


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url")
    parser.add_argument("--scheduled", help="comma-separated counts of scheduled URLs")
    args = parser.parse_args()
    settings = load_settings("crawler", overrides={"QUEUE_WINDOW": 0})
    with throwaway_redis(args.redis_url) as url:
        admin = redis.Redis.from_url(url)
        pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection)
        scheduled = [int(n) for n in args.scheduled.split(",")] if args.scheduled else [0]
        cases = [(1_000, n) for n in scheduled] if args.scheduled else \
            [(domains, 0) for domains in (10, 1_000, 100_000)]
        print("domains  scheduled  pop(n)  requests/s  round trips/pop (client, server EVALSHA)")
        for domains, waiting in cases:
            admin.flushdb()
            frontier = Frontier.from_settings(settings, redis.Redis(connection_pool=pool))
            schedule(frontier, waiting)
            fill(frontier, domains)
            frontier.pop(VIEW, 1)  # registers the view, loads the script
            for n, wanted in ((32, 30_000), (1, 5_000)):
                runs = [measure(frontier, admin, n, wanted) for _ in range(REPEATS)]
                rate = max(run[0] for run in runs)
                client_trips = max(run[1] for run in runs)
                server_trips = max(run[2] for run in runs)
                print(f"{domains:>7}  {waiting:>9}  {n:>6}  {rate:>10,.0f}  "
                      f"{client_trips:.2f}, {server_trips:.2f}")


if __name__ == "__main__":
    main()
