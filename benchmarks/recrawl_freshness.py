"""Re-crawl freshness: adaptive vs fixed re-crawl intervals at one request budget, on a local
site whose pages change at their own Poisson rates.

The site (``tests/support/revisit_site.py``): ``--pages`` static pages (10,000) over
``--hosts`` loopback hosts (127.0.3.1 onwards), served by nginx with its validator defaults
(ETag, If-Modified-Since exact). Each page changes at a rate drawn log-uniform between once per
2 minutes and once per 2 hours, sped up ``--time-scale`` times (16: 2 min -> 7.5 s); the
mutator rewrites a page (content and mtime) at each change of its Poisson process and logs it:
that log is the ground truth. Every page is seeded (depth 0) into one crawl with ``recrawl``;
each variant runs ``--duration-s`` seconds on a fresh redis-server and nginx, with the same
change process (same ``--seed``).

Variants: (a) adaptive (``min`` 2 min, ``max`` 2 h, scaled; inc/dec defaults) with conditional
GET; (b) a fixed interval with conditional GET, the interval set so that (b) spends (a)'s
request budget; (c) the same fixed interval without validators (what re-submitting a crawl
does). The crawler has no switch to drop its validators, so (c) is SIMULATED from (b)'s log:
the same requests, every 304 counted as a 200 of the page's last full size.

Per variant: requests; mean staleness (per change: time until the next 200 of its page;
changes never caught count up to the end of the run, and are also reported apart); bytes sent
(nginx's $bytes_sent, headers included); the share of refetches of unchanged pages answered
304; the most requests in one throttle window on any host vs the limit; Redis memory per
scheduled URL (INFO used_memory delta over every page, and MEMORY USAGE of the crawl's due
keys over the URLs they hold, sampled once every page was fetched once); crawler CPU (psutil)
and Redis CPU (INFO used_cpu_sys + used_cpu_user) per fetch, before and after the point where
every page had been fetched once (first fetches vs refetches). Last, the theoretical floor:
with Poisson changes, the best schedule at one budget has a mean staleness of
(E[sqrt(rate)])^2 / E[rate] times the fixed interval's (from the drawn rates).

``--dry-run``: no crawler, no nginx, no Redis: the mutator runs for ``--duration-s`` over the
written site, and a synthetic fetch log in nginx's format (adaptive and fixed schedules played
over the change log, 304 when the page did not change since its last fetch) goes through the
same analysis. Not run by CI. Usage: ``.venv/bin/python benchmarks/recrawl_freshness.py``
(``--dry-run --pages 2000 --duration-s 20`` to try the analysis).
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.throttle_measure import max_in_window

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for tests.support

from tests.support.nginx import STATUS_HOST, find_nginx  # noqa: E402
from tests.support.revisit_site import (  # noqa: E402
    Change,
    LogRecord,
    Mutator,
    RevisitNginx,
    RevisitSite,
    RevisitSiteConfig,
    by_url,
    read_log,
    staleness,
)
from tests.support.services import RedisServer, free_port  # noqa: E402

FASTEST_CHANGE_S, SLOWEST_CHANGE_S = 120.0, 7200.0
"""Mean time between changes of the most and the least changing page (before scaling)."""
SPIDER, APPID = "link", "bench"
SEED_BATCH = 1000
MAX_CHANGES_PER_TICK = 100_000
HEARTBEAT_WAIT_S = 30.0


@dataclass(frozen=True)
class Page:
    host: str
    path: str
    rate_per_s: float
    """Changes per second of run time (the drawn rate times the time scale)."""


def draw_pages(site: RevisitSite, scale: float, rng: random.Random) -> list[Page]:
    low, high = 1 / SLOWEST_CHANGE_S, 1 / FASTEST_CHANGE_S
    return [Page(host, path, scale * math.exp(rng.uniform(math.log(low), math.log(high))))
            for host in site.config.hosts for path in site.graph_paths()]


def floor_ratio(rates: Sequence[float]) -> float:
    """(E[sqrt(rate)])^2 / E[rate]: the best schedule's mean staleness over a fixed interval's
    at the same budget (Poisson changes; intervals proportional to 1 / sqrt(rate))."""
    mean_root = sum(math.sqrt(rate) for rate in rates) / len(rates)
    return mean_root ** 2 / (sum(rates) / len(rates))


class ChangeClock:
    """Each page's Poisson change times in seconds from the start, one seeded stream (apart
    from the one that drew the rates: the same stream would tie each page's first change to
    its rate)."""

    def __init__(self, pages: Sequence[Page], seed: int) -> None:
        self.pages, self.rng = pages, random.Random(f"changes-{seed}")
        self.heap = [(self.rng.expovariate(page.rate_per_s), index)
                     for index, page in enumerate(pages)]
        heapq.heapify(self.heap)

    def due(self, elapsed_s: float) -> list[Page]:
        """The changes due by ``elapsed_s`` (a page may change more than once)."""
        found: list[Page] = []
        while self.heap and self.heap[0][0] <= elapsed_s and len(found) < MAX_CHANGES_PER_TICK:
            at_s, index = heapq.heappop(self.heap)
            found.append(self.pages[index])
            heapq.heappush(self.heap, (at_s + self.rng.expovariate(self.pages[index].rate_per_s),
                                       index))
        return found


def mutate_for(site: RevisitSite, pages: Sequence[Page], args: argparse.Namespace,
               change_log: Path, on_tick: Callable[[], None]) -> tuple[list[Change], float, float]:
    """Run the change process for ``duration_s``; ``on_tick`` about every second. Returns the
    changes and the start and end (epoch s)."""
    mutator, clock = Mutator(site, change_log), ChangeClock(pages, args.seed)
    start_s = time.time()
    end_s, next_tick_s = start_s + args.duration_s, start_s + 1.0
    while (now_s := time.time()) < end_s:
        for page in clock.due(now_s - start_s):
            mutator.change(page.host, page.path)
        if now_s >= next_tick_s:
            on_tick()
            next_tick_s = now_s + 1.0
        time.sleep(0.01)
    return mutator.changes, start_s, time.time()


@dataclass
class Marks:
    """CPU seconds (crawlers, Redis) at the start, once every page was fetched, at the end."""

    at_s: list[float] = field(default_factory=list)
    crawler_s: list[float] = field(default_factory=list)
    redis_s: list[float] = field(default_factory=list)
    memory: dict[str, float] = field(default_factory=dict)


@dataclass
class Run:
    records: list[LogRecord]
    changes: list[Change]
    start_s: float
    end_s: float
    marks: Marks | None = None


def analyse(run: Run, port: int, window_s: float, *, validators: bool = True) -> dict[str, Any]:
    """The table's row for one run (see module docstring); ``validators`` False: the same
    requests with every 304 answered in full (variant c)."""
    records = [r for r in run.records if r.uri != "/robots.txt" and r.host != STATUS_HOST
               and run.start_s <= r.arrived_s <= run.end_s]  # not the status page's reads
    fetches = by_url(records, port)
    stale = staleness(run.changes, fetches, run.end_s)
    changed_at: dict[str, list[float]] = {}
    for change in run.changes:
        changed_at.setdefault(change.url, []).append(change.at_s)
    unchanged = answered_304 = sent = 0
    for url, answers in fetches.items():
        times, full = changed_at.get(url, []), 0
        for before, record in zip([None, *answers], answers, strict=False):
            full = record.sent_bytes if record.status == 200 else full
            sent += record.sent_bytes if validators or record.status != 304 else full
            if before is not None and bisect.bisect_right(times, record.arrived_s) == \
                    bisect.bisect_right(times, before.arrived_s):
                unchanged += 1
                answered_304 += validators and record.status == 304
    hosts: dict[str, list[float]] = {}
    for record in records:
        hosts.setdefault(record.host, []).append(record.arrived_s)
    return {"requests": len(records), "pages": len(fetches), "stale_mean_s": stale.mean_s,
            "caught": len(stale.caught_s), "missed": len(stale.missed_s),
            "missed_mean_s": sum(stale.missed_s) / max(1, len(stale.missed_s)),
            "mbytes": sent / 1e6, "share_304": answered_304 / max(1, unchanged),
            "max_in_window": max((max_in_window(t, window_s) for t in hosts.values()), default=0),
            **(per_fetch(run, records) if run.marks else {})}


def per_fetch(run: Run, records: Sequence[LogRecord]) -> dict[str, Any]:
    """CPU ms per fetch before and after every page was fetched once, and memory per URL."""
    assert run.marks is not None
    marks, found = run.marks, dict(run.marks.memory)
    for phase in range(len(marks.at_s) - 1):
        low, high = marks.at_s[phase], marks.at_s[phase + 1]
        count = sum(1 for r in records if low <= r.arrived_s < high) or 1
        name = ("first", "again")[phase] if len(marks.at_s) == 3 else "all"
        found[f"crawler_ms_{name}"] = (marks.crawler_s[phase + 1] - marks.crawler_s[phase]) \
            * 1000 / count
        found[f"redis_ms_{name}"] = (marks.redis_s[phase + 1] - marks.redis_s[phase]) \
            * 1000 / count
    return found


# --- dry run: the schedules played over the change log ---------------------------------------

HEADER_BYTES_200, HEADER_BYTES_304 = 250, 180


@dataclass(frozen=True)
class Schedule:
    """Intervals in seconds: fixed (``adaptive`` None) or adaptive within [min, max]."""

    interval_s: float
    adaptive: tuple[float, float, float, float] | None = None
    """(min, max, inc, dec)."""

    def next_s(self, last_s: float, changed: bool) -> float:
        if self.adaptive is None:
            return self.interval_s
        low, high, inc, dec = self.adaptive
        return min(high, max(low, last_s * ((1 - dec) if changed else (1 + inc))))


def synthetic_log(log_path: Path, site: RevisitSite, run: Run, schedule: Schedule,
                  first_cycle_s: float) -> None:
    """One record per fetch in ``LOG_FIELDS`` format: every page first fetched within
    ``first_cycle_s``, then again on ``schedule``; 200 when it changed since its last fetch."""
    changed_at: dict[str, list[float]] = {}
    for change in run.changes:
        changed_at.setdefault(change.url, []).append(change.at_s)
    paths = [(host, path) for host in site.config.hosts for path in site.graph_paths()]
    lines: list[tuple[float, str]] = []
    for index, (host, page_path) in enumerate(paths):
        times = changed_at.get(site.url(host, page_path), [])
        at_s = run.start_s + first_cycle_s * index / len(paths)
        interval_s, seen, version = schedule.interval_s, -1, 0
        while at_s < run.end_s:
            version = bisect.bisect_right(times, at_s)
            changed = version != seen
            status, body = (200, site.config.page_bytes) if changed else (304, 0)
            sent = body + (HEADER_BYTES_200 if changed else HEADER_BYTES_304)
            validators = ("-", "-") if seen < 0 else (f'"v{seen}"', "Thu, 01 Jan 2026 00:00:00 GMT")
            lines.append((at_s, "\t".join((
                f"{at_s:.3f}", "0.000", host, str(status), str(body), page_path, *validators,
                f'"v{version}"', str(sent)))))
            interval_s = schedule.next_s(interval_s, changed) if seen >= 0 else interval_s
            seen = version
            at_s += interval_s
    log_path.write_text("".join(line + "\n" for _, line in sorted(lines)))


def dry_run(args: argparse.Namespace, workdir: Path) -> dict[str, dict[str, Any]]:
    site = RevisitSite(site_config(args), 8080)
    site.write_static(workdir / "www")
    pages = draw_pages(site, args.time_scale, random.Random(args.seed))
    changes, start_s, end_s = mutate_for(site, pages, args, workdir / "changes.log", lambda: None)
    run = Run([], changes, start_s, end_s)
    first_cycle_s = min(args.duration_s / 4, args.pages / (args.throttle_hits * args.hosts
                                                            / args.throttle_window_s))
    low, high = adaptive_bounds(args)
    results: dict[str, dict[str, Any]] = {}
    log_a = workdir / "access-a.log"
    synthetic_log(log_a, site, run, Schedule(low, (low, high, 0.4, 0.2)), first_cycle_s)
    run.records = read_log(log_a)
    results["a"] = analyse(run, site.port, args.throttle_window_s)
    interval_s = equal_budget_interval(results["a"]["requests"], args, first_cycle_s)
    log_b = workdir / "access-b.log"
    synthetic_log(log_b, site, run, Schedule(interval_s), first_cycle_s)
    run.records = read_log(log_b)
    results["b"] = {**analyse(run, site.port, args.throttle_window_s), "interval_s": interval_s}
    results["c"] = {**analyse(run, site.port, args.throttle_window_s, validators=False),
                    "interval_s": interval_s}
    results["floor"] = floor(pages, len(changes), args)
    return results


def floor(pages: Sequence[Page], changes: int, args: argparse.Namespace) -> dict[str, Any]:
    return {"ratio": floor_ratio([page.rate_per_s for page in pages]), "changes": changes,
            "expected": sum(page.rate_per_s for page in pages) * args.duration_s}


def adaptive_bounds(args: argparse.Namespace) -> tuple[int, int]:
    low = max(1, round(FASTEST_CHANGE_S / args.time_scale))
    return low, max(low, round(SLOWEST_CHANGE_S / args.time_scale))


def equal_budget_interval(requests: int, args: argparse.Namespace, first_cycle_s: float) -> int:
    """The fixed interval at which every page's refetches add up to (a)'s: each page is
    refetched about (duration - its first fetch) / interval times."""
    pages: int = args.pages
    duration_s: float = args.duration_s
    return max(1, round(pages * (duration_s - first_cycle_s / 2) / max(1, requests - pages)))


def site_config(args: argparse.Namespace) -> RevisitSiteConfig:
    hosts = tuple(f"127.0.3.{number}" for number in range(1, args.hosts + 1))
    return RevisitSiteConfig(hosts, pages_per_host=args.pages // args.hosts, links_per_page=3,
                             page_bytes=args.page_bytes)


# --- real runs: nginx, redis-server, crawlers ----------------------------------------------


def crawler_env(redis_url: str, args: argparse.Namespace) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "SC_SETTINGS"},
            "REDIS_URL": redis_url, "BUS_BACKEND": "redis", "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true",
            "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": "http://127.0.0.1:1/",
            "QUEUE_HITS": str(args.throttle_hits), "QUEUE_WINDOW": str(args.throttle_window_s),
            "CRAWLER_CONCURRENCY": str(args.concurrency), "SC_LOG_LEVEL": "WARNING",
            "REDIS_STREAM_MAXLEN": "2000", "STATS_CYCLE": "5"}


@contextmanager
def crawlers(workdir: Path, env: dict[str, str], args: argparse.Namespace,
             client: redis.Redis) -> Iterator[list[psutil.Process]]:
    """``args.crawlers`` crawler processes (own sessions), up once each sent a heartbeat;
    stopped with SIGTERM, then SIGKILL, whatever happens."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for number in range(args.crawlers):
            with open(workdir / f"crawler-{number}.log", "ab") as log:
                started.append(subprocess.Popen(
                    [sys.executable, "-m", "scrapy_cluster", "crawler", "--engine", args.engine,
                     "--spider", SPIDER], env=env, cwd=workdir, stdout=log, stderr=log,
                    start_new_session=True))
        deadline = time.monotonic() + HEARTBEAT_WAIT_S
        while len(list(client.scan_iter("stats:crawler:self:*", count=1000))) < args.crawlers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                raise SystemExit(f"crawlers not up; see {workdir}/crawler-*.log")
            time.sleep(0.2)
        yield [psutil.Process(process.pid) for process in started]
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in started:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def crawler_cpu_s(processes: Sequence[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def redis_cpu_s(client: redis.Redis) -> float:
    info: Any = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def due_memory(client: redis.Redis, crawlid: str, sample: int) -> tuple[int, int]:
    """MEMORY USAGE of the crawl's re-crawl keys (``sample`` due buckets measured, the rest
    counted at their mean) and the URLs the buckets hold."""
    index = keys.crawl_due_index(SPIDER, crawlid)
    buckets = [member.decode() for member in client.zrange(index, 0, -1)]  # type: ignore[union-attr]
    fixed = [index, keys.crawl_revisit_tails(SPIDER, crawlid), keys.recrawl_due_crawls(SPIDER)]
    used = sum(int(client.memory_usage(key) or 0) for key in fixed)
    measured = buckets[:: max(1, len(buckets) // sample)][:sample]
    pipe = client.pipeline(transaction=False)
    for bucket in buckets:
        pipe.llen(keys.crawl_due_bucket(SPIDER, crawlid, bucket))
    urls = sum(int(length) for length in pipe.execute())
    bucket_bytes = [int(client.memory_usage(keys.crawl_due_bucket(SPIDER, crawlid, bucket)) or 0)
                    for bucket in measured]
    if bucket_bytes:
        used += round(sum(bucket_bytes) / len(bucket_bytes) * len(buckets))
    return used, urls


def seed(client: redis.Redis, redis_url: str, site: RevisitSite, crawlid: str,
         recrawl: dict[str, Any]) -> None:
    settings = load_settings("crawler", environ={}, overrides={"REDIS_URL": redis_url})
    frontier = Frontier.from_settings(settings, client)
    requests = [{"url": site.url(host, path), "appid": APPID, "crawlid": crawlid,
                 "spiderid": SPIDER, "maxdepth": 0, "recrawl": recrawl}
                for host in site.config.hosts for path in site.graph_paths()]
    for start in range(0, len(requests), SEED_BATCH):
        frontier.enqueue_many(requests[start:start + SEED_BATCH], dedupe=True)


def crawl_run(args: argparse.Namespace, workdir: Path, recrawl: dict[str, Any]) -> tuple[Run, int]:
    """One variant on a fresh redis-server and nginx; the run and the site's port."""
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o755)
    binary = find_nginx()
    if binary is None:
        raise SystemExit("needs nginx (apt-get install nginx-light); or try --dry-run")
    site = RevisitSite(site_config(args), free_port(site_config(args).hosts[0]))
    pages = draw_pages(site, args.time_scale, random.Random(args.seed))
    with ExitStack() as stack:
        server = RedisServer(workdir / "redis")
        server.start()
        stack.callback(server.stop)
        nginx = RevisitNginx(site, workdir / "nginx", binary=binary, status_port=free_port(),
                             workers=2, access_log=workdir / "access.log")
        stack.enter_context(nginx)
        client = redis.Redis.from_url(server.url)
        stack.callback(client.close)
        memory_before = int(client.info("memory")["used_memory"])
        processes = stack.enter_context(crawlers(workdir, crawler_env(server.url, args), args,
                                                 client))
        marks, crawlid = Marks(), uuid.uuid4().hex
        mark(marks, processes, client)
        seed(client, server.url, site, crawlid,
             {**recrawl, "until": int(time.time() + args.duration_s)})

        def on_tick() -> None:
            if len(marks.at_s) == 1 and nginx.hits() >= len(pages) + len(site.config.hosts):
                mark(marks, processes, client)
                used, urls = due_memory(client, crawlid, args.memory_samples)
                marks.memory = {
                    "info_bytes_url": (int(client.info("memory")["used_memory"])
                                       - memory_before) / len(pages),
                    "due_bytes_url": used / max(1, urls), "due_urls": urls}

        changes, start_s, end_s = mutate_for(site, pages, args, workdir / "changes.log", on_tick)
        mark(marks, processes, client)
    return Run(read_log(workdir / "access.log"), changes, start_s, end_s, marks), site.port


def mark(marks: Marks, processes: Sequence[psutil.Process], client: redis.Redis) -> None:
    marks.at_s.append(time.time())
    marks.crawler_s.append(crawler_cpu_s(processes))
    marks.redis_s.append(redis_cpu_s(client))


def real_runs(args: argparse.Namespace, workdir: Path) -> dict[str, dict[str, Any]]:
    low, high = adaptive_bounds(args)
    results: dict[str, dict[str, Any]] = {}
    run_a, port = crawl_run(args, workdir / "a", {"adaptive": {"min": low, "max": high}})
    results["a"] = analyse(run_a, port, args.throttle_window_s)
    first = [min(r.arrived_s for r in records) - run_a.start_s
             for records in by_url([r for r in run_a.records if r.host != STATUS_HOST],
                                   port).values()]
    first_cycle_s = 2 * sum(first) / max(1, len(first))
    interval_s = equal_budget_interval(results["a"]["requests"], args, first_cycle_s)
    run_b, port = crawl_run(args, workdir / "b", {"interval": interval_s})
    results["b"] = {**analyse(run_b, port, args.throttle_window_s), "interval_s": interval_s}
    results["c"] = {**analyse(run_b, port, args.throttle_window_s, validators=False),
                    "interval_s": interval_s}
    rates = draw_pages(RevisitSite(site_config(args), port), args.time_scale,
                       random.Random(args.seed))
    target_s = estimate_target(results["a"]["requests"], rates, args, low, high)
    run_e, port = crawl_run(args, workdir / "e", {
        "interval": target_s, "adaptive": {"min": low, "max": high, "estimate": True}})
    results["e"] = {**analyse(run_e, port, args.throttle_window_s), "target_s": target_s}
    for letter in ("a", "e"):
        row = results[letter]
        # a fixed interval's mean staleness is proportional to the interval, so to 1 / its
        # refetches: (b) scaled to this variant's refetches is the fixed schedule at its budget
        fixed_s = results["b"]["stale_mean_s"] * (results["b"]["requests"] - args.pages) \
            / max(1, row["requests"] - args.pages)
        row["vs_fixed"] = row["stale_mean_s"] / fixed_s if fixed_s else float("nan")
    results["floor"] = floor(rates, len(run_b.changes), args)
    return results


def estimate_target(requests: int, pages: Sequence[Page], args: argparse.Namespace,
                    low: int, high: int) -> int:
    """The ``interval`` (target) of the estimating variant that spends (a)'s refetch budget if
    its estimates were exact: intervals clamp(sqrt(target / rate), low, high), refetches per
    page duration / interval (a benchmark device to compare at one budget: the crawler never
    sees the rates)."""
    budget = max(1, requests - args.pages)

    def refetches(target: float) -> float:
        return sum(args.duration_s / min(high, max(low, math.sqrt(target / page.rate_per_s)))
                   for page in pages)

    lo_t, hi_t = 1e-3, 1e9
    for _ in range(100):
        mid = math.sqrt(lo_t * hi_t)
        lo_t, hi_t = (mid, hi_t) if refetches(mid) > budget else (lo_t, mid)
    return max(1, round(math.sqrt(lo_t * hi_t)))


# --- report ---------------------------------------------------------------------------------

LABELS = {"a": "(a) adaptive (x1.4 / x0.8), conditional GET",
          "b": "(b) fixed {interval_s} s, conditional GET",
          "c": "(c) fixed {interval_s} s, no validators (simulated from b)",
          "e": "(e) adaptive with the change-rate estimate (target {target_s} s), conditional GET"}


def _cell(row: dict[str, Any], name: str, pattern: str) -> str:
    return pattern.format(row[name]) if name in row else "n/a"


def table(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    limit = f"{args.throttle_hits}/{args.throttle_window_s:g} s"
    lines = ["| variant | requests | mean staleness s | never caught (mean s) | MB sent | "
             "304 share of unchanged refetches | max per window (limit " + limit + ") | "
             "Redis B/URL (INFO; due keys) | crawler CPU ms/fetch (first; again) | "
             "Redis CPU ms/fetch (first; again) | staleness vs fixed at its budget |",
             "|" + "---|" * 11]
    for letter in [name for name in ("a", "b", "c", "e") if name in results]:
        row = results[letter]
        lines.append(" | ".join((
            "| " + LABELS[letter].format(**row), str(row["requests"]),
            f"{row['stale_mean_s']:.1f}", f"{row['missed']} ({row['missed_mean_s']:.1f})",
            f"{row['mbytes']:.1f}", f"{row['share_304']:.1%}", str(row["max_in_window"]),
            _cell(row, "info_bytes_url", "{:.0f}") + "; " + _cell(row, "due_bytes_url", "{:.0f}"),
            _cell(row, "crawler_ms_first", "{:.2f}") + "; " + _cell(row, "crawler_ms_again", "{:.2f}"),
            _cell(row, "redis_ms_first", "{:.3f}") + "; " + _cell(row, "redis_ms_again", "{:.3f}"),
            _cell(row, "vs_fixed", "{:.2f}"))) + " |")
    floor = results["floor"]
    lines.append("")
    lines.append(f"Theoretical floor: the best schedule at one budget has (E[sqrt(rate)])^2 / "
                 f"E[rate] = {floor['ratio']:.3f} times the fixed interval's mean staleness: "
                 f"{floor['ratio'] * results['b']['stale_mean_s']:.1f} s at (b)'s budget "
                 f"(changes in the run: {floor['changes']}, expected from the rates: "
                 f"{floor['expected']:.0f}).")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--hosts", type=int, default=30, help="loopback hosts (20-50 sensible)")
    parser.add_argument("--time-scale", type=float, default=16.0,
                        help="speed-up of the change rates (16: 2 min -> 7.5 s)")
    parser.add_argument("--duration-s", type=float, default=360.0, help="run time per variant")
    parser.add_argument("--page-bytes", type=int, default=4000)
    parser.add_argument("--throttle-hits", type=int, default=20)
    parser.add_argument("--throttle-window-s", type=int, default=1)
    parser.add_argument("--engine", choices=("fast", "scrapy"), default="fast")
    parser.add_argument("--crawlers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--memory-samples", type=int, default=200,
                        help="due buckets measured with MEMORY USAGE")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--dry-run", action="store_true",
                        help="mutator + analysis on a synthetic fetch log (no crawler)")
    args = parser.parse_args(argv)
    if not 1 <= args.hosts <= 254 or args.pages < args.hosts:
        parser.error("--hosts must be 1-254 and at most --pages")
    args.pages = args.pages // args.hosts * args.hosts
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="recrawl-freshness-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanups
    results = dry_run(args, workdir) if args.dry_run else real_runs(args, workdir)
    print(f"{args.pages} pages over {args.hosts} hosts, time scale {args.time_scale:g}, "
          f"{args.duration_s:g} s per variant, engine {args.engine}"
          + (" (DRY RUN: synthetic fetch log, no crawler)" if args.dry_run else "")
          + f"; work dir {workdir}")
    print(table(results, args))


if __name__ == "__main__":
    main()
