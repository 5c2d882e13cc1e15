"""Writing Redis Monitor jobs: a key in the original shape plus an entry in the job stream.

For each action, stats or domain-configuration request the Kafka Monitor writes

- the job key, e.g. ``info:<spiderid>:<appid>:<crawlid>:<uuid>`` (see ``keys.py``),
  holding the request's JSON, with TTL ``REDIS_MONITOR_JOB_TTL``;
- an entry ``{key, type, payload}`` in the stream ``redis-monitor:jobs``, so the
  Redis Monitor finds jobs with a blocking consumer-group read, never a scan.

The uuid at the end of the key keeps two requests for the same crawl apart.
A request delivered twice (at-least-once) writes the same key twice and adds two
stream entries; the Redis Monitor deletes the key when it takes the job
(``lua/redis_monitor_take.lua``) and skips an entry whose key is gone, so it runs once.

Crawls with ``expires`` get ``timeout:<spiderid>:<appid>:<crawlid>`` = expiry
(epoch s) and a member in the ``redis-monitor:timeouts`` sorted set scored by
the expiry, so the Redis Monitor reads due crawls with ``ZRANGEBYSCORE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from scrapy_cluster import keys

JOB_TYPES = ("info", "stop", "statsrequest", "zk")


class JobWriter:
    """Queues job writes on the caller's pipeline: zero round trips of its own."""

    def __init__(self, *, ttl_s: int, stream_maxlen: int) -> None:
        self.ttl_s = ttl_s
        self.stream_maxlen = stream_maxlen

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> JobWriter:
        return cls(ttl_s=int(settings["REDIS_MONITOR_JOB_TTL"]),
                   stream_maxlen=int(settings["REDIS_MONITOR_JOBS_MAXLEN"]))

    def queue_job(self, pipe: Any, job_type: str, key: str, payload: Mapping[str, Any]) -> None:
        """SET the job key (with TTL) and XADD it to the job stream, on ``pipe``."""
        if job_type not in JOB_TYPES:
            raise ValueError(f"unknown job type {job_type!r}; expected one of {JOB_TYPES}")
        body = orjson.dumps(payload)
        pipe.set(key, body, ex=self.ttl_s)
        pipe.xadd(keys.redis_monitor_jobs(), {"key": key, "type": job_type, "payload": body},
                  maxlen=self.stream_maxlen, approximate=True)

    def queue_timeout(self, pipe: Any, spiderid: str, appid: str, crawlid: str,
                      expires_s: int) -> None:
        """SET ``timeout:<spiderid>:<appid>:<crawlid>`` = expiry and index it, on ``pipe``."""
        key = keys.crawl_timeout(spiderid, appid, crawlid)
        pipe.set(key, expires_s)
        pipe.zadd(keys.crawl_timeouts(), {key: expires_s})
