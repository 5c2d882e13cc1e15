"""Real component processes with LOG_JSON write the fields log pipelines filter on.

Every JSON line carries ``component``, ``node`` (``<hostname>:<pid>``), ``level`` and
``event``; lines about a request also carry its ``crawlid``, ``appid`` and ``url``.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request, Spider
from scrapy.http import HtmlResponse

from scrapy_cluster.log import configure_logging, request_fields
from scrapy_cluster.settings import load_settings
from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.addresses import LOG_FIELDS
from tests.support.bus_fixtures import REDIS_TEST_CLAIM_IDLE_MS
from tests.support.processes import Processes
from tests.support.services import free_port

PROCESS_MARKS = (pytest.mark.integration, pytest.mark.slow)
HOST = LOG_FIELDS.host(51)


def processes_test(test: Callable[..., None]) -> Callable[..., None]:
    """Marks a test that runs component processes (integration, slow)."""
    for mark in PROCESS_MARKS:
        test = mark(test)
    return test


Record = dict[str, Any]


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    yield started
    started.stop_all()


@pytest.fixture
def env(redis_url: str, redis_client: redis.Redis) -> dict[str, str]:
    """JSON logs, Redis Streams bus on the test Redis, topics of this test only."""
    prefix = f"logf{uuid.uuid4().hex[:8]}"
    return {"REDIS_URL": redis_url, "BUS_BACKEND": "redis", "KAFKA_TOPIC_PREFIX": prefix,
            "KAFKA_INCOMING_TOPIC": f"{prefix}.incoming", "KAFKA_GROUP": prefix,
            "REDIS_STREAM_CLAIM_IDLE_MS": str(REDIS_TEST_CLAIM_IDLE_MS),
            "LOG_JSON": "true", "SC_LOG_JSON": "true", "LOG_LEVEL": "INFO",
            "SC_LOG_LEVEL": "INFO", "CRAWLER_ALLOW_PRIVATE_NETWORKS": "true",
            "PUBLIC_IP": "127.0.0.1", "PUBLIC_IP_URL": "", "REST_HOST": "127.0.0.1",
            "FLASK_PORT": str(free_port()), "STATS_DUMP": "0"}


@pytest.fixture
def site() -> Iterator[SiteServer]:
    with SiteServer(SiteConfig(hosts=(HOST,), pages_per_host=3), free_port()) as server:
        yield server


def json_records(processes: Processes, process: subprocess.Popen[bytes]) -> list[Record]:
    """The JSON lines among a process's output (the crawler's stderr has Scrapy's own)."""
    records = []
    for line in processes.log(process).splitlines():
        if line.startswith("{\""):  # Scrapy pretty-prints dicts with single quotes
            records.append(json.loads(line))
    return records


def wait_for_record(processes: Processes, process: subprocess.Popen[bytes],
                    matches: Callable[[Record], bool], timeout_s: float = 60) -> Record:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [record for record in json_records(processes, process) if matches(record)]
        if found:
            return found[0]
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"no matching JSON line within {timeout_s}s:\n{processes.logs()}")


def feed(env: dict[str, str], request: Record) -> None:
    result = subprocess.run([sys.executable, "-m", "scrapy_cluster", "feed", json.dumps(request)],
                            env={**env, "PATH": ""}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def run_monitors_and_rest(processes: Processes,
                          env: dict[str, str]) -> dict[str, subprocess.Popen[bytes]]:
    """The Kafka Monitor, Redis Monitor and Rest service, each run until it logged its start,
    then all stopped cleanly."""
    started = {"kafka-monitor": processes.start(env, "kafka-monitor", "run"),
               "redis-monitor": processes.start(env, "redis-monitor"),
               "rest": processes.start(env, "rest")}
    for process in started.values():
        wait_for_record(processes, process, lambda r: "starting" in r["message"]
                        or "listening" in r["message"])
    processes.stop_all()
    return started


def node_of(process: subprocess.Popen[bytes]) -> str:
    return f"{socket.gethostname()}:{process.pid}"


@processes_test
def test_kafka_monitor_line_about_a_fed_crawl_names_the_request(
        processes: Processes, env: dict[str, str]) -> None:
    monitor = processes.start(env, "kafka-monitor", "run")
    wait_for_record(processes, monitor, lambda r: r["message"] == "Kafka Monitor starting")
    url = f"http://{HOST}:1/p/0.html"
    feed(env, {"url": url, "appid": "logapp", "crawlid": "logcrawl1"})
    record = wait_for_record(processes, monitor, lambda r: r["event"] == "Added crawl to Redis")
    assert {key: record[key] for key in ("component", "node", "level", "crawlid", "appid",
                                         "url")} == {
        "component": "kafka-monitor", "node": node_of(monitor), "level": "INFO",
        "crawlid": "logcrawl1", "appid": "logapp", "url": url}


@processes_test
def test_crawler_line_about_a_refused_request_names_the_request(
        processes: Processes, env: dict[str, str], site: SiteServer) -> None:
    monitor = processes.start(env, "kafka-monitor", "run")
    crawler = processes.start(env, "crawler", "--spider", "link")
    forbidden = site.site.url(HOST, "/private/secret.html")  # robots.txt refuses it
    feed(env, {"url": forbidden, "appid": "logapp", "crawlid": "logcrawl2", "maxdepth": 0})
    record = wait_for_record(processes, crawler, lambda r: r["event"] == "request failed")
    assert {key: record[key] for key in ("component", "node", "level", "crawlid", "appid",
                                         "url")} == {
        "component": "crawler", "node": node_of(crawler), "level": "INFO",
        "crawlid": "logcrawl2", "appid": "logapp", "url": forbidden}
    assert monitor.poll() is None


@processes_test
def test_every_component_line_carries_component_node_level_and_event(
        processes: Processes, env: dict[str, str]) -> None:
    started = run_monitors_and_rest(processes, env)
    for component, process in started.items():
        records = json_records(processes, process)
        assert records, component
        for record in records:
            assert (record["component"], record["node"]) == (component, node_of(process))
            assert record["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
            assert isinstance(record["event"], str) and record["event"]
        events = [record["event"] for record in records]
        assert "%s stopped" in events, (component, events)


@processes_test
def test_every_line_of_the_monitors_and_the_rest_service_is_json(
        processes: Processes, env: dict[str, str]) -> None:
    """Their modules and libraries (uvicorn, the bus) write through the same JSON handler: no
    line of human text among them, and uvicorn's own lines carry the component too."""
    started = run_monitors_and_rest(processes, {**env, "LOG_LEVEL": "DEBUG"})
    loggers: dict[str, set[str]] = {}
    for component, process in started.items():
        lines = [line for line in processes.log(process).splitlines() if line.strip()]
        records = [json.loads(line) for line in lines]  # fails on any line that is not JSON
        assert all(record["component"] == component for record in records), component
        loggers[component] = {record["logger"] for record in records}
    assert "uvicorn.error" in loggers["rest"], loggers


# --- units: the fields themselves ----------------------------------------------------------


def test_request_fields_keep_what_every_request_shares() -> None:
    one = {"url": "http://a.example/", "appid": "app", "crawlid": "c1", "spiderid": "link",
           "maxdepth": 2}
    other = {**one, "url": "http://b.example/"}
    assert request_fields([one]) == {"url": "http://a.example/", "appid": "app",
                                     "crawlid": "c1", "spiderid": "link"}
    assert request_fields([one, other]) == {"appid": "app", "crawlid": "c1", "spiderid": "link"}
    assert request_fields([one, {"url": "http://a.example/"}]) == {"url": "http://a.example/"}
    assert request_fields([]) == {}


def test_json_line_lifts_a_request_extra_and_keeps_explicit_fields(
        capsys: pytest.CaptureFixture[str]) -> None:
    settings = load_settings("redis-monitor", environ={},
                             overrides={"LOGGER_NAME": "test-log-fields", "LOG_JSON": True})
    logger = configure_logging(settings)
    try:
        logger.error("plugin %s failed: %s", "scraper", "boom", extra={
            "request": {"url": "http://a.example/", "appid": "app", "crawlid": "c1"}})
        logger.info("tick", extra={"event": "monitoring_update", "component": "custom"})
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
    failed, tick = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (failed["event"], failed["component"], failed["url"], failed["appid"],
            failed["crawlid"]) == ("plugin %s failed: %s", "redis-monitor",
                                   "http://a.example/", "app", "c1")
    assert (tick["event"], tick["component"]) == ("monitoring_update", "custom")


# --- Scrapy's records: the request, response or spider they are about ----------------------

LoggerFactory = Callable[[], logging.Logger]
CRAWL_META = {"crawlid": "c1", "appid": "app", "spiderid": "link", "maxdepth": 1}


@pytest.fixture
def crawler_json_logger(request: pytest.FixtureRequest) -> Iterator[LoggerFactory]:
    """Configures the crawler's JSON logger (SC_LOG_*), private to the test, when called
    (inside the test, so that it writes to the stdout ``capsys`` captures)."""
    name = f"test-log-fields.{request.node.name}"

    def configure() -> logging.Logger:
        settings = load_settings("crawler", environ={}, overrides={
            "SC_LOGGER_NAME": name, "SC_LOG_JSON": True, "SC_LOG_LEVEL": "DEBUG"})
        return configure_logging(settings, prefix="SC_")

    yield configure
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


def logged_line(capsys: pytest.CaptureFixture[str]) -> Record:
    (line,) = capsys.readouterr().out.splitlines()
    record: Record = json.loads(line)
    return record


def test_json_line_about_a_scrapy_request_argument_names_its_crawl_and_url(
        crawler_json_logger: LoggerFactory, capsys: pytest.CaptureFixture[str]) -> None:
    request = Request("http://a.example/page", meta=CRAWL_META)
    crawler_json_logger().debug("Crawled (%(status)s) %(request)s",  # as Scrapy's engine logs
                                {"status": 200, "request": request})
    record = logged_line(capsys)
    assert {key: record.get(key) for key in ("component", "crawlid", "appid", "spiderid",
                                             "url", "event")} == {
        "component": "crawler", "crawlid": "c1", "appid": "app", "spiderid": "link",
        "url": "http://a.example/page", "event": "Crawled (%(status)s) %(request)s"}


def test_json_line_about_a_scrapy_response_takes_its_url_and_its_request_meta(
        crawler_json_logger: LoggerFactory, capsys: pytest.CaptureFixture[str]) -> None:
    request = Request("http://a.example/old", meta=CRAWL_META)
    response = HtmlResponse("http://a.example/new", request=request, body=b"<html></html>")
    crawler_json_logger().info("got a page", extra={"response": response})
    record = logged_line(capsys)
    assert (record["url"], record["crawlid"], record["appid"]) == (
        "http://a.example/new", "c1", "app")


def test_json_line_about_a_response_without_its_request_has_its_url_only(
        crawler_json_logger: LoggerFactory, capsys: pytest.CaptureFixture[str]) -> None:
    response = HtmlResponse("http://a.example/alone", body=b"<html></html>")
    crawler_json_logger().info("got %(response)s", {"response": response})
    record = logged_line(capsys)
    assert record["url"] == "http://a.example/alone"
    assert "crawlid" not in record and "appid" not in record


def test_json_line_about_a_spider_names_its_spiderid(
        crawler_json_logger: LoggerFactory, capsys: pytest.CaptureFixture[str]) -> None:
    crawler_json_logger().info("Spider opened", extra={"spider": Spider(name="wandering")})
    assert logged_line(capsys)["spiderid"] == "wandering"


def test_explicit_extra_wins_over_a_scrapy_request_argument(
        crawler_json_logger: LoggerFactory, capsys: pytest.CaptureFixture[str]) -> None:
    request = Request("http://a.example/page", meta=CRAWL_META)
    crawler_json_logger().info("retrying %(request)s", {"request": request},
                               extra={"url": "http://a.example/other"})
    assert logged_line(capsys)["url"] == "http://a.example/other"
