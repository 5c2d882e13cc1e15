"""Crawl throughput: scrapy-cluster crawler vs plain Scrapy vs scrapy-redis, on one generated site.

Not run by CI. Usage: ``.venv/bin/python benchmarks/crawl_throughput.py [--pages 1500]``.
Starts a private redis-server and the generated site (``scrapy_cluster.testing.site``: 7 KB
pages with 20 links on 127.0.0.2 and 127.0.0.3), served as static files by nginx
(``scrapy_cluster.testing.nginx``, one worker) or, without nginx or with ``--python-site``,
by the Python server. For each variant, over the same steady window of pages served (after a
warm-up): pages/s (the site's own request counter), crawler CPU ms per page (/proc
utime+stime), Redis commands per page as the server counts them (INFO
total_commands_processed: commands sent by clients plus every command a Lua script runs) and
script calls per page; then, over a further window with MONITOR attached (it slows Redis, so
it is not timed), the commands clients send per page and the commands run inside scripts per
page. Last, the median enqueue-to-fetch latency on an idle cluster. Every variant: same spider
logic (follow links, one item per page), CONCURRENT_REQUESTS 16, 16 per domain, robots.txt
obeyed, throttle off; (b) and (c) also with the cluster crawler's per-page Scrapy settings
(CLUSTER_SCRAPY), (b0) with Scrapy's defaults. Variants: ``--only a,b,b0,c,d``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from crawl_support import PY, Site, count_commands, free_port, measure, start_site, stop_processes

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


def cluster_env(redis_url: str) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "BUS_BACKEND": "redis",
            "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "QUEUE_WINDOW": "0",
            "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": "http://127.0.0.1:1/",
            "CRAWLER_CONCURRENCY": "16", "CRAWLER_PER_DOMAIN_CONCURRENCY": "16",
            "SC_LOG_LEVEL": "WARNING", "REDIS_STREAM_MAXLEN": "2000"}


def start_crawlers(n: int, redis_url: str, workdir: Path) -> list[subprocess.Popen[bytes]]:
    processes = [subprocess.Popen([PY, "-m", "scrapy_cluster", "crawler"],
                                  env=cluster_env(redis_url), cwd=workdir,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True) for _ in range(n)]
    time.sleep(4)
    return processes


def frontier_for(client: redis.Redis, redis_url: str) -> Any:
    from scrapy_cluster.frontier import Frontier
    from scrapy_cluster.settings import load_settings

    settings = load_settings("crawler", environ={}, overrides={"REDIS_URL": redis_url})
    return Frontier.from_settings(settings, client)


def run_cluster(n: int, site: Site, client: redis.Redis, redis_url: str,
                args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    client.flushdb()
    processes = start_crawlers(n, redis_url, workdir)
    frontier_for(client, redis_url).enqueue_many(
        [{"url": f"http://{HOSTS[0]}:{site.port}/p/0.html", "appid": "bench",
          "crawlid": uuid.uuid4().hex, "spiderid": "link", "maxdepth": 50}], dedupe=True)
    return _measure_all(site, client, processes, args)


def _measure_all(site: Site, client: redis.Redis, processes: list[subprocess.Popen[bytes]],
                 args: argparse.Namespace) -> dict[str, Any]:
    pids = [p.pid for p in processes]
    try:
        result: dict[str, Any] = measure(site, client, pids, redis_pid=args.redis_pid,
                                         warmup=args.warmup, pages=args.pages)
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
        "SEED", repr(f"http://{HOSTS[0]}:{site.port}/p/0.html")))
    sets = dict(COMMON) if kind == "defaults" else {**COMMON, **CLUSTER_SCRAPY}
    if kind == "redis":
        sets.update(SCHEDULER="scrapy_redis.scheduler.Scheduler",
                    DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter",
                    REDIS_URL=redis_url)
    argv = [PY, "-m", "scrapy", "runspider", str(spider_file), "-o", os.devnull + ":jsonlines"]
    for key, value in sets.items():
        argv += ["-s", f"{key}={value}"]
    log = open(workdir / f"{kind}.log", "wb")  # noqa: SIM115 - closed by the child's exit
    process = subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=log, start_new_session=True)
    return _measure_all(site, client, [process], args)


def latency_ms(site: Site, client: redis.Redis, redis_url: str, workdir: Path,
               rounds: int) -> float:
    """Median time from enqueueing a crawl to the site serving its page, one idle crawler."""
    client.flushdb()
    processes = start_crawlers(1, redis_url, workdir)
    frontier = frontier_for(client, redis_url)
    samples = []
    try:
        for i in range(rounds):
            before = site.hits()
            started = time.monotonic()
            frontier.enqueue_many([{"url": f"http://{HOSTS[1]}:{site.port}/p/{i}.html",
                                    "appid": "lat", "crawlid": uuid.uuid4().hex,
                                    "spiderid": "link"}])
            while site.hits() == before:
                time.sleep(0.001)
            samples.append((time.monotonic() - started) * 1000)
            time.sleep(0.3)
    finally:
        stop_processes(processes)
    return statistics.median(samples)


def report(name: str, result: dict[str, Any]) -> None:
    print(f"{name:34} {result['pages_s']:7.1f} pages/s  {result['cpu_ms_page']:6.2f} CPU ms/page"
          f" (Redis {result['redis_cpu_ms_page']:.2f}, site {result['site_cpu_ms_page']:.2f}, "
          f"machine {result['machine_busy_pct']:.0f} % busy)\n{'':34} Redis cmds/page: {result['client_cmds_page']:5.2f} sent by clients, "
          f"{result['lua_cmds_page']:5.2f} inside scripts, {result['server_cmds_page']:5.2f} "
          f"server total; {result['scripts_page']:4.2f} script calls/page")
    print(f"{'':34} client commands/page: {result['client_top']}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=3000, help="pages in the timed window")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--count-pages", type=int, default=300,
                        help="pages in the MONITOR window that splits client/script commands")
    parser.add_argument("--python-site", action="store_true",
                        help="serve the site with Python even when nginx is installed")
    parser.add_argument("--only", default="a,b,b0,c,d", help="variants to run, e.g. 'a,b'")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="crawl-bench-"))
    os.chmod(workdir, 0o755)
    redis_port = free_port()
    redis_proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port",
                                   str(redis_port), "--save", "", "--bind", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, start_new_session=True)
    site = start_site(workdir, free_port(HOSTS[0]), free_port(), pages=4000, links=20,
                      page_bytes=7000, hosts=HOSTS, python_only=args.python_site)
    print(f"nproc {os.cpu_count()}; site server: {site.description}; work dir {workdir}")
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    args.redis_pid = redis_proc.pid
    client = redis.Redis.from_url(redis_url)
    common = (site, client, redis_url, args, workdir)
    variants: dict[str, Callable[[], dict[str, Any]]] = {
        "(a) scrapy-cluster, 1 process": lambda: run_cluster(1, *common),
        "(b) plain Scrapy, 1 process": lambda: run_scrapy("plain", *common),
        "(b0) plain Scrapy, Scrapy defaults": lambda: run_scrapy("defaults", *common),
        "(c) scrapy-redis, 1 process": lambda: run_scrapy("redis", *common),
        "(d) scrapy-cluster, 2 processes": lambda: run_cluster(2, *common),
    }
    try:
        rates: dict[str, float] = {}
        for name, run in variants.items():
            label = name.split(" ", 1)[0]
            if label.strip("()") not in args.only.split(","):
                continue
            try:
                result = run()
            except (RuntimeError, ZeroDivisionError) as exc:
                print(f"{name:34} not measured: {exc} (logs in {workdir})")
                continue
            rates[label] = result["pages_s"]
            report(name, result)
        for top, bottom in (("(a)", "(b)"), ("(a)", "(b0)"), ("(a)", "(c)"), ("(d)", "(a)")):
            if top in rates and bottom in rates:
                print(f"{top}/{bottom} = {rates[top] / rates[bottom]:.2f}")
        print(f"median enqueue-to-fetch latency, idle cluster: "
              f"{latency_ms(site, client, redis_url, workdir, 20):.1f} ms")
    finally:
        site.stop()
        stop_processes([redis_proc])


if __name__ == "__main__":
    main()
