"""Throttled domains are crawled at their configured rate, judged by the site's own request log.

Real redis-server, real crawler processes, the generated site on three loopback hosts. Each
host gets a different limit and throttle mode; every host has far more pages than a phase can
fetch, so each domain always has backlog. A phase feeds one seed per host, lets the crawlers
run for ``PHASE_S`` seconds from the first request, then stops them and purges the crawl.

Phase 1: one crawler, throttle per spider type. Phase 2: three crawlers sharing the throttle
per public IP (SCHEDULER_IP_ENABLED). Each phase fails if a host ever saw more requests in
one window than its limit, or if a host's rate over the phase (first window skipped) was below
half its limit; a crawler that waited for Scrapy's 5 s heartbeat reached about a tenth.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scrapy_cluster import keys
from scrapy_cluster.domain_config import DomainDocument, frontier_domain, update
from scrapy_cluster.domain_config.redis_store import RedisDomainConfigStore
from scrapy_cluster.domain_config.zookeeper_store import ZookeeperDomainConfigStore
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from scrapy_cluster.sitegen.throttle_measure import Limit, max_in_window, utilisation
from tests.support.addresses import POLITENESS
from tests.support.cluster import Cluster, running_cluster
from tests.support.services import free_port

# Judges how fully each limit is used: one worker runs the group, never two of its tests at once.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("cpu-sensitive")]

PHASE_S = 8.0
MIN_UTILISATION = 0.5


@dataclass(frozen=True)
class Host:
    address: str
    limit: Limit
    moderated: bool


HOSTS = (Host(POLITENESS.host(41), Limit(5, 2.0), moderated=True),
         Host(POLITENESS.host(42), Limit(4, 1.0), moderated=True),
         Host(POLITENESS.host(43), Limit(10, 2.0), moderated=False))
THROTTLED_ENV = {"QUEUE_WINDOW": "60", "QUEUE_HITS": "10", "QUEUE_MODERATED": "true"}
PUSHED_HOST = POLITENESS.host(46)
ARRIVALS_HOST = POLITENESS.host(44)
PER_IP_ENV = {"SCHEDULER_IP_ENABLED": "true", "PUBLIC_IP": "127.0.0.1", "PUBLIC_IP_URL": ""}


@pytest.fixture(scope="module")
def throttled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("politeness")
    site_config = SiteConfig(hosts=(*(host.address for host in HOSTS), PUSHED_HOST),
                             pages_per_host=400,
                             links_per_page=10, cross_host_every=1000, page_bytes=800)
    with running_cluster(tmp, site_config) as cluster:
        config = DomainConfig(cluster.client, cluster.frontier)
        for host in HOSTS:
            config.set_throttle(host.address, DomainThrottle(
                window_s=host.limit.window_s, hits=host.limit.hits, moderated=host.moderated))
        yield cluster


def run_phase(cluster: Cluster, crawlers: int, env: dict[str, str]) -> dict[str, list[float]]:
    """Crawl every host with ``crawlers`` processes; the site's arrivals during the phase."""
    processes = [cluster.start_crawler("link", **THROTTLED_ENV, **env) for _ in range(crawlers)]
    crawlid, started_s = uuid.uuid4().hex, time.monotonic()
    seeds = [{"url": cluster.site.site.url(host.address, "/p/0.html"), "appid": "polite",
              "crawlid": crawlid, "spiderid": "link", "maxdepth": 50} for host in HOSTS]
    assert cluster.frontier.enqueue_many(seeds, dedupe=True).queued == len(HOSTS)
    first_s = _first_arrival(cluster.site, started_s)
    time.sleep(max(0.0, first_s + PHASE_S - time.monotonic()))
    stopped_s = time.monotonic()
    for process in processes:
        cluster.stop(process)
    cluster.frontier.purge("link", "polite", crawlid)
    return {host: [t for t in times if started_s <= t < stopped_s]
            for host, times in cluster.site.arrivals_snapshot().items()}


def _first_arrival(site: SiteServer, after_s: float) -> float:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = [t for times in site.arrivals_snapshot().values() for t in times if t >= after_s]
        if seen:
            return min(seen)
        time.sleep(0.05)
    raise AssertionError("no page was requested within 30 s of feeding the seeds")


def judge(arrivals: dict[str, list[float]]) -> dict[str, tuple[int, float]]:
    """Per host: (most requests in one window, utilisation after the first window)."""
    verdict = {}
    for host in HOSTS:
        times = sorted(arrivals.get(host.address, []))
        assert len(times) >= 2, f"{host.address} got {len(times)} request(s)"
        end_s = times[0] + PHASE_S
        verdict[host.address] = (
            max_in_window(times, host.limit.window_s),
            utilisation(times, host.limit, times[0] + host.limit.window_s, end_s))
    return verdict


def assert_polite_and_busy(verdict: dict[str, tuple[int, float]]) -> None:
    for host in HOSTS:
        peak, used = verdict[host.address]
        assert peak <= host.limit.hits, (host, verdict)
        assert used >= MIN_UTILISATION, (host, verdict)


@pytest.mark.parametrize(("crawlers", "env"), [
    (1, {"SCHEDULER_IP_ENABLED": "false"}), (3, PER_IP_ENV)],
    ids=["one-crawler", "three-crawlers-sharing-per-ip"])
def test_crawlers_use_each_domain_limit_and_never_exceed_it(
        throttled: Cluster, crawlers: int, env: dict[str, str]) -> None:
    assert_polite_and_busy(judge(run_phase(throttled, crawlers, env)))


def test_site_log_records_arrivals_per_host_without_robots(tmp_path: Path) -> None:
    import urllib.request

    config = SiteConfig(hosts=(ARRIVALS_HOST,), pages_per_host=2)
    with SiteServer(config, free_port()) as site:
        for path in ("/robots.txt", "/p/0.html", "/p/1.html"):
            with urllib.request.urlopen(site.site.url(ARRIVALS_HOST, path), timeout=5) as answer:
                answer.read()
        arrivals = site.arrivals_snapshot()
    assert list(arrivals) == [ARRIVALS_HOST] and len(arrivals[ARRIVALS_HOST]) == 2
    assert arrivals[ARRIVALS_HOST][0] <= arrivals[ARRIVALS_HOST][1]


def _script_calls(cluster: Cluster) -> int:
    stats = cluster.client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("evalsha", "eval", "blpop"))


def test_an_idle_or_fully_throttled_crawler_does_not_poll(throttled: Cluster) -> None:
    """Nothing queued, then one domain allowed once a minute with backlog: over 6 s each, the
    crawler sends a handful of script calls and BLPOPs (pops every 5 s at most, lease reaping,
    acks), not the thousands a polling loop would."""
    process = throttled.start_crawler("link", **THROTTLED_ENV, SCHEDULER_IP_ENABLED="false")
    try:
        time.sleep(2.0)
        before = _script_calls(throttled)
        time.sleep(6.0)
        idle_calls = _script_calls(throttled) - before
        crawlid = uuid.uuid4().hex
        host = POLITENESS.host(45)
        DomainConfig(throttled.client, throttled.frontier).set_throttle(
            host, DomainThrottle(window_s=60, hits=1))
        throttled.frontier.enqueue_many(
            [{"url": f"http://{host}:1/p/{i}.html", "appid": "polite", "crawlid": crawlid,
              "spiderid": "link"} for i in range(3)], dedupe=True)
        time.sleep(2.0)
        before = _script_calls(throttled)
        time.sleep(6.0)
        throttled_calls = _script_calls(throttled) - before
        throttled.frontier.purge("link", "polite", crawlid)
    finally:
        throttled.stop(process)
    assert idle_calls <= 12, idle_calls
    assert throttled_calls <= 12, throttled_calls


class Pusher:
    """Pushes domain documents (the module's hosts plus extra entries) through one backend;
    with ZooKeeper a ``scrapy-cluster config sync`` process mirrors them into Redis."""

    def __init__(self, cluster: Cluster, store: Any, sync: subprocess.Popen[bytes] | None) -> None:
        self.cluster, self.store, self.sync = cluster, store, sync

    def push(self, extra: dict[str, dict[str, object]],
             blacklist: list[str]) -> tuple[float, float]:
        """When the push started and when it returned (the new version is stored)."""
        domains: dict[str, dict[str, object]] = {
            host.address: {"window": host.limit.window_s, "hits": host.limit.hits,
                           "moderated": host.moderated} for host in HOSTS}
        document = DomainDocument.from_data({"domains": {**domains, **extra},
                                             "blacklist": blacklist}, frontier_domain())
        started = time.monotonic()
        update(self.store, lambda _old: document)
        return started, time.monotonic()

    def wait_applied(self) -> None:
        version = self.store.read().version
        deadline = time.monotonic() + 30
        while int(self.cluster.client.hget(keys.domain_config_document(), "version") or 0) \
                < version:
            assert time.monotonic() < deadline, "config sync did not apply the document"
            time.sleep(0.05)


@pytest.fixture(params=["redis", "zookeeper"])
def pusher(request: pytest.FixtureRequest, throttled: Cluster) -> Iterator[Pusher]:
    if request.param == "redis":
        yield Pusher(throttled, RedisDomainConfigStore(throttled.client, throttled.frontier,
                                                       normalize=frontier_domain()), None)
        return
    settings = {"ZOOKEEPER_HOSTS": request.getfixturevalue("zookeeper_hosts"),
                "ZOOKEEPER_ASSIGN_PATH": f"/sc-politeness-{uuid.uuid4().hex}/",
                "ZOOKEEPER_ID": "all", "DOMAIN_CONFIG_BACKEND": "zookeeper"}
    store = ZookeeperDomainConfigStore.from_settings(settings, frontier_domain())
    log = open(throttled.workdir / "config-sync.log", "ab")  # noqa: SIM115
    sync = subprocess.Popen([sys.executable, "-m", "scrapy_cluster", "config", "sync"],
                            env={**throttled.env, **settings}, stdout=log, stderr=log,
                            start_new_session=True)
    log.close()  # the child keeps its own copy
    try:
        yield Pusher(throttled, store, sync)
    finally:
        throttled.stop(sync)
        store.close()


def test_a_pushed_limit_or_blacklist_is_obeyed_within_a_second(pusher: Pusher) -> None:
    """Site log of one host: fast (10/s), then pushed to 1 per 2 s, then blacklisted, then
    released. One second after each push the site sees the new rule, on both backends."""
    throttled, host = pusher.cluster, PUSHED_HOST
    process = throttled.start_crawler("link", **THROTTLED_ENV, SCHEDULER_IP_ENABLED="false")
    crawlid = uuid.uuid4().hex
    try:
        pusher.push({host: {"window": 1, "hits": 10, "moderated": True}}, [])
        pusher.wait_applied()
        seed = {"url": throttled.site.site.url(host, "/p/0.html"), "appid": "polite",
                "crawlid": crawlid, "spiderid": "link", "maxdepth": 50}
        throttled.frontier.enqueue_many([seed], dedupe=True)
        fast_from = _first_arrival(throttled.site, time.monotonic() - 0.1)
        time.sleep(max(0.0, fast_from + 3.0 - time.monotonic()))
        slowed = pusher.push({host: {"window": 2, "hits": 1, "moderated": True}}, [])
        time.sleep(5.0)
        banned = pusher.push({host: {"window": 2, "hits": 1, "moderated": True}}, [host])
        time.sleep(3.0)
        released = pusher.push({host: {"window": 1, "hits": 10, "moderated": True}}, [])
        time.sleep(2.0)
        # a phase ends when the next push starts; its rule holds from 1 s after its push ended
        times = sorted(throttled.site.arrivals_snapshot().get(host, []))
    finally:
        throttled.stop(process)
        throttled.frontier.purge("link", "polite", crawlid)

    def count(start: float, end: float) -> int:
        return sum(1 for t in times if start <= t < end)

    assert count(fast_from + 1.0, slowed[0]) >= 10       # about 10/s before
    assert count(slowed[1] + 1.0, banned[0]) <= 3        # 4 s at 1 per 2 s
    assert count(banned[1] + 1.0, released[0]) == 0      # blacklisted
    assert count(released[1] + 0.5, released[1] + 2.0) >= 5  # released: fast again
