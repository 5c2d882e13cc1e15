"""Redis Monitor: info latency, stop (purge) time and Redis stall, jobs answered per second.

    .venv/bin/python benchmarks/redis_monitor.py [--quick] [--redis-url URL]

On a throwaway redis-server (unless --redis-url), with the Redis Streams bus
(topic prefix ``bench``) and every Redis Monitor a separate
``python -m scrapy_cluster redis-monitor`` process:

1. **info latency** — app ``app`` has 100,000 pending requests over 1,000
   registered domains (``d0000.com`` ...) in 10 crawls; each crawl spans every
   domain (10,000 requests, 2 priorities). One monitor runs. 200 app-level
   and 200 crawl-level info jobs are written one at a time, each timed from
   the job write (SET + XADD, one pipeline) to its answer read from
   ``bench.outbound_firehose`` (decoded) by this process. Target p99 < 50 ms.
   For the app level, ``Frontier.app_counts`` alone (the Lua call and parsing
   its reply, the bulk of the monitor's work) is timed in this process too.
2. **stop** of one crawl (10,000 pending): time from the job write to the
   answer; meanwhile a thread PINGs Redis on its own connection every 0.5 ms
   and keeps the longest round trip (the stall). The longest command Redis
   itself logged (SLOWLOG, threshold 1 ms) is shown too. Run once per
   FRONTIER_PURGE_CHUNK: the default 5,000 (the setting in use; the targets,
   answer < 5 s and stall < 100 ms, apply to it), then for comparison
   1,000,000 (no request budget per Lua call), on another crawl of the same
   shape with a monitor started with that setting. The Lua calls Redis ran
   (INFO commandstats, EVALSHA; one of them is the job take) are counted.
3. **jobs answered per second** with 1, then 2 monitor processes: the database
   is emptied, the monitors started and waited for (each one's heartbeat,
   written at the end of its first pass, listed); then 5,000 cheap
   jobs (crawl-level info of crawls with nothing queued) are written in one
   MULTI/EXEC, and the clock runs from that write to the last answer read.
   Answers are counted by unique uuid; duplicates (must be 0) are reported.
   REDIS_MONITOR_BATCH_SIZE is the default.

``--quick`` scales down (10,000 requests over 100 domains, 50 info requests of
each kind, 1,000 jobs) to finish in well under 30 s. Every wait has a deadline.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import redis
from crawl_support import Component
from frontier_support import evalsha_calls, throwaway_redis

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.settings import Settings, load_settings

PREFIX = "bench"
FIREHOSE = f"{PREFIX}.outbound_firehose"
SPIDER, APP = "link", "app"
CRAWLS = 10
ENQUEUE_BATCH = 5000
DEFAULT_CHUNK = 5000
CHUNKS = (DEFAULT_CHUNK, 1_000_000)
PING_PAUSE_S = 0.0005
ANSWER_TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
THROUGHPUT_TIMEOUT_S = 120.0


# --- monitors in their own processes -------------------------------------------------------

def monitor_process(url: str, workdir: Path, extra_env: dict[str, str]) -> Component:
    """``python -m scrapy_cluster redis-monitor`` on the benchmark's Redis, logging to a file."""
    return Component(workdir, {"REDIS_URL": url, "BUS_BACKEND": "redis", "KAFKA_TOPIC_PREFIX": PREFIX,
                               "LOG_LEVEL": "WARNING", "STATS_DUMP": "0",
                               "MONITORING_LOG": "false", **extra_env}, "redis-monitor")


@contextmanager
def monitors(url: str, workdir: Path, client: redis.Redis, count: int,
             extra_env: dict[str, str] | None = None) -> Iterator[list[Component]]:
    """``count`` monitor processes, yielded once each has finished its first pass (its
    heartbeat is listed) and so waits on the job stream."""
    started = [monitor_process(url, workdir, extra_env or {})
               for _ in range(count)]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = {str(monitor.process.pid) for monitor in started}
        while waiting:
            for monitor in started:
                monitor.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(f"monitors {sorted(waiting)} not reading jobs after "
                                 f"{START_TIMEOUT_S}s")
            # the first heartbeat is written at the end of the first pass (one job read)
            members: Any = client.zrange(keys.heartbeat_index("redis-monitor"), 0, -1)
            for member in members:
                waiting.discard(member.decode().rsplit(":", 1)[-1].split("-", 1)[0])
            time.sleep(0.05)
        yield started
    finally:
        for monitor in started:
            monitor.stop()


# --- jobs and answers ------------------------------------------------------------------------

def write_job(client: redis.Redis, writer: JobWriter, action: str, crawlid: str | None,
              appid: str = APP, pipe: Any = None) -> str:
    """Queue one info/stop job (executed at once unless ``pipe`` is given); returns its uuid."""
    uid = uuid.uuid4().hex
    payload: dict[str, Any] = {"action": action, "appid": appid, "spiderid": SPIDER, "uuid": uid}
    if crawlid is not None:
        payload["crawlid"] = crawlid
    make_key = keys.info_job if action == "info" else keys.stop_job
    own = pipe is None
    pipe = client.pipeline(transaction=False) if own else pipe
    writer.queue_job(pipe, action, make_key(SPIDER, appid, crawlid, uid), payload)
    if own:
        pipe.execute()
    return uid


def await_answer(reader: Any, uid: str, timeout_s: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        for message in reader.poll(100, min(remaining, 1.0)):
            value = message.value
            if isinstance(value, dict) and value.get("uuid") == uid:
                if "error" in value:
                    raise SystemExit(f"job {uid} answered with an error: {value['error']}")
                return value
    raise SystemExit(f"no answer to job {uid} within {timeout_s}s")


def timed_request(client: redis.Redis, writer: JobWriter, reader: Any, action: str,
                  crawlid: str | None) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    uid = write_job(client, writer, action, crawlid)
    answer = await_answer(reader, uid)
    return time.perf_counter() - started, answer


def bench_expire(settings: Settings, client: redis.Redis, writer: JobWriter, reader: Any,
                 count: int) -> list[float]:
    """Seconds from each crawl's ``expires`` (whole epoch seconds, as the API takes it) to its
    ``expired`` notice arriving; one crawl of one request at a time."""
    frontier = Frontier.from_settings(settings, client)
    delays = []
    for index in range(count):
        crawlid = f"expiring{index}"
        frontier.enqueue_many([{"url": f"http://expire{index}.com/", "appid": APP,
                                "crawlid": crawlid, "spiderid": SPIDER}])
        expires = int(time.time()) + 1
        pipe = client.pipeline()
        writer.queue_timeout(pipe, SPIDER, APP, crawlid, expires)
        pipe.execute()
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        arrived = None
        while arrived is None and time.monotonic() < deadline:
            for message in reader.poll(100, 0.5):
                value = message.value
                if isinstance(value, dict) and value.get("crawlid") == crawlid \
                        and value.get("action") == "expired":
                    arrived = time.time()
        if arrived is None:
            raise SystemExit(f"no expired notice for {crawlid} within {ANSWER_TIMEOUT_S}s")
        delays.append(arrived - expires)
    return delays


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


# --- the three measurements -----------------------------------------------------------------

def fill(settings: Settings, client: redis.Redis, requests: int, domains: int,
         overlapping: bool = True) -> None:
    """``requests`` over ``domains`` registered domains and CRAWLS crawls, half of each crawl
    at priority 100, half at 90. ``overlapping``: each crawl spans every domain (the worst
    case for info: crawls x domains x 2 count fields); otherwise each crawl has its own
    ``domains / CRAWLS`` domains."""
    frontier = Frontier.from_settings(settings, client)
    per_crawl = requests // CRAWLS
    own = max(1, domains // CRAWLS)
    batch: list[dict[str, Any]] = []
    for i in range(requests):
        crawl = i // per_crawl
        domain = i % domains if overlapping else crawl * own + i % own
        batch.append({"url": f"http://d{domain:04d}.com/c{crawl}/page/{i}", "appid": APP,
                      "crawlid": f"crawl{crawl}", "spiderid": SPIDER,
                      "priority": 100 if (i % per_crawl) < per_crawl // 2 else 90})
        if len(batch) == ENQUEUE_BATCH:
            frontier.enqueue_many(batch)
            batch = []
    if batch:
        frontier.enqueue_many(batch)
    pending = sum(crawl.total for crawl in frontier.app_counts(SPIDER, APP).values())
    if pending != requests:
        raise SystemExit(f"frontier holds {pending} requests, {requests} expected")


def bench_info(client: redis.Redis, writer: JobWriter, reader: Any,
               count: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for level, crawlid in (("app", None), ("crawl", "crawl5")):
        for _ in range(5):  # warm-up: scripts loaded, connections open
            timed_request(client, writer, reader, "info", crawlid)
        samples = []
        answer: dict[str, Any] = {}
        for _ in range(count):
            elapsed, answer = timed_request(client, writer, reader, "info", crawlid)
            samples.append(elapsed)
        results[level] = {"p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99),
                          "max": max(samples), "bytes": len(orjson.dumps(answer)),
                          "pending": answer["total_pending"]}
    return results


def time_app_info(settings: Settings, client: redis.Redis, count: int) -> float:
    """p50 of ``Frontier.app_counts`` (pipelined HGETALLs, summed per domain here)."""
    frontier = Frontier.from_settings(settings, client)
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        frontier.app_counts(SPIDER, APP)
        samples.append(time.perf_counter() - started)
    return percentile(samples, 0.5)


class PingLoop:
    """PINGs Redis on its own connection every PING_PAUSE_S; keeps the longest round trip."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.client.ping()
        self.longest = 0.0
        self.pings = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ping-loop", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self.client.ping()
            self.longest = max(self.longest, time.perf_counter() - started)
            self.pings += 1
            time.sleep(PING_PAUSE_S)

    def __enter__(self) -> PingLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()


def idle_stall(url: str, seconds: float) -> float:
    with PingLoop(url) as loop:
        time.sleep(seconds)
    return loop.longest


def bench_stop(url: str, workdir: Path, client: redis.Redis, writer: JobWriter, reader: Any,
               crawlid: str, chunk: int) -> dict[str, Any]:
    env = {"FRONTIER_PURGE_CHUNK": str(chunk)}
    with monitors(url, workdir, client, 1, env):
        timed_request(client, writer, reader, "info", crawlid)  # warm-up (scripts loaded)
        client.config_set("slowlog-log-slower-than", 1000)
        client.config_set("slowlog-max-len", 10_000)
        client.slowlog_reset()
        evals = evalsha_calls(client)
        with PingLoop(url) as loop:
            elapsed, answer = timed_request(client, writer, reader, "stop", crawlid)
        evals = evalsha_calls(client) - evals
        slow = client.slowlog_get(10_000)
        client.config_set("slowlog-log-slower-than", 10_000)
    longest_cmd = max(slow, key=lambda entry: entry["duration"], default=None)
    return {"chunk": chunk, "answer_s": elapsed, "purged": answer["total_purged"],
            "stall_s": loop.longest, "pings": loop.pings, "evals": evals,
            "slowest": (f"{longest_cmd['duration'] / 1000:,.1f} ms "
                        f"({_command_name(longest_cmd['command'])})" if longest_cmd
                        else "none over 1 ms")}


def _command_name(command: Any) -> str:
    text = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
    return text.split(" ", 1)[0].upper()


def bench_throughput(url: str, workdir: Path, settings: Settings, client: redis.Redis,
                     writer: JobWriter, jobs: int, processes: int) -> dict[str, Any]:
    client.flushdb()
    bus = create_bus(settings)
    reader = bus.reader([FIREHOSE], from_beginning=True)
    try:
        with monitors(url, workdir, client, processes):
            pipe = client.pipeline(transaction=True)
            expected = {write_job(client, writer, "info", f"empty{i % 100}", appid="tput",
                                  pipe=pipe) for i in range(jobs)}
            started = time.perf_counter()
            pipe.execute()
            written_s = time.perf_counter() - started
            seen: set[str] = set()
            received = 0
            deadline = time.monotonic() + THROUGHPUT_TIMEOUT_S
            while len(seen) < jobs and time.monotonic() < deadline:
                for message in reader.poll(1000, 1.0):
                    value = message.value
                    if isinstance(value, dict) and value.get("uuid") in expected:
                        received += 1
                        seen.add(value["uuid"])
            elapsed = time.perf_counter() - started
            if len(seen) < jobs:
                raise SystemExit(f"{processes} monitor(s): {len(seen)} of {jobs} answered "
                                 f"within {THROUGHPUT_TIMEOUT_S}s")
            # late duplicates: wait until every job is acknowledged, then read what is left
            drain_deadline = time.monotonic() + 10
            while (client.xpending(keys.redis_monitor_jobs(), "redis-monitor")["pending"]
                   and time.monotonic() < drain_deadline):
                time.sleep(0.05)
            for message in reader.poll(1000, 0.3):
                if isinstance(message.value, dict) and message.value.get("uuid") in expected:
                    received += 1
    finally:
        reader.close()
        bus.close()
    return {"rate": jobs / elapsed, "elapsed_s": elapsed, "written_s": written_s,
            "unique": len(seen), "duplicates": received - len(seen)}


# --- main -------------------------------------------------------------------------------------

def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def verdict(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="10,000 requests / 100 domains, 50 info requests, 1,000 jobs")
    parser.add_argument("--redis-url", help="use this Redis (it is FLUSHED) instead of a "
                                            "throwaway redis-server")
    args = parser.parse_args()
    requests, domains, infos, jobs = ((10_000, 100, 50, 1_000) if args.quick
                                      else (100_000, 1_000, 200, 5_000))
    began, load_before = time.perf_counter(), os.getloadavg()[0]
    with throwaway_redis(args.redis_url) as url, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        settings = load_settings("redis-monitor", environ={}, overrides={
            "REDIS_URL": url, "BUS_BACKEND": "redis", "KAFKA_TOPIC_PREFIX": PREFIX,
            "STATS_DUMP": 0, "LOG_LEVEL": "WARNING", "MONITORING_LOG": False})
        client = redis.Redis.from_url(url)
        version = client.info("server")["redis_version"]
        writer = JobWriter.from_settings(settings)
        client.flushdb()

        bus = create_bus(settings)
        reader = bus.reader([FIREHOSE], from_beginning=True)
        fill(settings, client, requests, domains, overlapping=False)
        with monitors(url, workdir, client, 1):
            separate = bench_info(client, writer, reader, infos)
        client.delete(*[keys.crawl_timeout(SPIDER, APP, f"crawl{i}") for i in range(CRAWLS)])
        for index in range(CRAWLS):
            Frontier.from_settings(settings, client).purge(SPIDER, APP, f"crawl{index}")
        client.delete(keys.crawl_blacklist(SPIDER))
        fill(settings, client, requests, domains)
        with monitors(url, workdir, client, 1):
            info = bench_info(client, writer, reader, infos)
            expiry = bench_expire(settings, client, writer, reader, 5 if args.quick else 10)
        app_info_s = time_app_info(settings, client, 20)  # no monitor running meanwhile
        idle = idle_stall(url, 1.0)
        stops = [bench_stop(url, workdir, client, writer, reader, f"crawl{index}", chunk)
                 for index, chunk in enumerate(CHUNKS)]
        reader.close()
        bus.close()

        one = bench_throughput(url, workdir, settings, client, writer, jobs, 1)
        two = bench_throughput(url, workdir, settings, client, writer, jobs, 2)
        client.close()

    per_crawl = requests // CRAWLS
    print(f"command: {shlex.join(sys.orig_argv)}")
    print(f"redis-server {version}; machine: {os.cpu_count()} cores (redis-server, the "
          f"monitor process(es) and this process share them); load average (1 min) "
          f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after; Redis Streams bus")
    print(f"frontier: {requests:,} pending requests of app '{APP}' over {domains:,} registered "
          f"domains in {CRAWLS} crawls of {per_crawl:,} at 2 priorities, laid out two ways "
          f"(info rows); stop and throughput on the worst case; one monitor process for info "
          f"and stop")
    print()
    print("| measurement | result | target | met |")
    print("| --- | --- | --- | --- |")
    rows = [(separate, "app", f"app-level, each crawl over its own {domains // CRAWLS} domains"),
            (separate, "crawl", "crawl-level, a crawl over its own domains"),
            (info, "app", "app-level, every crawl over every domain (worst case)"),
            (info, "crawl", "crawl-level, a crawl over every domain")]
    for source, level, label in rows:
        row = source[level]
        print(f"| info {label}, {infos} sequential: p50 / p99 / max | {ms(row['p50'])} / "
              f"{ms(row['p99'])} / {ms(row['max'])} (answer {row['bytes']:,} bytes, "
              f"{row['pending']:,} pending) | p99 < 50 ms | {verdict(row['p99'] < 0.05)} |")
    print(f"| of which `Frontier.app_counts` alone (pipelined HGETALLs + summing per domain; "
          f"in this process, monitor stopped): p50 | {ms(app_info_s)} | - | - |")
    for stop in stops:
        default = stop["chunk"] == DEFAULT_CHUNK
        label = f"FRONTIER_PURGE_CHUNK={stop['chunk']:,}" + (" (default, in use)" if default
                                                              else " (comparison)")
        print(f"| stop one crawl, {label}: answer time | {ms(stop['answer_s'])} "
              f"({stop['purged']:,} purged; {stop['evals']} EVALSHA) | {'< 5 s' if default else '-'} | "
              f"{verdict(stop['answer_s'] < 5) if default else '-'} |")
        print(f"| stop, {label}: longest PING meanwhile ({stop['pings']:,} pings); "
              f"longest command in SLOWLOG | {ms(stop['stall_s'])}; "
              f"{stop['slowest']} | "
              f"{'< 100 ms' if default else '-'} | "
              f"{verdict(stop['stall_s'] < 0.1) if default else '-'} |")
    print(f"| longest PING with nothing running (1 s, for reference) | {ms(idle)} | - | - |")
    print(f"| expired notice after `expires`, {len(expiry)} crawls: median / max | "
          f"{ms(percentile(expiry, 0.5))} / {ms(max(expiry))} | < 2 s | "
          f"{verdict(max(expiry) < 2.0)} |")
    for count, row in ((1, one), (2, two)):
        print(f"| jobs answered/s, {count} monitor process{'es' if count > 1 else ''} "
              f"({jobs:,} cheap info jobs) | {row['rate']:,.0f}/s ({row['elapsed_s']:.2f} s; "
              f"written in {ms(row['written_s'])}; {row['unique']:,} unique, "
              f"{row['duplicates']} duplicates) | duplicates = 0 | "
              f"{verdict(row['duplicates'] == 0)} |")
    print(f"| ratio 2 monitors / 1 monitor | {two['rate'] / one['rate']:.2f}x "
          f"(on {os.cpu_count()} cores) | - | - |")
    print()
    print(f"total run time: {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
