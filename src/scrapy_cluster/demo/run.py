"""``scrapy-cluster demo``: run the embedded cluster against a local site and check the result.

Everything is local and private: a fresh Redis in a temporary directory (or
the REDIS_URL given), Redis Streams as the bus, the demo site on several
loopback addresses. The crawl, the domain limits and the questions are sent to the
Rest service's HTTP API (``POST /feed``, ``/poll``), exactly as an application would; results
are read from ``<prefix>.crawled_firehose``.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from tqdm import tqdm

from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.demo.api import ApiClient, ApiError
from scrapy_cluster.demo.report import DemoReport, count_results, domain_rate
from scrapy_cluster.demo.site import DemoDomain, DemoSiteServer, is_disallowed
from scrapy_cluster.embedded import ChildSpec, Console, EmbeddedRedis, Supervisor
from scrapy_cluster.settings import Settings

DEMO_DOMAINS = (
    DemoDomain("127.0.0.21", hits=5, window_s=2.0, moderated=True),
    DemoDomain("127.0.0.22", hits=10, window_s=4.0, moderated=False),
    DemoDomain("127.0.0.23", hits=4, window_s=2.0, delay_s=0.4, moderated=True),
)
MAXDEPTH = 2


@dataclass(frozen=True)
class DemoOptions:
    crawlers: int = 2
    timeout_s: float = 90.0
    grace_s: float = 1.5
    show_progress: bool = True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def demo_redis(settings: Settings) -> Iterator[str]:
    """REDIS_URL when configured, else a throwaway embedded server."""
    if settings["REDIS_URL"]:
        yield str(settings["REDIS_URL"])
        return
    workdir = Path(tempfile.mkdtemp(prefix="scrapy-cluster-demo-"))
    server = EmbeddedRedis(workdir)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def cluster_env(redis_url: str) -> dict[str, str]:
    """Settings shared by the demo's child processes."""
    return {"REDIS_URL": redis_url, "BUS_BACKEND": "redis",
            "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true", "PUBLIC_IP": "127.0.0.1",
            "PUBLIC_IP_URL": "", "LOG_LEVEL": "WARNING", "SC_LOG_LEVEL": "WARNING"}


def run_demo(settings: Settings, options: DemoOptions, echo: Callable[[str], None]) -> int:
    """Run the demo; returns the process exit status (0 when every check passed)."""
    with demo_redis(settings) as redis_url, \
            DemoSiteServer(list(DEMO_DOMAINS), free_port()) as site:
        env = cluster_env(redis_url)
        demo_settings = settings.with_overrides({"REDIS_URL": redis_url, "BUS_BACKEND": "redis"})
        client = redis.Redis.from_url(redis_url)
        seed = site.site.url(DEMO_DOMAINS[0].host, "/p/0.html")
        expected = site.site.expected_urls(seed, MAXDEPTH)
        rest_port = free_port()
        supervisor = Supervisor(_children(options.crawlers, env, rest_port),
                                output=Console(echo, events=False))
        echo(f"demo: site on {', '.join(d.host for d in DEMO_DOMAINS)} port {site.site.port}; "
             f"starting the Kafka Monitor, the Redis Monitor, the Rest service "
             f"(http://127.0.0.1:{rest_port}, dashboard /ui) and {options.crawlers} crawler(s) "
             f"on {redis_url}")
        supervisor.start()
        bus = create_bus(demo_settings, redis_client=client)
        api = ApiClient(f"http://127.0.0.1:{rest_port}")
        try:
            crawl = CrawlOutcome([], {})
            try:
                api.wait_ready()
                api_failures = configure_throttles(api)
                if not api_failures:
                    crawl = _crawl(demo_settings, bus, api, seed, expected, options)
            except ApiError as exc:
                api_failures = [str(exc)]
        finally:
            api.close()
            bus.close()
            supervisor.stop(timeout_s=10.0)
            client.close()
        report = build_report(site, expected, crawl.items, seed, demo_settings)
        report.api_failures = api_failures + crawl.api_failures
        report.answers = crawl.answers
    return finish(report, echo)


def configure_throttles(api: ApiClient, timeout_s: float = 30.0) -> list[str]:
    """Set each demo domain's limit with a ``domain-update`` request, as an application would,
    and wait for the Redis Monitor's answers; returns what went wrong."""
    uids = {api.send({"appid": "demo", "action": "domain-update", "domain": domain.host,
                      "hits": domain.hits, "window": domain.window_s,
                      **({"moderated": domain.moderated} if domain.moderated is not None
                         else {})}): domain.host for domain in DEMO_DOMAINS}
    answers = api.wait(list(uids), timeout_s)
    failures = [f"no answer to domain-update of {host} within {timeout_s:g}s"
                for uid, host in uids.items() if uid not in answers]
    failures += [f"domain-update of {uids[uid]} failed: {answer['error']}"
                 for uid, answer in answers.items() if answer.get("error")]
    return failures


def _children(crawlers: int, env: dict[str, str], rest_port: int) -> list[ChildSpec]:
    base = [sys.executable, "-m", "scrapy_cluster"]
    rest_env = {**env, "REST_HOST": "127.0.0.1", "FLASK_PORT": str(rest_port),
                "FLASK_LOGGING_ENABLED": "false"}
    specs = [ChildSpec("kafka-monitor", [*base, "kafka-monitor", "run"], env),
             ChildSpec("redis-monitor", [*base, "redis-monitor"], env),
             ChildSpec("rest", [*base, "rest"], rest_env)]
    specs += [ChildSpec(f"crawler-{i}", [*base, "crawler", "--spider", "link"], env)
              for i in range(1, crawlers + 1)]
    return specs


@dataclass
class CrawlOutcome:
    items: list[dict[str, Any]]
    answers: dict[str, dict[str, Any]]
    api_failures: list[str] = field(default_factory=list)


def _crawl(settings: Settings, bus: Any, api: ApiClient, seed: str, expected: set[str],
           options: DemoOptions) -> CrawlOutcome:
    """Feed the crawl, collect its pages; ask for its ``info`` halfway and for ``crawler``
    stats at the end, through the API."""
    crawlid = uuid.uuid4().hex[:12]
    consumer = bus.consumer([topics.crawled_firehose(settings["KAFKA_TOPIC_PREFIX"])],
                            f"demo-watch-{crawlid}", from_beginning=True)
    try:
        api.send({"url": seed, "appid": "demo", "crawlid": crawlid, "maxdepth": MAXDEPTH})
        info_request = {"action": "info", "appid": "demo", "spiderid": "link",
                        "crawlid": crawlid}
        asked: dict[str, str] = {}

        def halfway() -> None:
            asked["info"] = api.send(info_request)

        items = _collect(consumer, crawlid, expected, options, halfway)
        asked["stats"] = api.send({"appid": "demo", "stats": "crawler"})
        got = api.wait(list(asked.values()), timeout_s=15.0)
        answers = {name: got[uid] for name, uid in asked.items() if uid in got}
        failures = [f"no answer to the {name} request within 15s"
                    for name in asked if name not in answers]
        return CrawlOutcome(items, answers, failures)
    finally:
        consumer.close()


def _collect(consumer: Any, crawlid: str, expected: set[str], options: DemoOptions,
             halfway: Callable[[], None]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    deadline = time.monotonic() + options.timeout_s
    done_at: float | None = None
    asked = False
    with tqdm(total=len(expected), desc="pages", unit="page",
              disable=not options.show_progress) as bar:
        while time.monotonic() < deadline and (done_at is None or time.monotonic() < done_at):
            batch = consumer.poll(max_messages=100, timeout_s=0.25)
            for message in batch:
                value = message.value
                if isinstance(value, dict) and value.get("crawlid") == crawlid:
                    items.append(value)
                    if value.get("url") in expected and value["url"] not in seen:
                        seen.add(value["url"])
                        bar.update(1)
            consumer.ack(batch)
            if not asked and 2 * len(seen) >= len(expected):
                halfway()
                asked = True
            if done_at is None and seen >= expected:
                done_at = time.monotonic() + options.grace_s
    return items


def build_report(site: DemoSiteServer, expected: set[str], items: list[dict[str, Any]],
                 seed: str, settings: Settings) -> DemoReport:
    crawled, statuses, errors = count_results(items)
    reachable = site.site.reachable_urls(seed, MAXDEPTH)
    hits = site.hits_snapshot()
    disallowed = {url for url in reachable if is_disallowed(url)}
    report = DemoReport(expected=expected, crawled=crawled, statuses=statuses,
                        disallowed_linked=disallowed,
                        disallowed_fetched={url for url in disallowed if hits[url]},
                        errors=errors)
    arrivals = site.arrivals_snapshot()
    default_moderated = bool(settings["QUEUE_MODERATED"])
    report.rates = [domain_rate(d.host, d.hits, d.window_s, arrivals.get(d.host, []),
                                moderated=default_moderated if d.moderated is None else d.moderated)
                    for d in DEMO_DOMAINS]
    return report


def finish(report: DemoReport, echo: Callable[[str], None]) -> int:
    from scrapy_cluster.demo.report import render_summary

    echo(render_summary(report))
    failures = report.failures()
    if failures:
        echo("\nDEMO FAILED:\n  " + "\n  ".join(failures))
        return 1
    echo("\nDEMO OK: every expected page crawled exactly once, robots.txt respected, "
         "no domain above its limit, every busy domain close to it.")
    return 0
