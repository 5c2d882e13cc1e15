"""With SC_LOG_JSON, a real crawler process of either engine writes nothing but JSON lines.

One crawl per engine (``scrapy-cluster crawler --spider link`` and ``... --engine fast``, with
``SC_LOG_JSON=true`` and ``SC_LOG_LEVEL=DEBUG``) of a small local site, on the session's
redis-server and the Redis Streams bus; the crawler is then stopped with SIGTERM and every line
of its standard output and error is read back. Scrapy's own loggers (``scrapy.*``, ``twisted``)
and the engines' modules must write the same fields as the other components.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.addresses import CRAWLER_JSON_LOGS
from tests.support.contract_crawl import APPID, ENGINES, CrawlRig
from tests.support.contract_site import ContractSite

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOST = CRAWLER_JSON_LOGS.host(131)
PATHS = ("/j/index.html", "/j/a.html", "/j/b.html", "/j/c.html")
CLUSTER_FIELDS = ("component", "node", "event", "level", "logger", "message")
LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"})


@dataclass(frozen=True)
class JsonCrawl:
    """What one stopped crawler wrote: every output line, and the crawl it was given."""

    engine: str
    pid: int
    exit_code: int | None
    lines: list[str]
    crawlid: str
    urls: frozenset[str]

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]


@pytest.fixture(scope="module", params=ENGINES)
def crawl(request: pytest.FixtureRequest, redis_url: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[JsonCrawl]:
    """One crawler of the engine crawls the site with JSON logs at DEBUG and is stopped."""
    engine = str(request.param)
    redis.Redis.from_url(redis_url).flushdb()
    site = ContractSite((HOST,)).start()
    site.add_html(HOST, PATHS[0], PATHS[1:])
    for path in PATHS[1:]:
        site.add_html(HOST, path, [PATHS[0]])
    rig = CrawlRig(tmp_path_factory.mktemp(f"json-logs-{engine}"), redis_url, engine,
                   prefix=f"jsonlogs{uuid.uuid4().hex[:8]}",
                   env={"SC_LOG_JSON": "true", "SC_LOG_LEVEL": "DEBUG"})
    try:
        process = rig.start()
        urls = frozenset(site.url(HOST, path) for path in PATHS)
        crawlid = rig.feed(site.url(HOST, PATHS[0]), maxdepth=1)
        rig.collect(crawlid, expected_urls=urls)
        exit_code = rig.stop(process)
        log_path = rig.processes[0][1]
        yield JsonCrawl(engine, process.pid, exit_code,
                        log_path.read_text(errors="replace").splitlines(), crawlid, urls)
    finally:
        rig.close()
        site.stop()


def test_crawler_stops_cleanly_after_writing_json_logs(crawl: JsonCrawl) -> None:
    assert crawl.exit_code == 0, "\n".join(crawl.lines[-20:])


def test_every_output_line_is_a_json_object_with_the_cluster_fields(crawl: JsonCrawl) -> None:
    assert crawl.lines
    for line in crawl.lines:
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"{crawl.engine} crawler wrote a line that is not JSON: {line!r}")
        assert isinstance(record, dict), line
        missing = [field for field in CLUSTER_FIELDS if not record.get(field)]
        assert not missing, f"{line!r} lacks {missing}"
        assert record["component"] == "crawler", line
        assert record["node"].endswith(f":{crawl.pid}"), line
        assert record["level"] in LEVELS, line


def test_crawler_modules_and_the_engine_write_json(crawl: JsonCrawl) -> None:
    loggers = {record["logger"] for record in crawl.records()}
    engine_prefix = "scrapy." if crawl.engine == "scrapy" else "scrapy_cluster.crawler.fast."
    assert any(name.startswith("scrapy_cluster.crawler.") for name in loggers), loggers
    assert any(name.startswith(engine_prefix) for name in loggers), loggers


def test_a_line_about_a_crawled_page_names_its_crawl_and_url(crawl: JsonCrawl) -> None:
    about_pages = [record for record in crawl.records()
                   if record.get("crawlid") == crawl.crawlid and record.get("url") in crawl.urls]
    assert about_pages, f"no line names crawl {crawl.crawlid} and one of its pages"
    assert {record.get("appid") for record in about_pages} == {APPID}
    assert {record["url"] for record in about_pages} == crawl.urls


def test_no_record_is_written_twice(crawl: JsonCrawl) -> None:
    repeated = {line: count for line, count in Counter(crawl.lines).items() if count > 1}
    assert not repeated


# --- without SC_LOG_JSON: the human format, as before ---------------------------------------

HUMAN_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(,\d{3})? \[[\w.-]+\] (DEBUG|INFO|WARNING|ERROR|CRITICAL): ")
STARTED_LINE = {"scrapy": "[scrapy.core.engine] INFO: Spider opened",
                "fast": "[scrapy_cluster.crawler.fast.app] INFO: fast engine started"}


@pytest.mark.parametrize("engine", ENGINES)
def test_without_log_json_the_crawler_writes_the_human_format(
        engine: str, redis_url: str, tmp_path: Path) -> None:
    rig = CrawlRig(tmp_path, redis_url, engine, prefix=f"humanlogs{uuid.uuid4().hex[:8]}",
                   env={"SC_LOG_LEVEL": "INFO"})
    try:
        process = rig.start()
        assert rig.stop(process) == 0
        lines = rig.processes[0][1].read_text(errors="replace").splitlines()
    finally:
        rig.close()
    assert any(STARTED_LINE[engine] in line for line in lines), lines
    assert not [line for line in lines if line.startswith('{"')]  # Scrapy prints {'...
    assert all(HUMAN_LINE.match(line) for line in lines if line[:1].isdigit()), lines
