"""The crawl request's ``sitemaps`` and ``sitemap_any_host`` (docs/api.md, "Sitemaps"): what the
schema and the crawl plugin's own check accept and refuse, with the exact reasons; the
discovery requests the Kafka Monitor queues beside the seed for each mode, read back from the
frontier's queues on a real Redis; and the operators' per-domain default."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner

from scrapy_cluster.api import sitemaps as sitemaps_api
from scrapy_cluster.api.validation import Accepted, RequestValidator
from scrapy_cluster.cli import main
from scrapy_cluster.domain_config.document import DomainDocument, frontier_domain
from scrapy_cluster.frontier import Frontier, codec
from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes
from scrapy_cluster.kafka_monitor.plugins import ScraperHandler
from scrapy_cluster.settings import Settings, load_settings

LOGGER = logging.getLogger("test-sitemaps-api")
CRAWL = {"url": "http://www.dmoz.org/", "appid": "testapp", "crawlid": "abc123"}
PATHS = ("/sitemap.xml", "/sitemap_index.xml", "/sitemap.xml.gz", "/sitemap_index.xml.gz")


@pytest.fixture(scope="module")
def validator() -> RequestValidator:
    settings = load_settings("kafka-monitor", environ={})
    return build_validator(plugin_classes(settings), settings)


def accepted(validator: RequestValidator, **fields: Any) -> dict[str, Any]:
    match = validator.match({**CRAWL, **fields})
    assert isinstance(match, Accepted), match.reason
    assert match.plugin == "ScraperHandler"
    return match.message


def reason_for(validator: RequestValidator, **fields: Any) -> str:
    match = validator.match({**CRAWL, **fields})
    assert not isinstance(match, Accepted), f"unexpectedly accepted: {match.message}"
    return match.reason


# --- the request's fields ----------------------------------------------------------------------

@pytest.mark.parametrize("sitemaps", [
    "off", "robots", "paths", ["https://example.com/sitemap.xml"],
    ["http://a.example/s1.xml", "https://b.example:8443/s2.xml.gz?page=2"],
    [f"https://example.com/sitemap-{n}.xml" for n in range(100)],
])
def test_a_valid_sitemaps_is_accepted_as_given(validator: RequestValidator,
                                               sitemaps: Any) -> None:
    message = accepted(validator, sitemaps=sitemaps)
    assert message["sitemaps"] == sitemaps


def test_omitted_fields_are_not_filled_in(validator: RequestValidator) -> None:
    # absent stays absent, so that a domain default can still apply
    message = accepted(validator)
    assert "sitemaps" not in message and "sitemap_any_host" not in message
    assert accepted(validator, sitemaps="robots", sitemap_any_host=True)["sitemap_any_host"]


@pytest.mark.parametrize(("fields", "reason"), [
    ({"sitemaps": "all"}, "sitemaps must be one of ['off', 'robots', 'paths']"),
    ({"sitemaps": "Robots"}, "sitemaps must be one of ['off', 'robots', 'paths']"),
    ({"sitemaps": True}, "sitemaps must be string or array"),
    ({"sitemaps": {"url": "https://example.com/sitemap.xml"}}, "sitemaps must be string or array"),
    ({"sitemaps": []}, "sitemaps must contain at least 1 items"),
    ({"sitemaps": [f"https://example.com/s{n}.xml" for n in range(101)]},
     "sitemaps must contain less than or equal to 100 items"),
    ({"sitemaps": ["https://example.com/s.xml"] * 2}, "sitemaps must contain unique items"),
    ({"sitemaps": [5]}, "sitemaps[0] must be string"),
    ({"sitemaps": ["https://example.com/s.xml", "/sitemap.xml"]},
     "sitemaps[1] must be an absolute http(s) URL"),
    ({"sitemaps": ["https://example.com/s.xml", "sitemap.xml"]},
     "sitemaps[1] must be an absolute http(s) URL"),
    ({"sitemaps": ["ftp://example.com/sitemap.xml"]}, "sitemaps[0] must be an absolute http(s) URL"),
    ({"sitemaps": ["https://example.com/" + "s" * 2040]},
     "sitemaps[0] must be shorter than or equal to 2048 characters"),
    ({"sitemaps": ["https://example.com:99999/sitemap.xml"]},  # the plugin's own check
     "sitemaps[0] must be an absolute http(s) URL"),
    ({"sitemaps": ["https://example.com:http/sitemap.xml"]},
     "sitemaps[0] must be an absolute http(s) URL"),
    ({"sitemap_any_host": "yes"}, "sitemap_any_host must be boolean"),
])
def test_a_bad_value_is_refused_with_the_field_named(
        validator: RequestValidator, fields: dict[str, Any], reason: str) -> None:
    assert reason_for(validator, **fields) == f"ScraperHandler: {reason}"


def test_the_domain_document_validates_as_the_request_does() -> None:
    assert sitemaps_api.validated("paths") == "paths"
    assert sitemaps_api.validated(["https://example.com/s.xml"]) == ["https://example.com/s.xml"]
    for value, reason in [
            ("all", "sitemaps must be one of ['off', 'robots', 'paths']"),
            ([], "sitemaps must contain at least 1 items"),
            (["https://example.com/a.xml", "ftp://x.example/s"],
             "sitemaps[1] must be an absolute http(s) URL"),
            (["https://example.com:0x/a.xml"], "sitemaps[0] must be an absolute http(s) URL"),
            (7, "sitemaps must be string or array")]:
        with pytest.raises(ValueError) as caught:
            sitemaps_api.validated(value)
        assert str(caught.value) == reason


# --- the discovery requests ---------------------------------------------------------------------

SEED = {"url": "HTTPS://user@Shop.Example.com:8443/start?x=1", "appid": "testapp",
        "crawlid": "c1", "spiderid": "link", "maxdepth": 2, "priority": 7, "expires": 0,
        "attrs": {"team": "a"}, "curdepth": 0, "recrawl": {"interval": 60}}


def test_discovery_requests_are_copies_of_the_seed_with_another_url() -> None:
    seed = {**SEED, "sitemaps": "paths", "sitemap_any_host": True}
    made = sitemaps_api.discovery_requests(seed)
    origin = "https://shop.example.com:8443"
    assert [(request["url"], request["sitemap"]) for request in made] == [
        (origin + "/robots.txt", {"kind": "robots", "any_host": True}),
        *[(origin + path, {"kind": "sitemap", "depth": 0, "any_host": True}) for path in PATHS]]
    for request in made:
        assert {key: value for key, value in request.items() if key not in ("url", "sitemap")} \
            == {key: value for key, value in SEED.items() if key != "url"}
    made[0]["attrs"]["team"] = "b"
    assert seed["attrs"] == {"team": "a"}  # deep copies: the seed is untouched
    assert sitemaps_api.discovery_requests({**SEED, "sitemaps": "off"}) == []
    assert sitemaps_api.discovery_requests(SEED) == []


# --- the Kafka Monitor's crawl plugin, on a real Redis -------------------------------------------

def km_settings(redis_url: str) -> Settings:
    return load_settings("kafka-monitor", environ={}, overrides={"REDIS_URL": redis_url})


def scraper(client: redis.Redis, redis_url: str) -> ScraperHandler:
    settings = km_settings(redis_url)
    return ScraperHandler.from_settings(settings, logger=LOGGER, redis_client=client,
                                        frontier=Frontier.from_settings(settings, client))


def submit(plugin: ScraperHandler, client: redis.Redis,
           messages: list[dict[str, Any]]) -> dict[int, str]:
    pipe = client.pipeline(transaction=True)
    failures = plugin.handle_batch(messages, pipe)
    pipe.execute()
    return failures


def crawl(url: str, crawlid: str = "c1", **fields: Any) -> dict[str, Any]:
    return {"url": url, "appid": "testapp", "crawlid": crawlid, "spiderid": "link",
            "maxdepth": 1, "priority": 5, "expires": 0, "attrs": {"k": 1}, **fields}


def queued(client: redis.Redis, crawlid: str = "c1") -> list[dict[str, Any]]:
    """Every request queued for ``crawlid`` (all domains), read from the frontier's lists."""
    found = []
    for key in sorted(client.scan_iter(match=f"link:*:queue:*:{crawlid}")):
        priority = int(key.decode().split(":")[-2])
        for item in client.lrange(key, 0, -1):
            body = item.partition(b" ")[2]
            found.append(codec.decode_item(body, spiderid="link", crawlid=crawlid,
                                           priority=priority))
    return found


def places(client: redis.Redis, crawlid: str = "c1") -> set[tuple[str, str | None]]:
    return {(request["url"], _spec(request.get("sitemap"))) for request in queued(client, crawlid)}


def _spec(spec: dict[str, Any] | None) -> str | None:
    return None if spec is None else ",".join(f"{k}={v}" for k, v in sorted(spec.items()))


ROBOTS = "kind=robots"
TOP = "depth=0,kind=sitemap"


@pytest.mark.integration
@pytest.mark.parametrize(("fields", "expected"), [
    ({}, set()),
    ({"sitemaps": "off"}, set()),
    ({"sitemaps": "robots"}, {("https://news.example.com/robots.txt", ROBOTS)}),
    ({"sitemaps": "paths"}, {("https://news.example.com/robots.txt", ROBOTS),
                             *{("https://news.example.com" + path, TOP) for path in PATHS}}),
    ({"sitemaps": ["https://cdn.example.net/maps/news.xml", "https://news.example.com/a.xml"]},
     {("https://cdn.example.net/maps/news.xml", TOP), ("https://news.example.com/a.xml", TOP)}),
    ({"sitemaps": "robots", "sitemap_any_host": True},
     {("https://news.example.com/robots.txt", "any_host=True,kind=robots")}),
    ({"sitemaps": ["https://news.example.com/a.xml"], "sitemap_any_host": True},
     {("https://news.example.com/a.xml", "any_host=True,depth=0,kind=sitemap")}),
    ({"sitemap_any_host": True}, set()),
])
def test_the_plugin_queues_the_seed_and_exactly_its_discovery_requests(
        redis_client: redis.Redis, redis_url: str, fields: dict[str, Any],
        expected: set[tuple[str, str | None]]) -> None:
    seed = crawl("https://news.example.com/front", **fields)
    assert submit(scraper(redis_client, redis_url), redis_client, [seed]) == {}
    assert places(redis_client) == {("https://news.example.com/front", None), *expected}
    for request in queued(redis_client):
        # same crawl, priority, depth and attrs as the seed; neither request field is queued
        assert (request["appid"], request["priority"], request["maxdepth"], request["curdepth"],
                request["attrs"]) == ("testapp", 5, 1, 0, {"k": 1})
        assert "sitemaps" not in request and "sitemap_any_host" not in request


@pytest.mark.integration
def test_discovery_requests_go_through_the_crawls_duplicate_filter(
        redis_client: redis.Redis, redis_url: str) -> None:
    plugin = scraper(redis_client, redis_url)
    listed = ["https://example.com/a.xml", "https://example.com/sitemap.xml"]
    assert submit(plugin, redis_client, [
        crawl("https://example.com/", sitemaps="paths"),
        crawl("https://example.com/other", sitemaps=listed)]) == {}
    assert submit(plugin, redis_client, [crawl("https://www.example.com/", sitemaps="robots"),
                                         crawl("https://example.com/", sitemaps="paths")]) == {}
    urls = sorted(request["url"] for request in queued(redis_client))
    assert urls == sorted({"https://example.com/", "https://example.com/other",
                           "https://www.example.com/", "https://example.com/robots.txt",
                           "https://www.example.com/robots.txt", "https://example.com/a.xml",
                           *("https://example.com" + path for path in PATHS)})
    # another crawl has its own duplicate filter
    assert submit(plugin, redis_client, [crawl("https://example.com/", "c2",
                                               sitemaps="robots")]) == {}
    assert places(redis_client, "c2") == {("https://example.com/", None),
                                          ("https://example.com/robots.txt", ROBOTS)}


class Refusing:
    """A frontier refusing the requests at the given indexes of the batch it is handed."""

    class Outcome:
        def __init__(self, invalid: list[tuple[int, str]]) -> None:
            self.queued, self.duplicates, self.blacklisted, self.invalid = 0, 0, 0, invalid

    def __init__(self, refused: Sequence[int]) -> None:
        self.refused = refused
        self.batches: list[list[dict[str, Any]]] = []

    def enqueue_many(self, requests: Sequence[dict[str, Any]], *, dedupe: bool = False) -> Any:
        assert dedupe
        self.batches.append(list(requests))
        return self.Outcome([(index, "bad url") for index in self.refused])


@pytest.mark.integration
def test_a_refused_seed_or_discovery_request_fails_its_own_message(
        redis_client: redis.Redis, redis_url: str) -> None:
    frontier = Refusing([1, 4, 5])
    plugin = ScraperHandler.from_settings(km_settings(redis_url), logger=LOGGER,
                                          redis_client=redis_client, frontier=frontier)
    messages = [crawl("https://a.example/", sitemaps="robots"),  # batch 0 (seed), 1 (robots)
                crawl("https://b.example/"),  # batch 2
                crawl("https://c.example/", sitemaps=["https://c.example/s.xml"]),  # 3, 4
                crawl("https://d.example/", expires=1900000000)]  # 5
    assert submit(plugin, redis_client, messages) == {
        0: "frontier refused the sitemap request https://a.example/robots.txt: bad url",
        2: "frontier refused the sitemap request https://c.example/s.xml: bad url",
        3: "frontier refused the request: bad url"}
    assert [request["url"] for request in frontier.batches[0]] == [
        "https://a.example/", "https://a.example/robots.txt", "https://b.example/",
        "https://c.example/", "https://c.example/s.xml", "https://d.example/"]
    assert redis_client.exists("timeout:link:testapp:c1") == 0  # the refused seed's expiry


# --- the per-domain default ---------------------------------------------------------------------

def push(redis_url: str, tmp_path: Path, text: str) -> str:
    path = tmp_path / "domains.yml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["--redis-url", redis_url, "config", "push", "-f",
                                       str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


DEFAULTS = """
domains:
  news.example.com:
    sitemaps: paths
  shop.example.org:
    window: 60
    hits: 10
    sitemaps: [https://cdn.example.net/shop/sitemap.xml]
  quiet.example.info:
    sitemaps: off     # YAML reads false: "off"
"""


@pytest.mark.integration
def test_a_request_without_sitemaps_gets_its_seed_domains_default(
        redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    output = push(redis_url, tmp_path, DEFAULTS)
    assert '+ sitemaps example.com: "paths"' in output
    assert '+ sitemaps example.org: ["https://cdn.example.net/shop/sitemap.xml"]' in output
    plugin = scraper(redis_client, redis_url)
    assert submit(plugin, redis_client, [
        crawl("https://www.example.com/front", "c1"),
        crawl("https://blog.example.com/", "c2", sitemaps="off"),  # its own wins
        crawl("https://shop.example.org/", "c3", sitemap_any_host=True),
        crawl("https://example.net/", "c4"),
        crawl("https://news.example.com/", "c5", sitemaps="robots"),
        crawl("https://example.info/", "c6")]) == {}
    assert places(redis_client, "c1") == {
        ("https://www.example.com/front", None), ("https://www.example.com/robots.txt", ROBOTS),
        *{("https://www.example.com" + path, TOP) for path in PATHS}}
    assert places(redis_client, "c2") == {("https://blog.example.com/", None)}
    assert places(redis_client, "c3") == {
        ("https://shop.example.org/", None),
        ("https://cdn.example.net/shop/sitemap.xml", "any_host=True,depth=0,kind=sitemap")}
    assert places(redis_client, "c4") == {("https://example.net/", None)}
    assert places(redis_client, "c5") == {("https://news.example.com/", None),
                                          ("https://news.example.com/robots.txt", ROBOTS)}
    assert places(redis_client, "c6") == {("https://example.info/", None)}


def test_the_documented_examples_are_valid(validator: RequestValidator) -> None:
    repo = Path(__file__).resolve().parent.parent
    api = (repo / "docs" / "api.md").read_text()
    example = api[api.index("### Sitemaps"):].split("```json\n", 1)[1].split("```", 1)[0]
    assert isinstance(validator.match(orjson.loads(example)), Accepted)
    operations = (repo / "docs" / "operations.md").read_text()
    document = DomainDocument.from_yaml(operations.split("```yaml\n", 1)[1].split("```", 1)[0],
                                        frontier_domain())
    assert document.sitemaps == {
        "example.net": "paths",
        "example.info": ["https://cdn.example.info/sitemaps/products.xml.gz"]}
