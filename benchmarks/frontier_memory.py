"""Redis memory per queued request and per dedupe fingerprint: the frontier vs scrapy-redis.

    .venv/bin/python benchmarks/frontier_memory.py [--redis-url URL] [--count N]

Each structure receives N entries (default 100,000) on an empty database;
the figure is the growth of INFO memory ``used_memory`` divided by N. A
request is a 100-character URL with the crawl API's default fields, as the
Kafka Monitor would queue it. scrapy-redis is measured with its own priority
queue and default serializer, and its RFPDupeFilter.
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Callable

import redis
from frontier_support import throwaway_redis
from scrapy import Request, Spider
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.queue import PriorityQueue

from scrapy_cluster.frontier import Frontier
from scrapy_cluster.settings import load_settings

DEFAULT_FIELDS = {"appid": "testapp", "crawlid": "abc1234", "spiderid": "link", "priority": 1,
                  "maxdepth": 0, "curdepth": 0, "expires": 0, "attrs": None,
                  "allowed_domains": None, "allow_regex": None, "deny_regex": None,
                  "deny_extensions": None, "useragent": None, "cookie": None}


def url(i: int, domains: int) -> str:
    head = f"http://www.site{i % domains}.com/articles/{i:08d}/"
    return head + "x" * (100 - len(head))


def grown_by(client: redis.Redis, fill: Callable[[], None]) -> int:
    client.flushdb()
    before = int(client.info("memory")["used_memory"])
    fill()
    return int(client.info("memory")["used_memory"]) - before


def frontier_queue(client: redis.Redis, count: int, domains: int) -> Callable[[], None]:
    frontier = Frontier.from_settings(load_settings("crawler"), client)

    def fill() -> None:
        for start in range(0, count, 5000):
            frontier.enqueue_many([{**DEFAULT_FIELDS, "url": url(i, domains)}
                                   for i in range(start, min(count, start + 5000))])
    return fill


def frontier_dupefilter(client: redis.Redis, count: int) -> Callable[[], None]:
    frontier = Frontier.from_settings(load_settings("crawler"), client)

    def fill() -> None:
        for start in range(0, count, 5000):
            frontier.enqueue_many([{**DEFAULT_FIELDS, "url": url(i, 100)}
                                   for i in range(start, min(count, start + 5000))], dedupe=True)
        for key in client.scan_iter(match="link:*:queue*", count=1000):  # benchmark only
            client.unlink(key)
    return fill


def scrapy_redis_queue(client: redis.Redis, count: int) -> Callable[[], None]:
    spider = Spider(name="link")
    queue = PriorityQueue(client, spider, "link:requests")

    def fill() -> None:
        for i in range(count):
            queue.push(Request(url(i, 100), meta={k: v for k, v in DEFAULT_FIELDS.items()
                                                  if k not in ("priority",)}))
    return fill


def scrapy_redis_dupefilter(client: redis.Redis, count: int) -> Callable[[], None]:
    dupefilter = RFPDupeFilter(client, "link:dupefilter")

    def fill() -> None:
        for i in range(count):
            dupefilter.request_seen(Request(url(i, 100)))
    return fill


def plain_digest_set(client: redis.Redis, count: int) -> Callable[[], None]:
    def fill() -> None:
        pipe = client.pipeline(transaction=False)
        for i in range(count):
            pipe.sadd("plain:set", hashlib.sha1(url(i, 100).encode()).digest())
            if i % 5000 == 4999:
                pipe.execute()
        pipe.execute()
    return fill


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url")
    parser.add_argument("--count", type=int, default=100_000)
    args = parser.parse_args()
    count = args.count
    with throwaway_redis(args.redis_url) as redis_url:
        client = redis.Redis.from_url(redis_url)
        rows = [
            ("frontier queue, 100 domains", frontier_queue(client, count, 100)),
            ("frontier queue, 10,000 domains", frontier_queue(client, count, 10_000)),
            ("frontier queue, one request per domain", frontier_queue(client, count, count)),
            ("scrapy-redis PriorityQueue (default serializer)", scrapy_redis_queue(client, count)),
            ("frontier dupefilter (bucketed hash)", frontier_dupefilter(client, count)),
            ("scrapy-redis RFPDupeFilter", scrapy_redis_dupefilter(client, count)),
            ("plain set of 20-byte digests", plain_digest_set(client, count)),
        ]
        print(f"{'structure':<50} bytes per entry ({count:,} entries)")
        for name, fill in rows:
            print(f"{name:<50} {grown_by(client, fill) / count:8.1f}")


if __name__ == "__main__":
    main()
