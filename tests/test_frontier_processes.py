"""Several OS processes against one frontier: exactly-once dispatch, throttle accuracy,
crash recovery through leases, and a large purge that never blocks Redis."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import DispatchView, Frontier
from tests.support.frontier import drain, make_frontier, req, settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONTEXT = multiprocessing.get_context("fork")
VIEW = DispatchView("link", "10.0.0.1")


def _drain_worker(redis_url: str, out: str, overrides: dict[str, Any], stop_after_s: float) -> None:
    frontier = Frontier.from_settings(settings(**overrides), redis.Redis.from_url(redis_url))
    urls: list[str] = []
    deadline = time.monotonic() + stop_after_s
    while time.monotonic() < deadline:
        result = frontier.pop(VIEW, 32)
        urls.extend(item.request["url"] for item in result.requests)
        frontier.ack([item.lease_id for item in result.requests])
        if result.wait_s is None:
            break
        if not result.requests:
            time.sleep(min(result.wait_s, 0.5))
    Path(out).write_text(json.dumps(urls))


def _run_workers(target: Any, args_for: Any, count: int = 4) -> None:
    processes = [CONTEXT.Process(target=target, args=args_for(i)) for i in range(count)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(90)
        assert process.exitcode == 0


def test_four_processes_dispatch_every_request_exactly_once(redis_url: str,
                                                            redis_client: redis.Redis,
                                                            tmp_path: Path) -> None:
    overrides = {"QUEUE_HITS": 3, "QUEUE_WINDOW": 1}
    frontier = make_frontier(redis_client, **overrides)
    expected = [f"http://site{d}.com/{i}" for d in range(400) for i in range(50)]
    for start in range(0, len(expected), 2000):
        frontier.enqueue_many([req(url) for url in expected[start:start + 2000]])
    _run_workers(_drain_worker, lambda i: (redis_url, str(tmp_path / f"w{i}.json"), overrides, 40))
    seen = [url for i in range(4) for url in json.loads((tmp_path / f"w{i}.json").read_text())]
    assert len(seen) == len(set(seen))
    assert sorted(seen) == sorted(expected)


def _throttle_worker(redis_url: str, out: str, deadline_ms: int) -> None:
    client = redis.Redis.from_url(redis_url)
    frontiers = {mode: Frontier.from_settings(settings(QUEUE_HITS=20, QUEUE_WINDOW=10,
                                                       QUEUE_MODERATED=mode == "mod"), client)
                 for mode in ("mod", "unmod")}
    times: dict[str, list[int]] = {"mod": [], "unmod": []}
    now_ms = 0
    while now_ms < deadline_ms:
        waits = []
        for mode, frontier in frontiers.items():
            result = frontier.pop(DispatchView(mode, "10.0.0.1"), 4)
            now_ms = result.now_ms
            times[mode].extend(item.dispatched_at_ms for item in result.requests)
            frontier.ack([item.lease_id for item in result.requests])
            waits.append(result.wait_s if result.wait_s is not None else 0.5)
        time.sleep(min(*waits, 0.5, max(0.0, (deadline_ms - now_ms) / 1000)))
    Path(out).write_text(json.dumps(times))


def test_throttle_holds_across_four_processes(redis_url: str, redis_client: redis.Redis,
                                              tmp_path: Path) -> None:
    for mode in ("mod", "unmod"):
        make_frontier(redis_client).enqueue_many(
            [req(f"http://{mode}.example.com/{i}", spiderid=mode) for i in range(200)])
    seconds, micros = redis_client.time()
    start_ms = seconds * 1000 + micros // 1000
    deadline_ms = start_ms + 30_000
    _run_workers(_throttle_worker, lambda i: (redis_url, str(tmp_path / f"t{i}.json"), deadline_ms))
    times: dict[str, list[int]] = {"mod": [], "unmod": []}
    for i in range(4):
        for mode, values in json.loads((tmp_path / f"t{i}.json").read_text()).items():
            times[mode].extend(value for value in values if value < deadline_ms)
    report = throttle_report(times, start_ms)
    (tmp_path / "report.json").write_text(json.dumps(report))
    print("throttle report", report)
    assert report["unmod"]["max_per_window"] <= 20
    assert report["mod"]["max_per_window"] <= 20
    assert report["mod"]["min_gap_ms"] >= 500 - 10
    assert report["mod"]["count"] >= 0.95 * 60
    assert report["unmod"]["count"] >= 0.95 * 60


def throttle_report(times: dict[str, list[int]], start_ms: int) -> dict[str, dict[str, float]]:
    report = {}
    for mode, values in times.items():
        values.sort()
        per_window = max((sum(1 for other in values if value <= other < value + 10_000)
                          for value in values), default=0)
        gaps = [b - a for a, b in zip(values, values[1:], strict=False)]
        report[mode] = {"count": len(values), "max_per_window": per_window,
                        "min_gap_ms": min(gaps, default=0), "first_ms": values[0] - start_ms}
    return report


def _lease_then_hang(redis_url: str, out: str) -> None:
    frontier = Frontier.from_settings(settings(LEASE_TIMEOUT=1000), redis.Redis.from_url(redis_url))
    leased = frontier.pop(VIEW, 10).requests
    frontier.ack([item.lease_id for item in leased[:4]])
    Path(out).write_text(json.dumps([item.request["url"] for item in leased]))
    time.sleep(600)


def test_requests_of_a_killed_process_are_dispatched_again(redis_url: str,
                                                           redis_client: redis.Redis,
                                                           tmp_path: Path) -> None:
    make_frontier(redis_client).enqueue_many([req(f"http://d{i}.com/") for i in range(12)])
    out = tmp_path / "leased.json"
    child = CONTEXT.Process(target=_lease_then_hang, args=(redis_url, str(out)))
    child.start()
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    leased = json.loads(out.read_text())
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    seconds, _ = redis_client.time()
    later = make_frontier(redis_client, lambda: (seconds + 1001) * 1000, LEASE_TIMEOUT=1000)
    assert later.reap() == 6
    assert sorted(drain(later)) == sorted(set(f"http://d{i}.com/" for i in range(12))
                                          - set(leased[:4]))


def test_purge_of_200000_requests_keeps_others_and_never_blocks(redis_url: str,
                                                                redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client)
    for chunk in range(100):
        frontier.enqueue_many([req(f"http://d{i % 2000}.com/{chunk}-{i}", crawlid="big")
                               for i in range(2000)])
    frontier.enqueue_many([req(f"http://d{i}.com/keep", crawlid="small") for i in range(2000)])
    latencies: list[float] = []
    stop = threading.Event()

    def ping_loop() -> None:
        client = redis.Redis.from_url(redis_url)
        while not stop.is_set():
            started = time.perf_counter()
            client.ping()
            latencies.append(time.perf_counter() - started)
            time.sleep(0.002)

    pinger = threading.Thread(target=ping_loop)
    pinger.start()
    try:
        removed = frontier.purge("link", "app", "big")
    finally:
        stop.set()
        pinger.join()
    assert removed == 200_000
    assert max(latencies) < 0.1
    small = frontier.crawl_info("link", "app", "small")
    assert (small.total_pending, small.total_domains) == (2000, 2000)
    assert frontier.crawl_info("link", "app", "big").total_pending == 0
    assert not any(redis_client.exists(keys.domain_subqueue("link", f"d{i}.com", 1, "big"))
                   for i in range(0, 2000, 50))
