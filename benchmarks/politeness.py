"""Politeness: how much of each domain's limit the cluster uses, and that it never goes over.

Not run by CI. Usage::

    .venv/bin/python benchmarks/politeness.py [--domains 10,200] [--processes 1,2,4]
        [--modes moderated,burst] [--seconds 60] [--warmup 12] [--engines scrapy,fast]
        [--cpu-hog 0]

N loopback hosts (127.0.1.1 ...) are served by nginx (one worker, static pages, 20 same-host
links each) with an access log of arrival times: the site's own request log. Every host gets
its own limit from ``LIMITS`` (cycled), written as a domain throttle override; each
configuration runs moderated or burst (QUEUE_MODERATED) with 1, 2 or 4 ``scrapy-cluster
crawler`` processes sharing a fresh redis-server, with the Scrapy engine (``--spider link``)
or, with ``--engines``, the fast engine (``--spider link --engine fast``) too: each engine
runs the same configuration right after the other, on the same site and limits. One seed per host is fed with a depth far
beyond the pages a host can serve in the run, so every domain always has backlog. After a
warm-up of ``WARMUP_S`` the steady window of ``--seconds`` is judged, per domain, from the
site's log:

- utilisation = requests in the window / requests the limit allowed in it (median and the
  worst domain);
- achieved rate = the sum over domains of requests / time, each counted over the whole
  windows of its limit that fit in the judged window (so a burst at a window's edge does not
  skew it), against the sum of the limits (achieved / allowed);
- max-window ratio = most requests in any window of the throttle's length, over the whole run
  (warm-up included), divided by the limit: must never exceed 1.00;
- for moderated runs, the gap between consecutive requests of a domain relative to its
  interval window / hits (median and 1st percentile; a gap below 1.00 is allowed by the send
  allowance only if no window goes over), and the smallest gap of the whole run in ms (warm-up
  included) against its bound, interval - THROTTLE_SEND_ALLOWANCE_MS (must be >= 1.00).

``--cpu-hog N`` runs N busy processes for the whole run, competing with the crawlers for the
cores (the rule must hold under CPU load, judged on the wire).

Prints one table row per configuration (markdown) plus machine load; with more than one
engine, then a side-by-side table of the engines' achieved rate and utilisation per
configuration.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import redis
from crawl_support import cpu_s, free_port, machine_busy_s, stop_processes
from frontier_support import throwaway_redis

from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import GeneratedSite, SiteConfig
from scrapy_cluster.sitegen.throttle_measure import (
    Limit,
    gaps,
    max_in_window,
    percentile,
    utilisation,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for tests.support

from tests.support.nginx import NginxSite, find_nginx  # noqa: E402

PY = sys.executable
WARMUP_S = 12.0
ALLOWANCE_S = int(load_settings("crawler", environ={})["THROTTLE_SEND_ALLOWANCE_MS"]) / 1000
LIMITS = (Limit(10, 5.0), Limit(8, 4.0), Limit(12, 6.0), Limit(20, 10.0), Limit(6, 4.0))
"""Per-domain limits, cycled over the hosts (1.5 to 2 requests/s each)."""
SLOW_LIMITS = (Limit(5, 5.0), Limit(4, 4.0), Limit(6, 6.0), Limit(10, 10.0), Limit(6, 4.0))
"""For 100 domains and more (1 to 1.5 requests/s each), so the total fits two cores."""


ENGINE_ARGS = {"scrapy": ["--spider", "link"], "fast": ["--spider", "link", "--engine", "fast"]}


@dataclass(frozen=True)
class Config:
    domains: int
    processes: int
    moderated: bool
    engine: str = "scrapy"

    @property
    def scenario(self) -> str:
        mode = "moderated" if self.moderated else "burst"
        return f"{self.domains} domains, {self.processes} proc, {mode}"

    @property
    def name(self) -> str:
        return f"{self.scenario}, {self.engine} engine"


def hosts(count: int) -> tuple[str, ...]:
    return tuple(f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(count))


def limit_of(index: int, domains: int) -> Limit:
    table = SLOW_LIMITS if domains >= 100 else LIMITS
    return table[index % len(table)]


def crawler_env(redis_url: str, moderated: bool) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "BUS_BACKEND": "redis",
            "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "SCHEDULER_IP_ENABLED": "false",
            "PUBLIC_IP_URL": "", "QUEUE_WINDOW": "60", "QUEUE_HITS": "10",
            "QUEUE_MODERATED": "true" if moderated else "false", "SC_LOG_LEVEL": "WARNING",
            "LOG_LEVEL": "WARNING", "REDIS_STREAM_MAXLEN": "20000"}


def start_crawlers(count: int, env: dict[str, str], workdir: Path, client: redis.Redis,
                   engine: str = "scrapy") -> list[subprocess.Popen[bytes]]:
    processes = []
    for index in range(count):
        log = open(workdir / f"crawler-{engine}-{index}.log", "ab")  # noqa: SIM115
        processes.append(subprocess.Popen(
            [PY, "-m", "scrapy_cluster", "crawler", *ENGINE_ARGS[engine]], env=env, cwd=workdir,
            stdout=log, stderr=log, start_new_session=True))
    deadline = time.monotonic() + 60
    while len(list(client.scan_iter("stats:crawler:self:*"))) < count:
        if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
            stop_processes(processes)
            raise RuntimeError("crawlers did not start; see " + str(workdir))
        time.sleep(0.2)
    return processes


def stop_gracefully(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, 15)
    for process in processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            stop_processes([process])


def run_config(config: Config, site: NginxSite, workdir: Path, seconds: float,
               warmup_s: float = WARMUP_S) -> dict[str, object]:
    names = hosts(config.domains)
    with throwaway_redis() as redis_url:
        client = redis.Redis.from_url(redis_url)
        settings = load_settings("crawler", environ={}, overrides={"REDIS_URL": redis_url})
        frontier = Frontier.from_settings(settings, client)
        domain_config = DomainConfig(client, frontier)
        for index, host in enumerate(names):
            limit = limit_of(index, config.domains)
            domain_config.set_throttle(host, DomainThrottle(window_s=limit.window_s,
                                                            hits=limit.hits))
        processes = start_crawlers(config.processes, crawler_env(redis_url, config.moderated),
                                   workdir, client, config.engine)
        try:
            crawlid = uuid.uuid4().hex
            seeds = [{"url": site.site.url(host, "/p/0.html"), "appid": "bench",
                      "crawlid": crawlid, "spiderid": "link", "maxdepth": 1000}
                     for host in names]
            started_epoch = time.time()
            frontier.enqueue_many(seeds, dedupe=True)
            pids = [p.pid for p in processes]
            time.sleep(warmup_s)
            window_start = time.time()
            cpu_start, busy_start = cpu_s(pids), machine_busy_s()
            time.sleep(seconds)
            window_end = time.time()
            cpu_used, busy = cpu_s(pids) - cpu_start, machine_busy_s() - busy_start
            time.sleep(1.5)  # nginx flushes its log at least once a second
            arrivals = {host: [t for t in times if t >= started_epoch]
                        for host, times in site.arrivals().items()}
        finally:
            stop_gracefully(processes)
            client.close()
    return judge(config, names, arrivals, window_start, window_end) | {
        "crawler_cpu_pct": cpu_used * 100 / seconds,
        "machine_busy_pct": busy * 100 / seconds / (os.cpu_count() or 1)}


def judge(config: Config, names: tuple[str, ...], arrivals: dict[str, list[float]],
          start: float, end: float) -> dict[str, object]:
    used, ratios, gap_ratios = [], [], []
    min_gaps: list[tuple[float, float]] = []  # (smallest gap, interval) per moderated domain
    for index, host in enumerate(names):
        limit = limit_of(index, config.domains)
        times = sorted(arrivals.get(host, []))
        used.append(utilisation(times, limit, start, end))
        ratios.append(max_in_window(times, limit.window_s) / limit.hits)
        if config.moderated:
            interval = limit.window_s / limit.hits
            gap_ratios += [g / interval for g in gaps([t for t in times if start <= t < end])]
            min_gaps.append((min(gaps(times), default=interval), interval))
    allowed = sum(limit_of(i, config.domains).per_s for i in range(config.domains))
    achieved = 0.0  # per domain over whole windows of its limit, so bursts do not skew it
    for index, host in enumerate(names):
        window_s = limit_of(index, config.domains).window_s
        span = max(1, int((end - start) // window_s)) * window_s
        achieved += sum(1 for t in arrivals.get(host, []) if start <= t < start + span) / span
    return {"config": config.name, "allowed_per_s": allowed, "achieved_per_s": achieved,
            "achieved_ratio": achieved / allowed,
            "median_util": statistics.median(used), "worst_util": min(used),
            "max_window_ratio": max(ratios),
            "gap_median": statistics.median(gap_ratios) if gap_ratios else None,
            "gap_p1": percentile(gap_ratios, 0.01) if gap_ratios else None,
            "gap_min_ms": min(g for g, _ in min_gaps) * 1000 if min_gaps else None,
            "gap_min_vs_bound": min(g / (i - ALLOWANCE_S) for g, i in min_gaps)
            if min_gaps else None}


def row(result: dict[str, object]) -> str:
    def fmt(value: object) -> str:
        return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    keys = ("config", "allowed_per_s", "achieved_per_s", "achieved_ratio", "median_util",
            "worst_util", "max_window_ratio", "gap_median", "gap_p1", "gap_min_ms",
            "gap_min_vs_bound", "crawler_cpu_pct",
            "machine_busy_pct")
    return "| " + " | ".join(fmt(result[key]) for key in keys) + " |"


def side_by_side(results: list[tuple[Config, dict[str, object]]], engines: list[str]) -> None:
    """Per configuration, each engine's achieved rate / allowed and utilisation (median, worst
    domain) and whether any window went over its limit."""
    by_scenario: dict[str, dict[str, dict[str, object]]] = {}
    for config, result in results:
        by_scenario.setdefault(config.scenario, {})[config.engine] = result
    print("\n| configuration | allowed req/s | " + " | ".join(
        f"{engine}: achieved req/s (/ allowed), utilisation median / worst, max window / limit"
        for engine in engines) + " |")
    print("|---|---|" + "---|" * len(engines))
    for scenario, per_engine in by_scenario.items():
        cells = []
        for engine in engines:
            r = per_engine.get(engine)
            cells.append("-" if r is None else
                         f"{r['achieved_per_s']:.1f} ({r['achieved_ratio']:.2f}), "
                         f"{r['median_util']:.2f} / {r['worst_util']:.2f}, "
                         f"{r['max_window_ratio']:.2f}")
        allowed = next(iter(per_engine.values()))["allowed_per_s"]
        print(f"| {scenario} | {allowed:.0f} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domains", default="10,200")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--modes", default="moderated,burst")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=WARMUP_S,
                        help="seconds from seeding to the judged window")
    parser.add_argument("--engines", default="scrapy",
                        help="crawler engines, each run on every configuration: 'scrapy', "
                             "'fast' or 'scrapy,fast' (side by side)")
    parser.add_argument("--cpu-hog", type=int, default=0,
                        help="busy processes competing for the cores during the whole run")
    args = parser.parse_args()
    engines = args.engines.split(",")
    if not set(engines) <= set(ENGINE_ARGS):
        parser.error(f"--engines: choose from {', '.join(ENGINE_ARGS)}")
    binary = find_nginx()
    if binary is None:
        raise SystemExit("nginx not found (apt-get install nginx-light)")
    domain_counts = [int(n) for n in args.domains.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="politeness-bench-"))
    pages = int(max(limit.per_s for limit in LIMITS) * (args.seconds + args.warmup + 10)) + 50
    site_config = SiteConfig(hosts=hosts(max(domain_counts)), pages_per_host=pages,
                             links_per_page=20, cross_host_every=1000, page_bytes=2000)
    site = NginxSite(GeneratedSite(site_config, free_port()), workdir / "nginx", binary=binary,
                     status_port=free_port(), access_log=workdir / "access.log").start()
    print("| configuration | allowed req/s | achieved req/s | achieved / allowed | "
          "utilisation median | worst domain | max window / limit | gap / interval median | "
          "gap p1 | smallest gap ms | smallest gap / (interval - allowance) | crawler CPU % | "
          "machine busy % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    results: list[tuple[Config, dict[str, object]]] = []
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.cpu_hog)]
    try:
        for domains in domain_counts:
            for mode in args.modes.split(","):
                for processes in (int(n) for n in args.processes.split(",")):
                    for engine in engines:
                        config = Config(domains, processes, mode == "moderated", engine)
                        result = run_config(config, site, workdir, args.seconds, args.warmup)
                        results.append((config, result))
                        print(row(result), flush=True)
        if len(engines) > 1:
            side_by_side(results, engines)
    finally:
        for hog in hogs:
            hog.kill()
        site.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
