"""Building a Redis the way the original Scrapy Cluster 1.2/1.3 wrote it (seed docs 000/001),
and running ``scrapy-cluster migrate`` on it."""

from __future__ import annotations

from typing import Any

import orjson
import redis
from click.testing import CliRunner, Result

from scrapy_cluster.cli import main
from scrapy_cluster.migration.legacy import legacy_fingerprint

ORIGINAL_DUPEFILTER_TTL_S = 600


def api_request(url: str, crawlid: str, priority: int, *, appid: str = "app",
                spiderid: str = "link", **fields: Any) -> dict[str, Any]:
    """What the original Kafka Monitor put in a queue: the validated API request itself."""
    return {"url": url, "appid": appid, "crawlid": crawlid, "spiderid": spiderid,
            "priority": priority, "maxdepth": 0, "expires": 0, "attrs": {}, **fields}


def link_request(url: str, crawlid: str, priority: int, *, appid: str = "app",
                 spiderid: str = "link", curdepth: int = 1, maxdepth: int = 1,
                 dont_filter: bool = False) -> dict[str, Any]:
    """What an original crawler put in a queue: Scrapy's request dict, crawl fields in meta."""
    meta = {"crawlid": crawlid, "appid": appid, "spiderid": spiderid, "priority": priority,
            "maxdepth": maxdepth, "curdepth": curdepth, "retry_times": 0, "expires": 0,
            "attrs": {}, "allowed_domains": None, "allow_regex": None, "deny_regex": None,
            "deny_extensions": None, "useragent": None, "cookie": None, "depth": curdepth,
            "download_slot": "example", "download_latency": 0.1}
    return {"url": url, "method": "GET", "headers": {"Referer": ["http://x/"]}, "body": "",
            "cookies": {}, "meta": meta, "_encoding": "utf-8", "priority": priority,
            "dont_filter": dont_filter, "callback": "parse", "errback": None}


class OriginalRedis:
    """Writes keys exactly as the original components did."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def queue(self, spiderid: str, domain: str, *requests: dict[str, Any]) -> str:
        """``<spiderid>:<domain>:queue``: ZSET of JSON requests scored -priority."""
        key = f"{spiderid}:{domain}:queue"
        self.client.zadd(key, {orjson.dumps(r): -r["priority"] for r in requests})
        return key

    def dupefilter(self, spiderid: str, crawlid: str, urls: list[str],
                   extra_digests: int = 0) -> str:
        """``<spiderid>:dupefilter:<crawlid>``: SET of 40-hex SHA1 fingerprints, with a TTL."""
        key = f"{spiderid}:dupefilter:{crawlid}"
        digests = [legacy_fingerprint(url) for url in urls]
        digests += [f"{n:040x}" for n in range(1, extra_digests + 1)]
        self.client.sadd(key, *digests)
        self.client.expire(key, ORIGINAL_DUPEFILTER_TTL_S)
        return key

    def stop(self, spiderid: str, appid: str, crawlid: str) -> None:
        """The Redis Monitor's stop/expire: ``<appid>||<crawlid>`` in ``<spiderid>:blacklist``."""
        self.client.sadd(f"{spiderid}:blacklist", f"{appid}||{crawlid}")

    def timeout(self, spiderid: str, appid: str, crawlid: str, expires_s: int) -> str:
        key = f"timeout:{spiderid}:{appid}:{crawlid}"
        self.client.set(key, expires_s)
        return key


def run_migrate(*args: str) -> Result:
    """``scrapy-cluster migrate ARGS`` in this process; fails the test on a non-zero exit."""
    result = CliRunner().invoke(main, ["migrate", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def moved(result: Result) -> int:
    """The count on the summary's first line (``moved N item(s)``, ``would move N item(s)``)."""
    first = next(line for line in result.stdout.splitlines() if "item(s)" in line)
    words = first.split()
    return int(words[words.index("item(s)") - 1])
