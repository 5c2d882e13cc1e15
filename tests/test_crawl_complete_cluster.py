"""Crawl completion end to end: real redis-server, a real Kafka-protocol broker (tansu), real
crawler processes, two Redis Monitor processes and the generated test site.

Every crawl here is watched on the crawled topic and on the outbound topic by one reader
loop, which stamps each message with the moment it was read; the completion bound of the
issue (the notice within CRAWL_COMPLETE_GRACE_S + 2 s of the last page) is measured between
those stamps.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig
from tests.support.cluster import WHOLE_GRAPH_DEPTH, Cluster, running_cluster
from tests.support.monitors import monitors_up
from tests.support.processes import Processes

pytestmark = pytest.mark.integration

GRACE_S = 1.5
STATE_TTL_S = 6
SLOW_PAGE_S = GRACE_S + 1.5
LEASE_TIMEOUT_S = 5
CRAWL_TIMEOUT_S = 60.0
QUIET_S = GRACE_S + 2.5
"""How long after a notice the readers keep watching for a second one."""


class Watch:
    """Reads the crawled and outbound topics; every message kept with its read time."""

    def __init__(self, settings: Any) -> None:
        prefix = str(settings["KAFKA_TOPIC_PREFIX"])
        self.bus = create_bus(settings)
        self.crawled_topic = topics.crawled_firehose(prefix)
        self.outbound_topic = topics.outbound_firehose(prefix)
        self.readers = {name: self.bus.reader([name], from_beginning=True)
                        for name in (self.crawled_topic, self.outbound_topic)}
        self.seen: dict[str, list[tuple[float, dict[str, Any]]]] = {
            name: [] for name in self.readers}

    def poll(self) -> None:
        for name, reader in self.readers.items():
            batch = [message.value for message in reader.poll(500, 0.05) if message.value]
            read_at = time.monotonic()
            self.seen[name] += [(read_at, value) for value in batch]

    def until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            assert time.monotonic() < deadline, f"{what} not seen in {timeout_s} s"
            self.poll()

    def watch(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll()

    def items(self, crawlid: str) -> list[tuple[float, dict[str, Any]]]:
        return [(at, item) for at, item in self.seen[self.crawled_topic]
                if item.get("crawlid") == crawlid]

    def answers(self, crawlid: str, action: str) -> list[tuple[float, dict[str, Any]]]:
        return [(at, answer) for at, answer in self.seen[self.outbound_topic]
                if answer.get("crawlid") == crawlid and answer.get("action") == action]

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()
        self.bus.close()


class Setup:
    def __init__(self, cluster: Cluster, processes: Processes, env: dict[str, str]) -> None:
        self.cluster, self.processes, self.env = cluster, processes, env
        self.settings = load_settings("redis-monitor", environ={}, overrides=env)
        self.watch = Watch(self.settings)

    def start_monitors(self, count: int) -> None:
        for _ in range(count):
            self.processes.start(self.env, "redis-monitor")
        deadline = time.monotonic() + 30
        while len(monitors_up(self.cluster.client)) < count:
            assert time.monotonic() < deadline, f"monitors not up\n{self.processes.logs()}"
            time.sleep(0.1)

    def start_crawler(self, **env: str) -> Any:
        return self.cluster.start_crawler("link", **{**self.env, **env})

    def seed(self, url: str, **fields: Any) -> str:
        crawlid = uuid.uuid4().hex
        request = {"url": url, "appid": "done", "crawlid": crawlid, "spiderid": "link", **fields}
        assert self.cluster.frontier.enqueue_many([request], dedupe=True).queued == 1
        return crawlid

    def completed(self, crawlid: str) -> tuple[float, dict[str, Any]]:
        """The crawl's notice, once seen, after QUIET_S more of watching for a second one."""
        self.watch.until(lambda: bool(self.watch.answers(crawlid, "complete")), CRAWL_TIMEOUT_S,
                         f"the complete notice of {crawlid}")
        self.watch.watch(QUIET_S)
        notices = self.watch.answers(crawlid, "complete")
        assert len(notices) == 1, notices
        return notices[0]

    def ask(self, action: str, crawlid: str) -> dict[str, Any]:
        uid = uuid.uuid4().hex
        payload = {"action": action, "appid": "done", "spiderid": "link", "crawlid": crawlid,
                   "uuid": uid}
        job_key = (keys.info_job if action == "info" else keys.stop_job)("link", "done",
                                                                         crawlid, uid)
        pipe = self.cluster.client.pipeline()
        JobWriter.from_settings(self.settings).queue_job(pipe, action, job_key, payload)
        pipe.execute()
        found: list[dict[str, Any]] = []

        def answered() -> bool:
            found[:] = [answer for _, answer in self.watch.seen[self.watch.outbound_topic]
                        if answer.get("uuid") == uid]
            return bool(found)

        self.watch.until(answered, 30, f"the {action} answer")
        return found[0]


def environment(cluster: Cluster, kafka_bootstrap: str) -> dict[str, str]:
    return {"REDIS_URL": cluster.redis_server.url, "BUS_BACKEND": "kafka",
            "KAFKA_HOSTS": kafka_bootstrap, "KAFKA_TOPIC_PREFIX": f"cc{uuid.uuid4().hex[:8]}",
            "CRAWL_COMPLETE_GRACE_S": str(GRACE_S), "CRAWL_STATE_TTL": str(STATE_TTL_S),
            "LEASE_TIMEOUT": str(LEASE_TIMEOUT_S), "STATS_DUMP": "0",
            "REDIS_LOCK_EXPIRATION": "2", "SC_LOG_LEVEL": "WARNING"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("crawl-complete")
    config = SiteConfig(pages_per_host=15, links_per_page=3, page_bytes=600,
                        slow_page_s=SLOW_PAGE_S)
    with running_cluster(tmp, config) as cluster:
        processes = Processes(tmp)
        running = Setup(cluster, processes, environment(cluster, kafka_bootstrap))
        try:
            running.start_monitors(2)
            running.start_crawler()
            running.start_crawler()
            yield running
        finally:
            running.watch.close()
            processes.stop_all()


def test_a_crawl_ends_with_one_notice_whose_totals_match_the_crawled_topic(
        setup: Setup) -> None:
    seed = setup.cluster.site.site.url("127.0.0.2", "/p/0.html")
    expected = setup.cluster.site.site.expected_urls(seed, WHOLE_GRAPH_DEPTH)
    crawlid = setup.seed(seed, maxdepth=WHOLE_GRAPH_DEPTH)
    notice_at, notice = setup.completed(crawlid)
    items = setup.watch.items(crawlid)
    assert {item["url"] for _, item in items} == expected
    last_page_at = max(at for at, _ in items)
    assert last_page_at <= notice_at <= last_page_at + GRACE_S + 2.0, \
        f"notice read {notice_at - last_page_at:.2f} s after the last page"
    statuses = Counter(str(item["status_code"]) for _, item in items)
    assert notice["totals"] == {
        "fetched": len(items), "by_status": dict(statuses), "errors": 0, "retried": 0,
        "filtered": notice["totals"]["filtered"], "duplicates": notice["totals"]["duplicates"],
        "delivered": len(items)}
    assert notice["started"] <= notice["finished"] <= notice["server_time"] + 1
    assert setup.ask("info", crawlid)["status"] == "complete"


def test_pages_slower_than_the_grace_period_do_not_complete_the_crawl_early(
        setup: Setup) -> None:
    crawlid = setup.seed(setup.cluster.site.site.url("127.0.0.3", "/special/slow.html"))
    notice_at, notice = setup.completed(crawlid)
    ((page_at, _),) = setup.watch.items(crawlid)
    assert page_at <= notice_at, "complete before the slow page was delivered"
    assert notice["totals"]["delivered"] == 1


def test_a_stopped_crawl_gets_its_stop_answer_and_never_a_complete(setup: Setup) -> None:
    crawlid = setup.seed(setup.cluster.site.site.url("127.0.0.3", "/special/slow.html"))
    answer = setup.ask("stop", crawlid)
    assert (answer["action"], answer["crawlid"]) == ("stop", crawlid)
    assert setup.ask("info", crawlid)["status"] == "stopped"  # asked well within STATE_TTL_S
    setup.watch.watch(SLOW_PAGE_S + GRACE_S + 2.0)
    assert setup.watch.answers(crawlid, "complete") == []


def test_a_crawl_seeded_again_after_completing_completes_again(setup: Setup) -> None:
    site = setup.cluster.site.site
    crawlid = setup.seed(site.url("127.0.0.2", "/p/1.html"), maxdepth=0)
    setup.completed(crawlid)
    request = {"url": site.url("127.0.0.2", "/p/2.html"), "appid": "done", "crawlid": crawlid,
               "spiderid": "link", "maxdepth": 0}
    assert setup.cluster.frontier.enqueue_many([request], dedupe=True).queued == 1
    setup.watch.until(lambda: len(setup.watch.answers(crawlid, "complete")) == 2,
                      CRAWL_TIMEOUT_S, "the second notice")
    setup.watch.watch(QUIET_S)
    first, second = (notice for _, notice in setup.watch.answers(crawlid, "complete"))
    assert (first["totals"]["delivered"], second["totals"]["delivered"]) == (1, 2)
    assert second["finished"] > first["finished"]


def test_a_finished_crawl_leaves_no_key_after_the_state_ttl(setup: Setup) -> None:
    crawlid = setup.seed(setup.cluster.site.site.url("127.0.0.2", "/p/3.html"), maxdepth=1)
    setup.completed(crawlid)
    client = setup.cluster.client
    assert list(client.scan_iter(f"*{crawlid}*")), "the crawl's keys exist before the TTL"
    deadline = time.monotonic() + STATE_TTL_S + 5
    while list(client.scan_iter(f"*{crawlid}*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(client.scan_iter(f"*{crawlid}*")) == []
    assert not client.sismember(keys.app_crawls("link", "done"), crawlid)
    assert client.zscore(keys.crawls_idle(), f"link\t{crawlid}") is None


@pytest.mark.reliability  # a kill story: make test-reliability
def test_a_crawl_completes_once_after_a_crawler_is_killed_mid_crawl(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    config = SiteConfig(page_delay_s=0.4, pages_per_host=12)
    with running_cluster(tmp_path, config) as cluster:
        processes = Processes(tmp_path)
        running = Setup(cluster, processes, environment(cluster, kafka_bootstrap))
        try:
            running.start_monitors(2)
            victim = running.start_crawler(CRAWLER_CONCURRENCY="2")
            seed = cluster.site.site.url("127.0.0.2", "/p/0.html")
            expected = cluster.site.site.expected_urls(seed, WHOLE_GRAPH_DEPTH)
            crawlid = running.seed(seed, maxdepth=WHOLE_GRAPH_DEPTH)
            running.watch.until(lambda: len(running.watch.items(crawlid)) >= 2, 30,
                                "two pages of the crawl")
            leased = cluster.frontier.crawl_info("link", "done", crawlid).in_flight
            cluster.stop(victim, signal.SIGKILL)
            running.start_crawler()
            _, notice = running.completed(crawlid)
            urls = {item["url"] for _, item in running.watch.items(crawlid)}
        finally:
            running.watch.close()
            processes.stop_all()
    assert leased > 0, "the victim held no lease when it was killed"
    assert urls == expected
    assert notice["totals"]["delivered"] >= len(expected)
