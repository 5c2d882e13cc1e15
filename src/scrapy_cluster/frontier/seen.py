"""A crawler's bounded memory of links its crawls already recorded, so repeats skip Redis.

Most links a page offers were seen before (a site's menu repeats on every page): on the
benchmark site 19 of 20. Each one used to cost the enqueue script a dupefilter read and a
search of the bucket, about 10 µs of Redis CPU, and the crawler the fingerprint and the
command packing. A crawler remembers, for every link the frontier confirmed as recorded in
the crawl's dupefilter, the smallest depth it was recorded at. A link of the same crawl offered
again at that depth or deeper would be answered "duplicate" by the script, so it is counted as
one (``submitted`` and ``deduplicated`` in the URL funnel, through the lease ack: see
``crawler/common/funnel.py``) and never sent.

Why this keeps the exactly-once semantics (docs/architecture.md, "Seen cache"):

* A record in a dupefilter is never removed while the filter lives, and its depth only goes
  down; so "recorded at depth <= d" stays true while the filter lives.
* A filter lives at least ``min(DUPEFILTER_TIMEOUT, CRAWL_STATE_TTL)`` after the last enqueue
  that touched it (every dedupe, a duplicate's included, re-arms it; a stop, expiry or
  completion only caps it at ``CRAWL_STATE_TTL``), and a confirmation is such an enqueue.
  An entry lives at most half of that (``window_s``), so it dies before its filter can.
* Only a batch with no blacklisted request teaches the cache (a request of a stopped crawl is
  not recorded, and the reply does not say which one it was).
* Only GET requests without a body are remembered, keyed by their URL exactly as given: the
  fingerprint is a function of the canonical URL alone for them, so an equal URL has an equal
  fingerprint and the fingerprint need not be computed on a hit.

What changes: a repeat of a stopped crawl's link within the window is counted
``deduplicated`` rather than ``filtered:blacklisted`` (neither is queued), and a hit is not
re-validated (it was when it was recorded). Memory: at most ``max_entries`` URLs, about 230
bytes each (two generations of at most half each: the older one is dropped whole).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from scrapy_cluster.frontier import codec

Pending = list[tuple[str, int]]
"""(cache key, recorded depth) of the requests of one batch, learned once it succeeded."""


class SeenCache:
    """Links known to be recorded in their crawl's dupefilter. No I/O; ``clock`` in seconds."""

    def __init__(self, window_s: float, max_entries: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = float(window_s)
        self.half = max(1, int(max_entries) // 2)
        self.clock = clock
        self._young: dict[str, int] = {}
        self._old: dict[str, int] = {}
        self.hits = 0
        self.misses = 0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> SeenCache | None:
        """None when ``FRONTIER_SEEN_CACHE_SIZE`` is 0 (every link goes to Redis)."""
        size = int(settings["FRONTIER_SEEN_CACHE_SIZE"])
        if size <= 0:
            return None
        return cls(safe_window_s(settings), size)

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    @staticmethod
    def key(request: Mapping[str, Any]) -> str | None:
        """The cache key of a request, or None when it may not be cached (not a plain GET)."""
        if (request.get("method") or "GET") != "GET" or request.get("body") \
                or request.get("body_b64") or request.get("dont_filter"):
            return None
        url = request.get("url")
        if not isinstance(url, str):
            return None
        return f"{request.get('spiderid')}\0{request.get('crawlid')}\0{url}"

    @staticmethod
    def key_prefix(request: Mapping[str, Any]) -> str | None:
        """What ``key`` puts before the url, or None when a request with these fields other
        than ``url`` may not be cached: ``key(request) == key_prefix(request) + url`` for a
        url of type ``str``. The links of one page share it (``FrontierCalls.enqueue_batch``)."""
        if (request.get("method") or "GET") != "GET" or request.get("body") \
                or request.get("body_b64") or request.get("dont_filter"):
            return None
        return f"{request.get('spiderid')}\0{request.get('crawlid')}\0"

    def covers(self, key: str, depth: int) -> bool:
        """True when the key's record is known to be at ``depth`` or shallower (a duplicate)."""
        packed = self._young.get(key)
        if packed is None:
            packed = self._old.get(key)
            if packed is None:
                self.misses += 1
                return False
        if min(depth, codec.MAX_DEPTH_RECORDED) >= (packed & 0xFF) \
                and (packed >> 8) > self.clock() * 1000:
            self.hits += 1
            return True
        self.misses += 1
        return False

    def learn(self, pending: Pending) -> None:
        """The batch that carried ``pending`` succeeded with no blacklisted request: each key is
        now recorded at its depth or shallower. Entries live ``window_s`` from now."""
        if not pending:
            return
        now_ms = int(self.clock() * 1000)
        deadline = (now_ms + int(self.window_s * 1000)) << 8
        young, old = self._young, self._old
        for key, depth in pending:
            known = young.get(key)
            if known is None:
                known = old.get(key)
            if known is not None and (known & 0xFF) < depth and (known >> 8) > now_ms:
                depth = known & 0xFF  # still live and shallower: keep the smaller depth
            young[key] = deadline | depth
            if len(young) >= self.half:
                self._old, self._young = young, {}
                young = self._young


def safe_window_s(settings: Mapping[str, Any]) -> float:
    """How long an entry may be trusted: ``FRONTIER_SEEN_CACHE_S``, at most half of the
    shortest life a dupefilter has after its last use (see the module docstring)."""
    floor = min(float(settings["DUPEFILTER_TIMEOUT"]), float(settings["CRAWL_STATE_TTL"]))
    return max(0.0, min(float(settings["FRONTIER_SEEN_CACHE_S"]), floor / 2))

