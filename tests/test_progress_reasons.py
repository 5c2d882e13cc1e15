"""A crawl that does nothing says why (issue 31, item 3), in every reader of the cluster: the
frontier sums each reason of the URL funnels, and the progress line, the dashboard, ``info``,
``/metrics`` and the feed warnings name refused and filtered URLs and spiders no live crawler
runs. Against a real Redis written by the real frontier and heartbeats; the end-to-end run of
``up`` is in ``test_crawl_explained.py``."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.embedded.progress import ProgressLoop, ProgressPolicy, progress_text
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.frontier.model import CrawlFunnel, DispatchView
from scrapy_cluster.rest.dashboard import classify
from scrapy_cluster.rest.dashboard.snapshot import SnapshotBuilder
from scrapy_cluster.rest.metrics import MetricsReader
from scrapy_cluster.settings import load_settings
from scrapy_cluster.stats import WindowedStats
from scrapy_cluster.stats.coverage import SpiderCoverage, missing_spider_warning
from scrapy_cluster.stats.progress import ProgressReader, ProgressReading
from scrapy_cluster.stats.reasons import NO_CRAWLER, DroppedUrls, crawl_reason

pytestmark = pytest.mark.integration


def settings() -> dict[str, Any]:
    return dict(load_settings("rest", environ={}, settings_file=None,
                              overrides={"BUS_BACKEND": "redis"}))


def crawl(url: str, spiderid: str = "link", crawlid: str = "c1") -> dict[str, Any]:
    return {"url": url, "appid": "app", "crawlid": crawlid, "spiderid": spiderid}


def refuse_and_filter(frontier: Frontier) -> None:
    """What a crawler acknowledges after the SSRF guard refused two pages and robots.txt one,
    with five offsite links dropped: the funnel counts ride on the lease acks."""
    frontier.enqueue_many([crawl(f"http://127.0.0.{i}/") for i in (1, 2, 3)])
    leased = frontier.pop(DispatchView("link"), 3)
    frontier.ack([lease.lease_id for lease in leased.requests], funnel={
        ("link", "c1"): {"filtered:ssrf": 2, "filtered:robots": 1, "filtered:offsite": 5,
                         "submitted": 5}})


def crawler_heartbeat(client: redis.Redis, spiderid: str, node: str = "n1") -> None:
    WindowedStats.from_settings(settings(), client, key_prefix=f"stats:crawler:h:{spiderid}") \
        .heartbeat("h", spiderid, node)


# --- the frontier's totals --------------------------------------------------------------------

def test_the_frontier_sums_every_crawls_reasons_per_spider(redis_client: redis.Redis) -> None:
    refuse_and_filter(Frontier.from_settings(settings(), redis_client))
    totals = redis_client.hgetall(keys.funnel_filtered_totals())
    assert {keys.parse_funnel_filtered_field(name): int(count)
            for name, count in totals.items()} == {
        ("link", "ssrf"): 2, ("link", "robots"): 1, ("link", "offsite"): 5}


def test_refused_and_filtered_reasons_are_told_apart_largest_first() -> None:
    dropped = DroppedUrls.from_counts({"offsite": 5, "robots": 1, "ssrf": 2, "maxdepth": 0})
    assert (dropped.refused, dropped.filtered) == ({"ssrf": 2, "robots": 1}, {"offsite": 5})
    assert dropped.text() == "3 refused (ssrf 2, robots 1)  5 filtered (offsite 5)"
    assert DroppedUrls().text() == ""


# --- the progress line ------------------------------------------------------------------------

def test_progress_line_shows_refused_and_filtered_urls(redis_client: redis.Redis) -> None:
    refuse_and_filter(Frontier.from_settings(settings(), redis_client))
    crawler_heartbeat(redis_client, "link")
    reading = ProgressReader.from_settings(settings(), redis_client).read()
    assert progress_text(reading, 0.0, (1, 1)) == (
        "0 pages (0.0/s)  backlog 0  errors 0  crawlers 1/1  "
        "3 refused (ssrf 2, robots 1)  5 filtered (offsite 5)")


def test_progress_line_names_a_spider_no_crawler_runs(redis_client: redis.Redis) -> None:
    frontier = Frontier.from_settings(settings(), redis_client)
    frontier.enqueue_many([crawl("http://a.test/", "nosuchspider"), crawl("http://b.test/")])
    crawler_heartbeat(redis_client, "link")
    reading = ProgressReader.from_settings(settings(), redis_client).read()
    assert (reading.backlog, reading.unserved) == (2, {"nosuchspider": 1})
    assert progress_text(reading, None, (1, 1)).endswith(
        "crawlers 1/1  no crawler for nosuchspider (1 queued)")


class Events:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def event(self, verb: str, text: str, *, component: str | None = None) -> None:
        self.lines.append(text)


class Still:
    """A reader of a cluster where nothing changes."""

    def read(self) -> ProgressReading:
        return ProgressReading(at_s=0.0, pages=0, errors=0, backlog=0)


def test_progress_line_repeats_an_unchanged_line_once_a_minute() -> None:
    now = [0.0]
    output = Events()
    loop = ProgressLoop(Still(), output, ProgressPolicy(interval_s=5, repeat_after_s=60),
                        crawlers=lambda: (1, 1), clock=lambda: now[0])
    for second in range(0, 125, 5):
        now[0] = float(second)
        loop.report_once()
    assert len(output.lines) == 3  # at 0, 60 and 120 s
    assert set(output.lines) == {"0 pages (-/s)  backlog 0  errors 0  crawlers 1/1"}


# --- the dashboard ----------------------------------------------------------------------------

def test_dashboard_says_no_crawler_for_a_domain_whose_spider_nobody_runs(
        redis_client: redis.Redis) -> None:
    frontier = Frontier.from_settings(settings(), redis_client)
    frontier.enqueue_many([crawl("http://a.test/", "nosuchspider"), crawl("http://b.test/")])
    crawler_heartbeat(redis_client, "link")
    snapshot = SnapshotBuilder(redis_client, frontier, settings()).build()
    verdicts = {row["domain"]: row["bottleneck"] for row in snapshot.domains}
    assert verdicts["a.test"] == classify.NO_CRAWLER
    assert verdicts["b.test"] != classify.NO_CRAWLER
    assert snapshot.overview["summary"]["unserved"] == {"nosuchspider": 1}


def test_dashboard_summary_counts_refused_and_filtered_urls(redis_client: redis.Redis) -> None:
    frontier = Frontier.from_settings(settings(), redis_client)
    refuse_and_filter(frontier)
    summary = SnapshotBuilder(redis_client, frontier, settings()).build().overview["summary"]
    assert (summary["refused"], summary["filtered"]) == ({"ssrf": 2, "robots": 1},
                                                         {"offsite": 5})


def test_no_crawler_comes_after_pauses_and_an_empty_queue() -> None:
    common: dict[str, Any] = {"rate_rps": 0.0, "limit_rps": 1.0, "ready_at_ms": None,
                              "now_ms": 0.0, "served": False}
    assert classify.bottleneck(backlog=3, **common) == classify.NO_CRAWLER
    assert classify.bottleneck(backlog=0, **common) == classify.OUT_OF_WORK
    assert classify.bottleneck(backlog=3, state=classify.PAUSED, **common) == classify.PAUSED


# --- metrics ----------------------------------------------------------------------------------

def test_metrics_read_the_dropped_urls_in_the_first_round_trip(redis_client: redis.Redis) -> None:
    frontier = Frontier.from_settings(settings(), redis_client)
    refuse_and_filter(frontier)
    reading = MetricsReader(redis_client, frontier, heartbeat_timeout_s=120).read()
    assert reading.filtered == {("link", "ssrf"): 2, ("link", "robots"): 1,
                                ("link", "offsite"): 5}


# --- info and feed ----------------------------------------------------------------------------

def test_info_reason_for_a_crawl_with_work_and_no_crawler() -> None:
    assert crawl_reason(status="running", pending=1, funnel=CrawlFunnel(),
                        served=False) == NO_CRAWLER
    assert crawl_reason(status="running", pending=1, funnel=CrawlFunnel(), served=True) is None


def test_info_reason_for_a_crawl_that_ended_with_everything_refused() -> None:
    refused = CrawlFunnel(submitted=1, queued=1, filtered={"ssrf": 1})
    assert crawl_reason(status="complete", pending=0, funnel=refused, served=True) == \
        "nothing fetched: 1 refused (ssrf 1)"
    fetched = CrawlFunnel(submitted=1, queued=1, fetched={"200": 1}, filtered={"offsite": 3})
    assert crawl_reason(status="complete", pending=0, funnel=fetched, served=True) is None


def test_feed_warns_only_for_a_crawl_of_a_spider_nobody_runs() -> None:
    live = {"link"}
    assert missing_spider_warning(crawl("http://a.test/"), live) is None
    assert missing_spider_warning({"url": "http://a.test/", "appid": "a", "crawlid": "c"},
                                  live) is None  # the schema's default spider: link
    assert missing_spider_warning({"action": "info", "spiderid": "nosuchspider"}, live) is None
    warning = missing_spider_warning(crawl("http://a.test/", "nosuchspider"), live)
    assert warning is not None and warning.startswith(NO_CRAWLER)
    assert "'nosuchspider'" in warning


def test_feed_coverage_reads_the_heartbeats_once_per_interval(redis_client: redis.Redis) -> None:
    now = [1000.0]
    crawler_heartbeat(redis_client, "link")
    redis_client.zadd(keys.heartbeat_index("crawler"), {"h:link:n1": now[0]})
    coverage = SpiderCoverage(redis_client, heartbeat_timeout_s=120, max_age_s=5,
                              clock=lambda: now[0])
    assert coverage.warnings(crawl("http://a.test/", "nosuchspider")) == []  # nothing read yet
    for _ in range(100):
        if not coverage.fresh():
            coverage.refresh()
        assert coverage.warnings(crawl("http://a.test/")) == []
        assert len(coverage.warnings(crawl("http://a.test/", "nosuchspider"))) == 1
    now[0] += 5
    coverage.refresh()
    assert coverage.reads == 2
