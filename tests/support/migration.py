"""Building a Redis the way the original Scrapy Cluster 1.2/1.3 wrote it (seed docs 000/001),
and running ``scrapy-cluster migrate`` on it."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from click.testing import CliRunner, Result

from scrapy_cluster.cli import main
from scrapy_cluster.migration.legacy import legacy_fingerprint
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer

ORIGINAL_DUPEFILTER_TTL_S = 600
UJSON_DOUBLE_PRECISION = 10
"""ujson 1.35 (the version both original components pinned) writes 10 decimals at most."""
UJSON_EXPONENT_ABOVE = 1e16 - 1
UJSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                 "\r": "\\r", "\t": "\\t"}


def ujson_dumps(value: Any) -> str:
    """``ujson.dumps(value)`` of ujson 1.35 with its defaults, byte for byte: no spaces, '/'
    escaped as '\\/', everything outside ASCII as ``\\uXXXX`` (surrogate pairs above U+FFFF),
    floats with ujson's own rounding to 10 decimals (``ujson_double``)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ujson_double(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str):
        return '"' + "".join(_ujson_char(char) for char in value) + '"'
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{ujson_dumps(str(k) if not isinstance(k, bytes) else k)}:"
                              f"{ujson_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(ujson_dumps(item) for item in value) + "]"
    raise TypeError(f"ujson cannot encode {type(value).__name__}")


def _ujson_char(char: str) -> str:
    if char in UJSON_ESCAPES:
        return UJSON_ESCAPES[char]
    code = ord(char)
    if code < 0x20 or 0x7F < code <= 0xFFFF:
        return f"\\u{code:04x}"
    if code > 0xFFFF:
        high, low = divmod(code - 0x10000, 0x400)
        return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"
    return char


def ujson_double(value: float) -> str:
    """ujson 1.35's double: the whole part, then the fraction scaled by 10**10 and rounded its
    way (half to odd, and half up from 0), trailing zeros trimmed; ``%.15e`` above 1e16 - 1."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError("ujson refuses NaN and Inf")
    negative, value = value < 0, abs(value)
    scale = float(10 ** UJSON_DOUBLE_PRECISION)
    whole = int(value)
    scaled = (value - whole) * scale
    fraction = int(scaled)
    rest = scaled - fraction
    if rest > 0.5:
        fraction += 1
        if fraction >= scale:
            fraction, whole = 0, whole + 1
    elif rest == 0.5 and (fraction == 0 or fraction & 1):
        fraction += 1
    if value > UJSON_EXPONENT_ABOVE:
        return "%.15e" % (-value if negative else value)
    decimals = str(fraction).rjust(UJSON_DOUBLE_PRECISION, "0").rstrip("0") if fraction else "0"
    return ("-" if negative else "") + f"{whole}.{decimals}"


SCHEMA_DEFAULTS_1_2: tuple[tuple[str, Any], ...] = (
    ("spiderid", "link"), ("priority", 1), ("maxdepth", 0), ("allowed_domains", None),
    ("allow_regex", None), ("deny_regex", None), ("deny_extensions", None), ("expires", 0),
    ("useragent", None), ("cookie", None), ("attrs", None))
"""The original crawl schema's defaults, in its property order (1.3 adds ``domain_max_pages``)."""
SCHEMA_DEFAULTS = {
    "1.2": SCHEMA_DEFAULTS_1_2,
    "1.3": (*SCHEMA_DEFAULTS_1_2[:3], ("domain_max_pages", None), *SCHEMA_DEFAULTS_1_2[3:]),
}
DOWNLOAD_TIMEOUT_S = 10
"""DOWNLOAD_TIMEOUT of the original crawler settings."""
REDIRECT_MAX_TIMES = 20
SCRAPY_USER_AGENT = "Scrapy/1.5.0 (+https://scrapy.org)"
PASSTHROUGH_SKIPS = {"1.2": frozenset(), "1.3": frozenset({"_splash_processed", "_replaced_args",
                                                          "url"})}
"""Meta keys the original's MetaPassthroughMiddleware does not copy to a page's links."""


def kafka_monitor_seed(message: Mapping[str, Any], *, ts: float | None = None,
                       version: str = "1.2") -> dict[str, Any]:
    """What the original Kafka Monitor queued for the crawl request ``message``: the message as
    parsed (its key order), the crawl schema's defaults for the fields it left out (set while
    validating, in the schema's property order), then ``ts``, set by the plugin-stats hook
    before the scraper handler ran (stats enabled or not)."""
    seed = dict(message)
    for name, default in SCHEMA_DEFAULTS[version]:
        seed.setdefault(name, default)
    seed["ts"] = time.time() if ts is None else ts
    return seed


def api_request(url: str, crawlid: str, priority: int, *, appid: str = "app",
                spiderid: str = "link", **fields: Any) -> dict[str, Any]:
    """A seed as the original Kafka Monitor queued it (``kafka_monitor_seed``)."""
    return kafka_monitor_seed({"url": url, "appid": appid, "crawlid": crawlid,
                               "spiderid": spiderid, "priority": priority, **fields})


def popped_meta(member: Mapping[str, Any]) -> dict[str, Any]:
    """``request.meta`` of a member an original crawler popped: a request dict's meta, or a
    seed's fields with ``curdepth`` and ``retry_times`` added when missing."""
    if "meta" in member:
        return dict(member["meta"])
    return {**member, "curdepth": member.get("curdepth", 0),
            "retry_times": member.get("retry_times", 0)}


def fetched_meta(meta: Mapping[str, Any], host: str, latency_s: float | None) -> dict[str, Any]:
    """That meta after Scrapy fetched the request: ``download_timeout`` (set by its middleware
    unless present), ``download_slot`` (the host), ``download_latency`` when a response came."""
    fetched = {**meta, "download_timeout": meta.get("download_timeout", DOWNLOAD_TIMEOUT_S),
               "download_slot": host}
    if latency_s is not None:
        fetched["download_latency"] = latency_s
    return fetched


def downloader_headers(headers: Mapping[str, list[str]], useragent: str | None) -> dict[str, Any]:
    """A request's headers after the scheduler (``useragent``) and Scrapy 1.5's downloader
    middlewares (default headers, user agent, compression) set theirs where absent."""
    sent: dict[str, Any] = dict(headers)
    if useragent is not None:
        sent["User-Agent"] = [useragent]
    for name, value in (("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,"
                                   "*/*;q=0.8"), ("Accept-Language", "en"),
                        ("User-Agent", SCRAPY_USER_AGENT), ("Accept-Encoding", "gzip,deflate")):
        sent.setdefault(name, [value])
    return sent


def request_dict(url: str, meta: dict[str, Any], *, headers: dict[str, Any],
                 callback: str | None = "parse", priority: int = 0,
                 dont_filter: bool = False) -> dict[str, Any]:
    """Scrapy 1.5's ``request_to_dict`` of a plain GET ``Request``."""
    return {"url": url, "callback": callback, "errback": None, "method": "GET",
            "headers": headers, "body": "", "cookies": {}, "meta": meta, "_encoding": "utf-8",
            "priority": priority, "dont_filter": dont_filter, "flags": []}


def crawler_link(page_url: str, page_meta: Mapping[str, Any], url: str, *,
                 version: str = "1.3") -> dict[str, Any]:
    """A link of a fetched page as the original crawler queued it: the link spider sets meta
    ``priority`` - 10 and ``curdepth`` + 1 (and User-Agent), the passthrough copies the page's
    other meta keys, Scrapy's RefererMiddleware adds Referer."""
    meta = {"priority": page_meta["priority"] - 10, "curdepth": page_meta["curdepth"] + 1}
    skips = PASSTHROUGH_SKIPS[version]
    meta.update((k, v) for k, v in page_meta.items() if k not in meta and k not in skips)
    headers = {"User-Agent": [page_meta["useragent"]]} if page_meta.get("useragent") else {}
    return request_dict(url, meta, headers={**headers, "Referer": [page_url]})


def crawler_retry(member: Mapping[str, Any], host: str) -> dict[str, Any]:
    """``member`` popped, timed out and queued again by the original's RedisRetryMiddleware:
    ``retry_times`` + 1, meta ``priority`` - 10, ``dont_filter``."""
    meta = fetched_meta(popped_meta(member), host, None)
    meta.update(retry_times=meta["retry_times"] + 1, priority=meta["priority"] - 10)
    return request_dict(member["url"], meta, headers=downloader_headers(
        member.get("headers", {}), meta.get("useragent")), callback=member.get("callback"),
        priority=member.get("priority", 0) if "meta" in member else 0, dont_filter=True)


def crawler_redirect(member: Mapping[str, Any], host: str, location: str,
                     latency_s: float) -> dict[str, Any]:
    """``member`` popped, answered 301 and followed by Scrapy 1.5's RedirectMiddleware: the
    meta copied plus ``redirect_times``/``redirect_ttl``/``redirect_urls``, priority + 2."""
    meta = fetched_meta(popped_meta(member), host, latency_s)
    meta.update(redirect_times=meta.get("redirect_times", 0) + 1,
                redirect_ttl=meta.get("redirect_ttl", REDIRECT_MAX_TIMES) - 1,
                redirect_urls=[*meta.get("redirect_urls", []), member["url"]])
    seed = "meta" not in member
    return request_dict(location, meta, headers=downloader_headers(
        member.get("headers", {}), meta.get("useragent")),
        callback=None if seed else member["callback"],
        priority=(0 if seed else member["priority"]) + 2,
        dont_filter=False if seed else member["dont_filter"])


def link_request(url: str, crawlid: str, priority: int, *, appid: str = "app",
                 spiderid: str = "link", curdepth: int = 1, maxdepth: int = 1,
                 dont_filter: bool = False) -> dict[str, Any]:
    """A link at ``curdepth`` as an original crawler queued it, with meta ``priority``
    ``priority`` (its page's seed had ``priority`` + 10 * ``curdepth``)."""
    page = api_request(f"{url}#page", crawlid, priority + 10, appid=appid, spiderid=spiderid,
                       maxdepth=maxdepth)
    meta = fetched_meta(popped_meta(page), "example.com", 0.0731204509735)
    meta["curdepth"] = curdepth - 1
    return {**crawler_link(page["url"], meta, url), "dont_filter": dont_filter}


def member(request: Mapping[str, Any]) -> bytes:
    """The queue member the original wrote for ``request`` (ujson 1.35)."""
    return ujson_dumps(request).encode()


def score(request: Mapping[str, Any]) -> int:
    """Its score: minus the meta priority of a request dict, minus the priority of a seed."""
    return -int(request["meta"]["priority"] if "meta" in request else request["priority"])


class OriginalRedis:
    """Writes keys exactly as the original components did."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def queue(self, spiderid: str, domain: str, *requests: dict[str, Any]) -> str:
        """``<spiderid>:<domain>:queue``: ZSET of JSON requests scored -priority."""
        key = f"{spiderid}:{domain}:queue"
        self.client.zadd(key, {member(r): score(r) for r in requests})
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


CRAWL_TIMEOUT_S = 60.0
QUIET_S = 1.5


class LoggingSite(SiteServer):
    """The test site, also keeping every page requested (robots.txt left out), in order."""

    def __init__(self, config: SiteConfig, port: int) -> None:
        super().__init__(config, port)
        self.requested: list[str] = []

    def record(self, host: str, path: str) -> None:
        super().record(host, path)
        if path != "/robots.txt":
            with self._lock:
                self.requested.append(self.site.url(host, path))


def crawl_until_quiet(site: LoggingSite, expected: set[str]) -> None:
    """Wait until every ``expected`` page was requested and the site has been quiet QUIET_S."""
    deadline, quiet_since, last = time.monotonic() + CRAWL_TIMEOUT_S, time.monotonic(), 0
    while time.monotonic() < deadline:
        count = len(site.requested)
        if count != last:
            last, quiet_since = count, time.monotonic()
        if expected <= set(site.requested) and time.monotonic() - quiet_since >= QUIET_S:
            return
        time.sleep(0.1)
    raise AssertionError(f"not fetched within {CRAWL_TIMEOUT_S} s: "
                         f"{sorted(expected - set(site.requested))}")
