"""Crawl throughput: scrapy-cluster crawler vs plain Scrapy vs scrapy-redis, on one generated site.

Not run by CI. Usage: ``.venv/bin/python benchmarks/crawl_throughput.py [--pages 1500]``.
Starts a private redis-server and the generated site (``scrapy_cluster.testing.site``, Python's
threading HTTP server on 127.0.0.2/127.0.0.3; 7 KB pages with 20 links) and measures, over the
same steady window of pages served (after a warm-up), for each variant: pages/s (from the
site's own hit counter), crawler CPU ms per page (/proc utime+stime) and Redis commands per
page (INFO total_commands_processed, which also counts the commands a Lua script runs) and
script calls (EVALSHA) per page. Then the median enqueue-to-fetch latency on an idle
cluster. Every variant: same spider logic (follow links, one item per page), CONCURRENT_REQUESTS
16, 16 per domain, robots.txt obeyed, throttle off.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
COMMON = {"CONCURRENT_REQUESTS": "16", "CONCURRENT_REQUESTS_PER_DOMAIN": "16",
          "LOG_LEVEL": "WARNING"}

PLAIN_SPIDER = '''
import scrapy
class Bench(scrapy.Spider):
    name = "bench"
    start_urls = [SEED]
    custom_settings = {"REDIS_URL": REDIS}
    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
        yield {"url": response.url, "status": response.status, "body": response.text}
'''
REDIS_SPIDER = PLAIN_SPIDER.replace("import scrapy\n", "import scrapy\nfrom scrapy_redis.spiders import RedisSpider\n").replace(
    "class Bench(scrapy.Spider):", "class Bench(RedisSpider):").replace(
    "    start_urls = [SEED]\n", "")


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hits(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.2:{port}/__hits", timeout=5) as answer:
        return int(answer.read())


def cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def measure(port: int, client: redis.Redis, pids: list[int], warmup: int, pages: int) -> dict:
    deadline = time.monotonic() + 120
    while hits(port) < warmup and time.monotonic() < deadline:
        if any(not Path(f"/proc/{pid}").exists() for pid in pids):
            raise RuntimeError("a crawler exited during the warm-up")
        time.sleep(0.05)
    if hits(port) < warmup:
        raise RuntimeError("no pages crawled within 120 s")
    start_hits, start_t = hits(port), time.monotonic()
    start_cmds = int(client.info("stats")["total_commands_processed"])
    start_scripts = _script_calls(client)
    start_cpu = cpu_s(pids)
    while hits(port) < start_hits + pages and time.monotonic() < deadline:
        time.sleep(0.05)
    done, elapsed = hits(port) - start_hits, time.monotonic() - start_t
    cmds = int(client.info("stats")["total_commands_processed"]) - start_cmds - 2
    scripts = _script_calls(client) - start_scripts
    return {"pages_s": done / elapsed, "cpu_ms_page": (cpu_s(pids) - start_cpu) * 1000 / done,
            "redis_cmds_page": cmds / done, "scripts_page": scripts / done}


def _script_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval"))


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def cluster_env(redis_url: str) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "BUS_BACKEND": "redis",
            "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "QUEUE_WINDOW": "0",
            "SCHEDULER_IP_ENABLED": "false", "PUBLIC_IP_URL": "http://127.0.0.1:1/",
            "CRAWLER_CONCURRENCY": "16", "CRAWLER_PER_DOMAIN_CONCURRENCY": "16",
            "SC_LOG_LEVEL": "WARNING", "REDIS_STREAM_MAXLEN": "2000"}


def run_cluster(n: int, port: int, client: redis.Redis, redis_url: str, args: argparse.Namespace,
                workdir: Path) -> dict:
    from scrapy_cluster.frontier import Frontier
    from scrapy_cluster.settings import load_settings

    client.flushdb()
    env = cluster_env(redis_url)
    procs = [subprocess.Popen([PY, "-m", "scrapy_cluster", "crawler"], env=env, cwd=workdir,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True) for _ in range(n)]
    time.sleep(4)
    settings = load_settings("crawler", environ={}, overrides={"REDIS_URL": redis_url})
    frontier = Frontier.from_settings(settings, client)
    base = hits(port)
    frontier.enqueue_many([{"url": f"http://127.0.0.2:{port}/p/0.html", "appid": "bench",
                            "crawlid": uuid.uuid4().hex, "spiderid": "link", "maxdepth": 50}],
                          dedupe=True)
    try:
        return measure(port, client, [p.pid for p in procs], base + args.warmup, args.pages)
    finally:
        stop(procs)


def run_scrapy(kind: str, port: int, client: redis.Redis, redis_url: str,
               args: argparse.Namespace, workdir: Path) -> dict:
    client.flushdb()
    seed = f"http://127.0.0.2:{port}/p/0.html"
    source = (PLAIN_SPIDER if kind == "plain" else REDIS_SPIDER).replace(
        "SEED", repr(seed)).replace("REDIS", repr(redis_url))
    spider_file = workdir / f"bench_{kind}.py"
    spider_file.write_text(source)
    sets = dict(COMMON, ROBOTSTXT_OBEY="True", TELNETCONSOLE_ENABLED="False",
                REMOTE_CONTROL_ENABLED="False")
    if kind == "redis":
        sets.update(SCHEDULER="scrapy_redis.scheduler.Scheduler",
                    DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter")
        client.lpush("bench:start_urls", seed)
    argv = [PY, "-m", "scrapy", "runspider", str(spider_file), "-o", os.devnull + ":jsonlines"]
    for key, value in sets.items():
        argv += ["-s", f"{key}={value}"]
    base = hits(port)
    log = open(workdir / f"{kind}.log", "wb")  # noqa: SIM115 - closed by the child's exit
    proc = subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=log, start_new_session=True)
    try:
        return measure(port, client, [proc.pid], base + args.warmup, args.pages)
    finally:
        stop([proc])


def latency(port: int, client: redis.Redis, redis_url: str, workdir: Path, rounds: int) -> float:
    from scrapy_cluster.frontier import Frontier
    from scrapy_cluster.settings import load_settings

    client.flushdb()
    proc = subprocess.Popen([PY, "-m", "scrapy_cluster", "crawler"], env=cluster_env(redis_url),
                            cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    time.sleep(5)
    frontier = Frontier.from_settings(
        load_settings("crawler", environ={}, overrides={"REDIS_URL": redis_url}), client)
    samples = []
    try:
        for i in range(rounds):
            before = hits(port)
            started = time.monotonic()
            frontier.enqueue_many([{"url": f"http://127.0.0.3:{port}/p/{i}.html", "appid": "lat",
                                    "crawlid": uuid.uuid4().hex, "spiderid": "link"}])
            while hits(port) == before:
                time.sleep(0.001)
            samples.append((time.monotonic() - started) * 1000)
            time.sleep(0.3)
    finally:
        stop([proc])
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=1500, help="pages in the measured window")
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="crawl-bench-"))
    redis_port, site_port = free_port(), free_port()
    redis_proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port",
                                   str(redis_port), "--save", "", "--bind", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, start_new_session=True)
    site = subprocess.Popen([PY, "-m", "scrapy_cluster.testing.site", "--port", str(site_port),
                             "--pages", "2000", "--links", "20", "--page-bytes", "7000"],
                            start_new_session=True)
    time.sleep(1.5)
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    client = redis.Redis.from_url(redis_url)
    try:
        variants = {
            "(a) scrapy-cluster, 1 process": lambda: run_cluster(1, *common),
            "(b) plain Scrapy, 1 process": lambda: run_scrapy("plain", *common),
            "(c) scrapy-redis, 1 process": lambda: run_scrapy("redis", *common),
            "(d) scrapy-cluster, 2 processes": lambda: run_cluster(2, *common),
        }
        common = (site_port, client, redis_url, args, workdir)
        rates: dict[str, float] = {}
        for name, run in variants.items():
            try:
                r = run()
            except (RuntimeError, ZeroDivisionError) as exc:
                print(f"{name:34} not measured: {exc} (log in {workdir})")
                continue
            rates[name[:3]] = r["pages_s"]
            print(f"{name:34} {r['pages_s']:7.1f} pages/s  {r['cpu_ms_page']:6.2f} CPU ms/page  "
                  f"{r['redis_cmds_page']:5.2f} Redis cmds/page (incl. inside Lua)  "
                  f"{r['scripts_page']:4.2f} script calls/page")
        for top, bottom in (("(a)", "(b)"), ("(a)", "(c)"), ("(d)", "(a)")):
            if top in rates and bottom in rates:
                print(f"{top}/{bottom} = {rates[top] / rates[bottom]:.2f}")
        print(f"median enqueue-to-fetch latency, idle cluster: "
              f"{latency(site_port, client, redis_url, workdir, 20):.1f} ms")
    finally:
        stop([site, redis_proc])


if __name__ == "__main__":
    main()
