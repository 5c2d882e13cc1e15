"""The crawl request's ``recrawl`` object (docs/api.md, "Re-crawls"): what the schema and the
crawl plugin's own check accept and refuse, with the exact reasons; and the operators'
per-domain default (the domain configuration document) given by the Kafka Monitor's crawl
plugin to requests without one, read from a real Redis."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from scrapy_cluster.api import recrawl as recrawl_api
from scrapy_cluster.api.validation import Accepted, RequestValidator
from scrapy_cluster.cli import main
from scrapy_cluster.domain_config.document import frontier_domain
from scrapy_cluster.domain_config.redis_store import read_document_if_changed
from scrapy_cluster.domain_config.store import VersionedDocument
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.kafka_monitor.domain_defaults import DomainDefaults
from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes
from scrapy_cluster.kafka_monitor.plugins import ScraperHandler
from scrapy_cluster.settings import Settings, load_settings

LOGGER = logging.getLogger("test-recrawl-api")
CRAWL = {"url": "http://www.dmoz.org/", "appid": "testapp", "crawlid": "abc123"}
YEAR_S = 365 * 24 * 3600
FILLED = {"links": True, "not_modified": "item"}


@pytest.fixture(scope="module")
def validator() -> RequestValidator:
    settings = load_settings("kafka-monitor", environ={})
    return build_validator(plugin_classes(settings), settings)


def recrawl_of(validator: RequestValidator, recrawl: Any) -> dict[str, Any]:
    match = validator.match({**CRAWL, "recrawl": recrawl})
    assert isinstance(match, Accepted), match.reason
    assert match.plugin == "ScraperHandler"
    result: dict[str, Any] = match.message["recrawl"]
    return result


def reason_for(validator: RequestValidator, recrawl: Any) -> str:
    match = validator.match({**CRAWL, "recrawl": recrawl})
    assert not isinstance(match, Accepted), f"unexpectedly accepted: {match.message}"
    return match.reason


# --- the request's recrawl ------------------------------------------------------------------

@pytest.mark.parametrize(("recrawl", "filled"), [
    ({"interval": 3600}, {"interval": 3600, **FILLED}),
    ({"interval": 1}, {"interval": 1, **FILLED}),
    ({"interval": YEAR_S}, {"interval": YEAR_S, **FILLED}),
    ({"adaptive": {"min": 60, "max": 86400}},
     {"adaptive": {"min": 60, "max": 86400, "inc": 0.4, "dec": 0.2, "estimate": False},
      **FILLED}),
    ({"adaptive": {"min": 60, "max": 60, "inc": 0, "dec": 0}},
     {"adaptive": {"min": 60, "max": 60, "inc": 0, "dec": 0, "estimate": False}, **FILLED}),
    ({"interval": 600, "adaptive": {"min": 60, "max": 3600, "inc": 1.5, "dec": 0.99}},
     {"interval": 600, "adaptive": {"min": 60, "max": 3600, "inc": 1.5, "dec": 0.99,
                                    "estimate": False},
      **FILLED}),
    ({"interval": 60, "max_cycles": 1, "links": False, "not_modified": "none"},
     {"interval": 60, "max_cycles": 1, "links": False, "not_modified": "none"}),
    ({"interval": 60, "max_cycles": 1_000_000}, {"interval": 60, "max_cycles": 1_000_000,
                                                 **FILLED}),
])
def test_a_valid_recrawl_is_accepted_with_its_defaults_filled(
        validator: RequestValidator, recrawl: dict[str, Any], filled: dict[str, Any]) -> None:
    assert recrawl_of(validator, recrawl) == filled


def test_an_until_in_the_future_is_accepted(validator: RequestValidator) -> None:
    until = int(time.time()) + 3600
    assert recrawl_of(validator, {"interval": 60, "until": until}) == {
        "interval": 60, "until": until, **FILLED}


@pytest.mark.parametrize(("recrawl", "reason"), [
    ({}, "recrawl must have interval or adaptive"),
    ({"links": False}, "recrawl must have interval or adaptive"),
    ({"interval": 0}, "recrawl.interval must be bigger than or equal to 1"),
    ({"interval": YEAR_S + 1}, "recrawl.interval must be smaller than or equal to 31536000"),
    ({"interval": 1.5}, "recrawl.interval must be integer"),
    ({"interval": "60"}, "recrawl.interval must be integer"),
    ({"interval": 60, "colour": "red"}, "recrawl must not contain {'colour'} "
                                        "properties"),
    ({"adaptive": {"min": 60}}, "recrawl.adaptive must contain ['max'] properties"),
    ({"adaptive": {"min": 0, "max": 60}},
     "recrawl.adaptive.min must be bigger than or equal to 1"),
    ({"adaptive": {"min": 60, "max": YEAR_S + 1}},
     "recrawl.adaptive.max must be smaller than or equal to 31536000"),
    ({"adaptive": {"min": 60, "max": 600, "inc": -0.1}},
     "recrawl.adaptive.inc must be bigger than or equal to 0"),
    ({"adaptive": {"min": 60, "max": 600, "dec": 1}},
     "recrawl.adaptive.dec must be smaller than 1"),
    ({"adaptive": {"min": 60, "max": 600, "step": 2}},
     "recrawl.adaptive must not contain {'step'} properties"),
    ({"adaptive": {"min": 601, "max": 600}}, "recrawl.adaptive.min must not exceed max"),
    ({"interval": 60, "until": 1_000_000_000}, "recrawl.until is in the past"),
    ({"interval": 60, "until": -1}, "recrawl.until must be bigger than or equal to 0"),
    ({"interval": 60, "max_cycles": 0}, "recrawl.max_cycles must be bigger than or equal to 1"),
    ({"interval": 60, "max_cycles": 1_000_001},
     "recrawl.max_cycles must be smaller than or equal to 1000000"),
    ({"interval": 60, "links": "yes"}, "recrawl.links must be boolean"),
    ({"interval": 60, "not_modified": "body"}, "recrawl.not_modified must be one of "
                                               "['item', 'none']"),
    ("hourly", "recrawl must be object"),
])
def test_a_bad_recrawl_is_refused_with_the_field_named(
        validator: RequestValidator, recrawl: Any, reason: str) -> None:
    assert reason_for(validator, recrawl) == f"ScraperHandler: {reason}"


def test_matching_fills_defaults_into_a_copy_of_the_recrawl(validator: RequestValidator) -> None:
    recrawl = {"adaptive": {"min": 60, "max": 600}}
    message = {**CRAWL, "recrawl": recrawl}
    recrawl_of(validator, recrawl)
    validator.match(message)
    assert message["recrawl"] == {"adaptive": {"min": 60, "max": 600}}


def test_the_domain_document_validates_as_the_request_does() -> None:
    with pytest.raises(ValueError, match=r"^recrawl\.adaptive\.min must not exceed max$"):
        recrawl_api.validated({"adaptive": {"min": 9, "max": 3}})
    with pytest.raises(ValueError, match=r"^recrawl must have interval or adaptive$"):
        recrawl_api.validated({"until": 5})
    # ``until`` is not judged by the clock there: a stored document must stay readable
    assert recrawl_api.validated({"interval": 5, "until": 5}) == {"interval": 5, "until": 5,
                                                                  **FILLED}


# --- the per-domain default ---------------------------------------------------------------------

class Recording:
    """The real frontier, remembering the requests the plugin hands it."""

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier
        self.requests: list[dict[str, Any]] = []

    def enqueue_many(self, requests: Sequence[dict[str, Any]], *, dedupe: bool = False) -> Any:
        self.requests.extend(dict(request) for request in requests)
        return self.frontier.enqueue_many(requests, dedupe=dedupe)


def km_settings(redis_url: str) -> Settings:
    return load_settings("kafka-monitor", environ={}, overrides={"REDIS_URL": redis_url})


def push(redis_url: str, tmp_path: Path, text: str) -> str:
    path = tmp_path / "domains.yml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["--redis-url", redis_url, "config", "push", "-f",
                                       str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def scraper(redis_client: redis.Redis, redis_url: str) -> tuple[ScraperHandler, Recording]:
    settings = km_settings(redis_url)
    recording = Recording(Frontier.from_settings(settings, redis_client))
    plugin = ScraperHandler.from_settings(settings, logger=LOGGER, redis_client=redis_client,
                                          frontier=recording)
    return plugin, recording


def submit(plugin: ScraperHandler, client: redis.Redis,
           messages: list[dict[str, Any]]) -> dict[int, str]:
    pipe = client.pipeline(transaction=True)
    failures = plugin.handle_batch(messages, pipe)
    pipe.execute()
    return failures


def crawl(url: str, crawlid: str, **fields: Any) -> dict[str, Any]:
    return {"url": url, "appid": "testapp", "crawlid": crawlid, "spiderid": "link",
            "maxdepth": 0, "priority": 1, "expires": 0, "attrs": {}, **fields}


NEWS_DEFAULT = """
domains:
  news.example.com:
    recrawl: {interval: 3600, max_cycles: 24}
  shop.example.org:
    window: 60
    hits: 10
"""


@pytest.mark.integration
def test_a_request_without_recrawl_gets_its_seed_domains_default(
        redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    assert "+ recrawl example.com:" in push(redis_url, tmp_path, NEWS_DEFAULT)
    plugin, recording = scraper(redis_client, redis_url)
    own = {"interval": 60, "links": False, "not_modified": "none"}
    assert submit(plugin, redis_client, [
        crawl("https://www.example.com/front", "c1"),
        crawl("https://blog.example.com/", "c2", recrawl=own),
        crawl("https://shop.example.org/", "c3"),
        crawl("https://example.net/", "c4")]) == {}
    given = {request["crawlid"]: request.get("recrawl") for request in recording.requests}
    assert given == {"c1": {"interval": 3600, "max_cycles": 24, **FILLED}, "c2": own,
                     "c3": None, "c4": None}


@pytest.mark.integration
def test_without_any_default_requests_go_through_unchanged(
        redis_client: redis.Redis, redis_url: str) -> None:
    plugin, recording = scraper(redis_client, redis_url)
    assert submit(plugin, redis_client, [crawl("https://www.example.com/", "c1")]) == {}
    assert "recrawl" not in recording.requests[0]


@pytest.mark.integration
def test_a_default_whose_until_passed_is_no_longer_given(
        redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    push(redis_url, tmp_path, "domains: {example.com: {recrawl: {interval: 60, until: 5}}}")
    plugin, recording = scraper(redis_client, redis_url)
    submit(plugin, redis_client, [crawl("https://example.com/", "c1")])
    assert "recrawl" not in recording.requests[0]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.integration
def test_the_document_is_read_at_most_once_per_refresh_and_changes_spare_earlier_crawls(
        redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    push(redis_url, tmp_path, "domains: {example.com: {recrawl: {interval: 60}}}")
    normalize = frontier_domain()
    reads: list[int] = []

    def read(known: int) -> VersionedDocument | None:
        reads.append(known)
        return read_document_if_changed(redis_client, normalize, known)

    clock = Clock()
    defaults = DomainDefaults(read, logger=LOGGER, refresh_s=5.0, clock=clock)
    first = [crawl("https://example.com/", "c1")]
    assert defaults.apply(first) == {"recrawl": 1, "sitemaps": 0}
    push(redis_url, tmp_path, "domains: {example.com: {recrawl: {interval: 120}}}")
    clock.now += 4.9
    second = [crawl("https://example.com/", "c2")]
    assert defaults.apply(second) == {"recrawl": 1, "sitemaps": 0}
    assert (reads, second[0]["recrawl"]["interval"]) == ([-1], 60)  # not read again yet
    clock.now += 0.2
    third = [crawl("https://example.com/", "c3")]
    defaults.apply(third)
    assert (reads, third[0]["recrawl"]["interval"]) == ([-1, 1], 120)
    assert (first[0]["recrawl"]["interval"], second[0]["recrawl"]["interval"]) == (60, 60)
    clock.now += 10
    defaults.apply([crawl("https://example.com/", "c4", recrawl={"interval": 5},
                          sitemaps="off")])
    assert reads == [-1, 1]  # every request has its own fields: nothing to look up
    defaults.apply([crawl("https://example.com/", "c5")])
    assert reads == [-1, 1, 2]
    assert read_document_if_changed(redis_client, normalize, 2) is None
