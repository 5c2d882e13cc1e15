"""Crawl throughput: scrapy-cluster crawler (Scrapy and fast engines) vs plain Scrapy vs
scrapy-redis vs a bare asyncio loop, on generated sites of two shapes.

Shapes (``--shapes``, both by default; every variant runs on each, one shape's variants side
by side): ``absolute`` is ``sitegen.site``'s graph (absolute links, a finite page space, so a
steady window mostly meets links already seen); ``relative`` is ``sitegen.relative_site``
(root-relative and relative hrefs, ``..``, query strings, fragments, the same navigation on
every page, and no end of new pages: over half of a page's links are new). Each variant
reports pages/s twice: ``steady``, over the window after the warm-up, and ``from the start``,
from the crawl's start (the seed enqueued; for plain Scrapy, scrapy-redis and the bare loop,
the first request the site sees) to the end of the window, ramp-up included. For "N pages from
one seed, ramp-up included", use ``--warmup 0 --pages N`` and read ``from the start``.

Not run by CI. Usage: ``.venv/bin/python benchmarks/crawl_throughput.py [--pages 1500]``.
Starts a private redis-server and the generated site (``scrapy_cluster.sitegen.site``: 7 KB
pages with 20 links on 127.0.0.2 and 127.0.0.3), served as static files by nginx
(``tests/support/nginx.py``, one worker) or, without nginx or with ``--python-site``,
by the Python server. For each variant, over the same steady window of pages served (after a
warm-up): pages/s (the site's own request counter), crawler CPU ms per page (/proc
utime+stime), Redis commands per page as the server counts them (INFO
total_commands_processed: commands sent by clients plus every command a Lua script runs) and
script calls per page; then, over a further window with MONITOR attached (it slows Redis, so
it is not timed), the commands clients send per page and the commands run inside scripts per
page. Last, the median enqueue-to-fetch latency on an idle cluster. Every variant: same spider
logic (follow links, one item per page), CONCURRENT_REQUESTS 16, 16 per domain, robots.txt
obeyed, throttle off; (b) and (c) also with the cluster crawler's per-page Scrapy settings
(CLUSTER_SCRAPY), (b0) with Scrapy's defaults. (e) and (f) are the cluster crawler's fast engine
(``crawler --spider link --engine fast``, asyncio + aiohttp) with (a)'s environment, 1 and 2
processes; (g) is the ceiling: a bare asyncio + aiohttp fetch-and-extract loop (lxml links as
``links.links_in_tree`` reads them, an in-memory set for dedupe; no Redis, no bus, no robots.txt,
no items; ``crawl_support.py bare-loop``). The bus is Redis Streams in every cluster variant
unless ``--bus`` says otherwise. Redis CPU per page: redis-server utime+stime (/proc/<pid>/stat)
over the same window, for the variants that use Redis. ``--profile-pages N`` then runs one fast
engine under cProfile for N pages and prints where its time goes (per page).
Variants: ``--only a,b,b0,c,d,e,f,g``.

``--tls`` (same as ``--schemes http,https``) also runs every selected variant against the same
site over HTTPS (a second nginx, same pages with ``https://`` links, TLS 1.2/1.3, keep-alive
as the plain one, a self-signed ECDSA P-256 certificate made at run time in the work dir);
labels get `` tls``. Certificate verification is off for the benchmark: Scrapy's default
context factory (plain Scrapy and the Scrapy engine) does not verify; the bare loop uses
``ssl=False``; the fast engine is given ``CRAWLER_TLS_VERIFY=false`` (ignored until the
setting exists) and ``SSL_CERT_FILE=<the certificate>``, so while it still verifies it
trusts the site's certificate (the run says which applies). ``--schemes https`` runs HTTPS
only.

``--bus redis,kafka`` runs the cluster variants (a, d, e, f) once per bus: ``kafka`` on a
tansu broker started by the script (``tests/support/kafka_broker.py``, in memory), labels
get `` kafka``; its CPU per page is reported as the broker's. Redis CPU and commands per page
are printed for each, as for Redis Streams (with Kafka, Redis holds only the frontier).
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from crawl_support import (
    PY,
    Site,
    count_commands,
    cpu_s,
    free_port,
    measure,
    start_site,
    stop_processes,
    wait_for_hits,
)

HOSTS = ("127.0.0.2", "127.0.0.3")
COMMON = {"CONCURRENT_REQUESTS": "16", "CONCURRENT_REQUESTS_PER_DOMAIN": "16",
          "LOG_LEVEL": "WARNING", "ROBOTSTXT_OBEY": "True", "TELNETCONSOLE_ENABLED": "False"}
# The Scrapy settings of scrapy_cluster.crawler.settings that change per-page cost; (b) and (c)
# run with them too, (b0) with Scrapy's defaults.
CLUSTER_SCRAPY = {"CONCURRENT_ITEMS": "1", "DOWNLOADER_STATS": "False",
                  "COOKIES_ENABLED": "False"}

BENCH_SPIDER = '''
import scrapy
class Bench(scrapy.Spider):
    name = "bench"
    start_urls = [SEED]
    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
        yield {"url": response.url, "status": response.status, "body": response.text}
'''


FAST_TLS_VERIFY_SETTING = "CRAWLER_TLS_VERIFY"
"""The fast engine's switch for certificate verification, if src/ declares it (see
``tls_env``)."""
CLUSTER_LETTERS = ("a", "d", "e", "f")
"""Variants that run the cluster crawler, so use a bus (``--bus``)."""


def cluster_env(redis_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "BUS_BACKEND": "redis",
            "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "QUEUE_WINDOW": "0",
            "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": "http://127.0.0.1:1/",
            "CRAWLER_CONCURRENCY": COMMON["CONCURRENT_REQUESTS"],
            "CRAWLER_PER_DOMAIN_CONCURRENCY": COMMON["CONCURRENT_REQUESTS_PER_DOMAIN"],
            "SC_LOG_LEVEL": "WARNING", "REDIS_STREAM_MAXLEN": "2000", **(extra or {})}


def tls_env(site: Site) -> dict[str, str]:
    """For a crawler on the HTTPS site: verification off where the engine has a setting for it
    (the fast engine's ``CRAWLER_TLS_VERIFY``, once declared; unknown variables are ignored),
    and the site's self-signed certificate as the trusted CA file, so that an engine which
    still verifies (aiohttp's default context reads SSL_CERT_FILE) accepts the site."""
    if site.scheme != "https" or site.cert_file is None:
        return {}
    return {FAST_TLS_VERIFY_SETTING: "false", "SSL_CERT_FILE": str(site.cert_file)}


def fast_tls_mode() -> str:
    """What the fast engine does with the HTTPS site's certificate in this checkout."""
    from scrapy_cluster.settings import load_settings

    if FAST_TLS_VERIFY_SETTING in load_settings("crawler", environ={}):
        return (f"fast engine: certificate verification off ({FAST_TLS_VERIFY_SETTING}=false); "
                "Scrapy engine, plain Scrapy: off (Scrapy's default context factory); "
                "bare loop: off (ssl=False)")
    return (f"fast engine: NO setting to turn verification off ({FAST_TLS_VERIFY_SETTING} is not "
            "declared): it verifies, trusting the run's self-signed certificate through "
            "SSL_CERT_FILE (a chain and hostname check once per new connection); Scrapy engine, "
            "plain Scrapy: off (Scrapy's default context factory); bare loop: off (ssl=False)")


def bus_env(args: argparse.Namespace, bus: str) -> dict[str, str]:
    if bus == "kafka":
        return {"BUS_BACKEND": "kafka", "KAFKA_HOSTS": args.kafka_bootstrap}
    return {"BUS_BACKEND": "redis"}


ENGINE_ARGS = {"scrapy": [], "fast": ["--spider", "link", "--engine", "fast"]}
SUPPORT_SCRIPT = Path(__file__).with_name("crawl_support.py")


def start_crawlers(n: int, redis_url: str, workdir: Path, engine: str = "scrapy",
                   extra_env: dict[str, str] | None = None) -> list[subprocess.Popen[bytes]]:
    processes = []
    for i in range(n):
        log = open(workdir / f"crawler-{engine}-{i}.log", "ab")  # noqa: SIM115 - child's
        processes.append(subprocess.Popen(
            [PY, "-m", "scrapy_cluster", "crawler", *ENGINE_ARGS[engine]],
            env=cluster_env(redis_url, extra_env), cwd=workdir, stdout=log, stderr=log,
            start_new_session=True))
    time.sleep(4)
    return processes


def seed_crawl(client: redis.Redis, redis_url: str, site: Site) -> None:
    frontier_for(client, redis_url).enqueue_many(
        [{"url": site.seed(HOSTS[0]), "appid": "bench",
          "crawlid": uuid.uuid4().hex, "spiderid": "link", "maxdepth": 50}], dedupe=True)


def frontier_for(client: redis.Redis, redis_url: str) -> Any:
    from scrapy_cluster.frontier import Frontier
    from scrapy_cluster.settings import load_settings

    settings = load_settings("crawler", environ={}, overrides={"REDIS_URL": redis_url})
    return Frontier.from_settings(settings, client)


def run_cluster(n: int, site: Site, client: redis.Redis, redis_url: str,
                args: argparse.Namespace, workdir: Path, engine: str = "scrapy",
                bus: str = "redis") -> dict[str, Any]:
    client.flushdb()
    processes = start_crawlers(n, redis_url, workdir, engine,
                               {**bus_env(args, bus), **tls_env(site)})
    started = (time.monotonic(), site.hits())
    seed_crawl(client, redis_url, site)
    extra = {"bus_cpu_ms_page": [args.kafka_pid]} if bus == "kafka" else None
    return _measure_all(site, client, processes, args, extra_groups=extra, started=started)


def run_bare(site: Site, client: redis.Redis, redis_url: str, args: argparse.Namespace,
             workdir: Path) -> dict[str, Any]:
    """(g) the bare asyncio + aiohttp loop, bounded in pages and seconds."""
    max_pages = args.warmup + args.pages + 500
    log = open(workdir / "bare-loop.log", "wb")  # noqa: SIM115 - closed by the child's exit
    process = subprocess.Popen(
        [PY, str(SUPPORT_SCRIPT), "bare-loop", site.seed(HOSTS[0]),
         COMMON["CONCURRENT_REQUESTS"], str(max_pages), str(args.timeout)],
        cwd=workdir, stdout=log, stderr=log, start_new_session=True)
    return _measure_all(site, client, [process], args, monitor=False)


def _measure_all(site: Site, client: redis.Redis, processes: list[subprocess.Popen[bytes]],
                 args: argparse.Namespace, *, monitor: bool = True,
                 extra_groups: dict[str, list[int]] | None = None,
                 started: tuple[float, int] | None = None) -> dict[str, Any]:
    pids = [p.pid for p in processes]
    try:
        result: dict[str, Any] = measure(site, client, pids, redis_pid=args.redis_pid,
                                         warmup=args.warmup, pages=args.pages,
                                         timeout_s=args.timeout, extra_groups=extra_groups,
                                         started=started)
        if monitor:
            result.update(count_commands(site, client, pids, args.count_pages))
        return result
    finally:
        stop_processes(processes)


def run_scrapy(kind: str, site: Site, client: redis.Redis, redis_url: str,
               args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """(b) plain Scrapy, (b0) with Scrapy's defaults, (c) on scrapy-redis's scheduler and
    dupefilter."""
    client.flushdb()
    spider_file = workdir / "bench_spider.py"
    spider_file.write_text(BENCH_SPIDER.replace(
        "SEED", repr(site.seed(HOSTS[0]))))
    sets = dict(COMMON) if kind == "defaults" else {**COMMON, **CLUSTER_SCRAPY}
    if kind == "redis":
        sets.update(SCHEDULER="scrapy_redis.scheduler.Scheduler",
                    DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter",
                    REDIS_URL=redis_url)
    argv = [PY, "-m", "scrapy", "runspider", str(spider_file), "-o", os.devnull + ":jsonlines"]
    for key, value in sets.items():
        argv += ["-s", f"{key}={value}"]
    log = open(workdir / f"{kind}-{site.scheme}.log", "wb")  # noqa: SIM115 - child's
    process = subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=log, start_new_session=True)
    return _measure_all(site, client, [process], args)


def latency_ms(site: Site, client: redis.Redis, redis_url: str, workdir: Path,
               rounds: int) -> float:
    """Median time from enqueueing a crawl to the site serving its page, one idle crawler."""
    client.flushdb()
    processes = start_crawlers(1, redis_url, workdir, extra_env=tls_env(site))
    frontier = frontier_for(client, redis_url)
    samples = []
    try:
        for i in range(rounds):
            before = site.hits()
            started = time.monotonic()
            path = f"/t/latency-{i}/" if site.shape == "relative" else f"/p/{i}.html"
            frontier.enqueue_many([{"url": site.url(HOSTS[1], path),
                                    "appid": "lat", "crawlid": uuid.uuid4().hex,
                                    "spiderid": "link"}])
            while site.hits() == before:
                if time.monotonic() - started > 10:
                    raise RuntimeError(f"seed {i} not fetched within 10 s")
                time.sleep(0.001)
            samples.append((time.monotonic() - started) * 1000)
            time.sleep(0.3)
    finally:
        stop_processes(processes)
    return statistics.median(samples)


def report(name: str, result: dict[str, Any]) -> None:
    cores = " + ".join(f"{c:.2f}" for c in result["process_cores"])
    broker = (f"tansu {result['bus_cpu_ms_page'] * 1000:.0f} µs/page, "
              if "bus_cpu_ms_page" in result else "")
    print(f"{name:34} {result['pages_s']:7.1f} pages/s steady, "
          f"{result['pages_s_from_start']:7.1f} from the start;"
          f"  {result['cpu_ms_page']:6.2f} CPU ms/page"
          f" (cores used per process {cores}; Redis {result['redis_cpu_ms_page'] * 1000:.0f} "
          f"µs/page, {broker}site {result['site_cpu_ms_page']:.2f} ms/page, "
          f"machine {result['machine_busy_pct']:.0f} % busy)")
    if "client_cmds_page" not in result:
        print(f"{'':34} (no Redis: commands not counted)")
        return
    print(f"{'':34} Redis cmds/page: {result['client_cmds_page']:5.2f} sent by clients, "
          f"{result['lua_cmds_page']:5.2f} inside scripts, {result['server_cmds_page']:5.2f} "
          f"server total; {result['scripts_page']:4.2f} script calls/page")
    print(f"{'':34} client commands/page: {result['client_top']}")
    print(f"{'':34} Redis µs/page by command (INFO commandstats; a script's time includes the "
          f"commands it runs): {result['redis_usec_top']}")


def table(results: dict[str, dict[str, Any]], uses_redis: set[str]) -> None:
    """The side-by-side summary, as a Markdown table."""
    print("\n| variant | pages/s steady | pages/s from the start | crawler CPU ms/page | "
          "Redis CPU µs/page | Redis cmds/page (sent by clients / inside scripts / server "
          "total) | tansu CPU µs/page | site CPU ms/page | machine busy |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        redis_cpu = f"{r['redis_cpu_ms_page'] * 1000:.0f}" if name in uses_redis else "—"
        cmds = (f"{r['client_cmds_page']:.2f} / {r['lua_cmds_page']:.1f} / "
                f"{r['server_cmds_page']:.1f}" if name in uses_redis else "—")
        broker = f"{r['bus_cpu_ms_page'] * 1000:.0f}" if "bus_cpu_ms_page" in r else "—"
        print(f"| {name} | {r['pages_s']:.1f} | {r['pages_s_from_start']:.1f} | "
              f"{r['cpu_ms_page']:.2f} | {redis_cpu} | {cmds} "
              f"| {broker} | {r['site_cpu_ms_page']:.2f} | {r['machine_busy_pct']:.0f} % |")


def profile_fast(site: Site, client: redis.Redis, redis_url: str, workdir: Path,
                 pages: int, timeout_s: float) -> None:
    """One fast engine with cProfile on its main thread over ``pages`` pages after 200 of
    warm-up (``crawl_support.py profiled``: SIGUSR1 starts, SIGUSR2 writes the profile);
    prints its top costs per page. cProfile slows Python calls, so the pages/s here are not
    the engine's."""
    client.flushdb()
    path = workdir / "fast.prof"
    log = open(workdir / "crawler-fast-profiled.log", "wb")  # noqa: SIM115 - child's
    process = subprocess.Popen([PY, str(SUPPORT_SCRIPT), "profiled", str(path), "crawler",
                                *ENGINE_ARGS["fast"]], env=cluster_env(redis_url, tls_env(site)),
                               cwd=workdir,
                               stdout=log, stderr=log, start_new_session=True)
    pids = [process.pid]
    try:
        time.sleep(4)
        seed_crawl(client, redis_url, site)
        deadline = time.monotonic() + timeout_s
        wait_for_hits(site, site.hits() + 200, pids, deadline)
        os.kill(process.pid, signal.SIGUSR1)
        start, started, cpu_start = site.hits(), time.monotonic(), cpu_s(pids)
        wait_for_hits(site, start + pages, pids, deadline)
        os.kill(process.pid, signal.SIGUSR2)
        done, elapsed = site.hits() - start, time.monotonic() - started
        cpu_ms_page = (cpu_s(pids) - cpu_start) * 1000 / done
        for _ in range(100):  # up to 10 s for the profile to be written
            if path.exists() and path.stat().st_size:
                break
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        stop_processes([process])
    if not path.exists():
        print(f"profile: no output (log in {workdir})")
        return
    stats = pstats.Stats(str(path))
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    idle = sum(v[2] for k, v in stats.stats.items()  # type: ignore[attr-defined]
               if k[0] == "~" and "epoll" in k[2])
    print(f"\nfast engine under cProfile ({site.shape}-link site): {done} pages in "
          f"{elapsed:.1f} s "
          f"({done / elapsed:.0f} pages/s), process CPU {cpu_ms_page * 1000:.0f} µs/page; "
          f"main thread profiled {total * 1e6 / done:.0f} µs/page, of which waiting in epoll "
          f"{idle * 1e6 / done:.0f}")
    groups: dict[str, float] = {}
    for (filename, _line, func), value in stats.stats.items():  # type: ignore[attr-defined]
        group = _cost_group(filename, func)
        groups[group] = groups.get(group, 0.0) + value[2]
    busy = total - idle
    print("self time by package (µs per page served in the window, % of the busy time):")
    for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {seconds * 1e6 / done:7.1f}  {seconds * 100 / busy:4.1f} %  {group}")
    print("top functions by self time (µs/page):")
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:22]  # type: ignore[attr-defined]
    for (filename, line, func), value in top:
        print(f"  {value[2] * 1e6 / done:7.1f}  {_short(filename)}:{line} {func}")
    print("top scrapy_cluster functions by cumulative time (µs/page):")
    ours = [(k, v) for k, v in stats.stats.items()  # type: ignore[attr-defined]
            if "scrapy_cluster" in k[0]]
    for (filename, line, func), value in sorted(ours, key=lambda kv: -kv[1][3])[:16]:
        print(f"  {value[3] * 1e6 / done:7.1f}  {value[3] * 100 / busy:4.1f} %  "
              f"{_short(filename)}:{line} {func}")


def spy_fast(site: Site, client: redis.Redis, redis_url: str, workdir: Path,
             seconds: float, timeout_s: float) -> None:
    """One fast engine crawling ``site`` as in (e), sampled by py-spy for ``seconds`` after
    300 pages of warm-up; prints where its main thread's time goes (``spy_summary.py``).
    Sampling does not slow the crawler (py-spy reads it from outside)."""
    spy = shutil.which("py-spy") or str(Path(PY).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy not installed (pip install py-spy): no sample")
        return
    client.flushdb()
    processes = start_crawlers(1, redis_url, workdir, "fast", tls_env(site))
    pid = processes[0].pid
    raw = workdir / "fast-spy.txt"
    try:
        seed_crawl(client, redis_url, site)
        deadline = time.monotonic() + timeout_s
        wait_for_hits(site, site.hits() + 300, [pid], deadline)
        start_hits, start_cpu = site.hits(), cpu_s([pid])
        subprocess.run([spy, "record", "--pid", str(pid), "--duration", str(int(seconds)),
                        "--rate", "250", "--format", "raw", "--nonblocking", "--output",
                        str(raw)], check=True, capture_output=True)
        done = site.hits() - start_hits
        cpu_ms_page = (cpu_s([pid]) - start_cpu) * 1000 / max(done, 1)
    finally:
        stop_processes(processes)
    from spy_summary import report as spy_report

    print(f"({site.shape}-link site: {done} pages in the sample)")
    spy_report(raw, cpu_ms_page)


def _short(filename: str) -> str:
    for marker in ("site-packages/", "src/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def _cost_group(filename: str, func: str) -> str:
    if filename == "~":  # a C function: name the library it belongs to
        for name in ("lxml", "epoll", "select", "socket", "json", "orjson", "msgpack", "zlib",
                     "re.Pattern", "hiredis", "_asyncio", "_ssl"):
            if name in func:
                return "idle: waiting in epoll" if name == "epoll" else f"C: {name}"
        return "C: other builtins"
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    if "scrapy_cluster/" in filename:
        return "scrapy_cluster." + filename.split("scrapy_cluster/", 1)[1].split("/", 1)[0]
    if "/lib/python3" in filename:
        return "stdlib " + filename.rsplit("/", 1)[1].split(".", 1)[0]
    return filename


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=3000, help="pages in the timed window")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--count-pages", type=int, default=300,
                        help="pages in the MONITOR window that splits client/script commands")
    parser.add_argument("--python-site", action="store_true",
                        help="serve the site with Python even when nginx is installed")
    parser.add_argument("--only", default="a,b,b0,c,d,e,f,g",
                        help="variants to run, e.g. 'a,b'")
    parser.add_argument("--site-pages", type=int, default=4000,
                        help="pages per host (2 hosts); keep above warmup + pages + count-pages")
    parser.add_argument("--timeout", type=float, default=180,
                        help="seconds allowed for one variant's warm-up + timed window")
    parser.add_argument("--profile-pages", type=int, default=0,
                        help="then profile one fast engine over this many pages (0: no)")
    parser.add_argument("--schemes", default=None,
                        help="'http' (default), 'https' or 'http,https': the site's scheme(s); "
                             "every selected variant runs once per scheme")
    parser.add_argument("--tls", action="store_true",
                        help="also over HTTPS: the same as --schemes http,https")
    parser.add_argument("--bus", default="redis",
                        help="'redis' (default), 'kafka' or 'redis,kafka': the cluster "
                             "variants (a, d, e, f) run once per bus; kafka on a private tansu")
    parser.add_argument("--no-latency", action="store_true",
                        help="skip the idle enqueue-to-fetch latency at the end")
    parser.add_argument("--shapes", default="absolute,relative",
                        help="'absolute', 'relative' or both (default): the site's shape(s); "
                             "every selected variant runs once per shape")
    parser.add_argument("--profile-shape", default="relative",
                        help="the shape --profile-pages and --spy-seconds run on (if it is "
                             "among --shapes)")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="concurrent requests (and per domain) of every variant")
    parser.add_argument("--spy-seconds", type=float, default=0,
                        help="then sample one fast engine with py-spy for this long and print "
                             "where its time goes per page (0: no)")
    args = parser.parse_args()
    args.schemes = (args.schemes or ("http,https" if args.tls else "http")).split(",")
    args.buses = args.bus.split(",")
    args.shapes = args.shapes.split(",")
    COMMON.update(CONCURRENT_REQUESTS=str(args.concurrency),
                  CONCURRENT_REQUESTS_PER_DOMAIN=str(args.concurrency))
    if not set(args.schemes) <= {"http", "https"} or not set(args.buses) <= {"redis", "kafka"}:
        parser.error("--schemes takes http and/or https, --bus redis and/or kafka")
    if not set(args.shapes) <= {"absolute", "relative"}:
        parser.error("--shapes takes absolute and/or relative")
    return args


BASE_VARIANTS: dict[str, str] = {
    "a": "scrapy-cluster, 1 process", "b": "plain Scrapy, 1 process",
    "b0": "plain Scrapy, Scrapy defaults", "c": "scrapy-redis, 1 process",
    "d": "scrapy-cluster, 2 processes", "e": "fast engine, 1 process",
    "f": "fast engine, 2 processes", "g": "bare asyncio+aiohttp loop"}


def variant_runner(letter: str, site: Site, client: redis.Redis, redis_url: str,
                   args: argparse.Namespace, workdir: Path,
                   bus: str) -> Callable[[], dict[str, Any]]:
    common = (site, client, redis_url, args, workdir)
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "a": lambda: run_cluster(1, *common, bus=bus),
        "b": lambda: run_scrapy("plain", *common),
        "b0": lambda: run_scrapy("defaults", *common),
        "c": lambda: run_scrapy("redis", *common),
        "d": lambda: run_cluster(2, *common, bus=bus),
        "e": lambda: run_cluster(1, *common, engine="fast", bus=bus),
        "f": lambda: run_cluster(2, *common, engine="fast", bus=bus),
        "g": lambda: run_bare(*common),
    }
    return runners[letter]


def start_kafka(workdir: Path) -> Any:
    """A private in-memory tansu (the test suite's ``KafkaBroker``)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.kafka_broker import KafkaBroker

    broker = KafkaBroker(workdir / "kafka")
    broker.start()
    return broker


def build_variants(args: argparse.Namespace, sites: dict[tuple[str, str], Site],
                   client: redis.Redis, redis_url: str, workdir: Path
                   ) -> tuple[dict[str, Callable[[], dict[str, Any]]], set[str]]:
    """The variants to run, by name, and the labels of those that use Redis. Site shapes
    come first, so that one shape's variants run side by side."""
    variants: dict[str, Callable[[], dict[str, Any]]] = {}
    uses_redis: set[str] = set()
    selected = args.only.split(",")
    for (scheme, shape), site in sites.items():
        for letter, description in BASE_VARIANTS.items():
            if letter not in selected:
                continue
            for bus in (args.buses if letter in CLUSTER_LETTERS else [args.buses[0]]):
                kafka = bus == "kafka" and letter in CLUSTER_LETTERS
                label = "(" + " ".join([letter] + ["tls"] * (scheme == "https")
                                       + ["rel"] * (shape == "relative")
                                       + ["kafka"] * kafka) + ")"
                suffix = "".join([", HTTPS"] * (scheme == "https")
                                 + [", relative-link site"] * (shape == "relative")
                                 + [", Kafka bus"] * kafka)
                variants[f"{label} {description}{suffix}"] = variant_runner(
                    letter, site, client, redis_url, args, workdir, bus)
                if letter in (*CLUSTER_LETTERS, "c"):
                    uses_redis.add(label)
    return variants, uses_redis


def run_variants(variants: dict[str, Callable[[], dict[str, Any]]], workdir: Path
                 ) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """Runs each variant in turn: pages/s and the whole result, by label."""
    rates: dict[str, float] = {}
    results: dict[str, dict[str, Any]] = {}
    for name, run in variants.items():
        label = name.split(")", 1)[0] + ")"
        try:
            result = run()
        except (RuntimeError, ZeroDivisionError) as exc:
            print(f"{name:34} not measured: {exc} (logs in {workdir})")
            continue
        rates[label] = result["pages_s"]
        results[label] = result
        report(name, result)
    return rates, results


def print_ratios(rates: dict[str, float], results: dict[str, dict[str, Any]]) -> None:
    """The ratios between variants, then HTTPS vs HTTP and Kafka vs Redis Streams."""
    for top, bottom in (("(a)", "(b)"), ("(a)", "(b0)"), ("(a)", "(c)"), ("(d)", "(a)"),
                        ("(e)", "(b)"), ("(e)", "(b0)"), ("(e)", "(a)"), ("(e)", "(g)"),
                        ("(f)", "(e)")):
        for tail in ("", " tls", " rel", " kafka", " tls rel", " tls kafka", " rel kafka",
                     " tls rel kafka"):
            a, b = top[:-1] + tail + ")", bottom[:-1] + tail + ")"
            if b not in rates:  # a variant without a bus has no " kafka" label
                b = b.replace(" kafka", "")
            if a in rates and b in rates and a != b:
                print(f"{a}/{b} = {rates[a] / rates[b]:.2f}")
    print("same variant, HTTPS vs HTTP, relative vs absolute links, Kafka vs Redis Streams bus:")
    for label in list(rates):
        for part in (" tls", " rel", " kafka"):
            base = label.replace(part, "")
            if label != base and base in rates:
                print(f"{label}/{base} = {rates[label] / rates[base]:.2f} (pages/s; crawler "
                      f"CPU ms/page {results[label]['cpu_ms_page']:.2f} vs "
                      f"{results[base]['cpu_ms_page']:.2f}; Redis CPU µs/page "
                      f"{results[label]['redis_cpu_ms_page'] * 1000:.0f} vs "
                      f"{results[base]['redis_cpu_ms_page'] * 1000:.0f})")


def main() -> None:
    args = parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="crawl-bench-"))
    os.chmod(workdir, 0o755)
    redis_port = free_port()
    redis_proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port",
                                   str(redis_port), "--save", "", "--bind", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, start_new_session=True)
    sites: dict[tuple[str, str], Site] = {}
    broker = None
    try:
        for shape in args.shapes:
            for scheme in args.schemes:
                site = sites[(scheme, shape)] = start_site(
                    workdir, free_port(HOSTS[0]), free_port(), pages=args.site_pages, links=20,
                    page_bytes=7000, hosts=HOSTS, python_only=args.python_site,
                    tls=scheme == "https", shape=shape)
                print(f"nproc {os.cpu_count()}; {scheme} {shape}-link site server: "
                      f"{site.description}; work dir {workdir}")
        if "https" in args.schemes:
            print(f"TLS: {fast_tls_mode()}")
        if "kafka" in args.buses:
            broker = start_kafka(workdir)
            args.kafka_bootstrap, args.kafka_pid = broker.bootstrap, broker.process.pid
            print(f"Kafka bus: tansu {broker.bootstrap} (in memory), pid {args.kafka_pid}")
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        args.redis_pid = redis_proc.pid
        client = redis.Redis.from_url(redis_url)
        variants, uses_redis = build_variants(args, sites, client, redis_url, workdir)
        rates, results = run_variants(variants, workdir)
        print_ratios(rates, results)
        table(results, uses_redis)
        first = next(iter(sites.values()))
        if args.profile_pages:
            profiled = next((site for site in sites.values()
                             if site.shape == args.profile_shape), first)
            profile_fast(profiled, client, redis_url, workdir, args.profile_pages, args.timeout)
        if args.spy_seconds:
            sampled = next((site for site in sites.values()
                            if site.shape == args.profile_shape), first)
            spy_fast(sampled, client, redis_url, workdir, args.spy_seconds, args.timeout)
        if not args.no_latency:
            print(f"median enqueue-to-fetch latency, idle cluster ({first.scheme}): "
                  f"{latency_ms(first, client, redis_url, workdir, 20):.1f} ms")
    finally:
        for site in sites.values():
            site.stop()
        if broker is not None:
            broker.stop()
        stop_processes([redis_proc])


if __name__ == "__main__":
    main()
