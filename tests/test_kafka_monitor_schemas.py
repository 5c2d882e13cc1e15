"""The Kafka API's four schemas: valid examples, every bound, required fields, unknown fields."""

from __future__ import annotations

from typing import Any

import pytest

from scrapy_cluster.api.validation import Accepted, RequestValidator
from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes
from scrapy_cluster.settings import load_settings

CRAWL = {"url": "http://www.dmoz.org/", "appid": "testapp", "crawlid": "abc123"}
ACTION = {"action": "info", "appid": "testapp", "crawlid": "ABC123", "uuid": "abc12333",
          "spiderid": "link"}
STATS = {"appid": "testapp", "uuid": "cdefgh1", "stats": "kafka-monitor"}
DOMAIN = {"uuid": "abc123", "appid": "madisonTest", "action": "domain-update",
          "domain": "dmoz.org", "hits": 60, "window": 60, "scale": 0.9}


@pytest.fixture(scope="module")
def validator() -> RequestValidator:
    settings = load_settings("kafka-monitor", environ={})
    return build_validator(plugin_classes(settings), settings)


def accepted_by(validator: RequestValidator, message: Any) -> str | None:
    match = validator.match(message)
    return match.plugin if isinstance(match, Accepted) else None


def reason_for(validator: RequestValidator, message: Any) -> str:
    match = validator.match(message)
    assert not isinstance(match, Accepted), f"unexpectedly accepted by {match.plugin}"
    return match.reason


@pytest.mark.parametrize(("message", "plugin"), [
    (CRAWL, "ScraperHandler"),
    ({**CRAWL, "maxdepth": 2, "priority": 90, "allowed_domains": ["dmoz.org"],
      "allow_regex": ["^http"], "deny_regex": ["logout"], "deny_extensions": ["pdf"],
      "expires": 1423591888, "useragent": "my-bot", "cookie": "a=b; c=d",
      "attrs": {"any": ["thing"]}, "domain_max_pages": 10, "spiderid": "wandering"},
     "ScraperHandler"),
    (ACTION, "ActionHandler"),
    ({**ACTION, "action": "stop"}, "ActionHandler"),
    ({k: v for k, v in ACTION.items() if k != "crawlid"}, "ActionHandler"),
    (STATS, "StatsHandler"),
    ({"appid": "testapp", "uuid": "x"}, "StatsHandler"),
    (DOMAIN, "ZookeeperHandler"),
    ({"uuid": "abc123", "appid": "madisonTest", "action": "blacklist-update",
      "domain": "ebay.com"}, "ZookeeperHandler"),
])
def test_valid_example_is_accepted_by_its_plugin(validator: RequestValidator,
                                                 message: dict[str, Any], plugin: str) -> None:
    assert accepted_by(validator, message) == plugin


def test_crawl_defaults_are_filled(validator: RequestValidator) -> None:
    match = validator.match(dict(CRAWL))
    assert isinstance(match, Accepted)
    assert match.message == {**CRAWL, "spiderid": "link", "maxdepth": 0, "priority": 1,
                             "expires": 0, "attrs": {}}


def test_matching_does_not_modify_the_request(validator: RequestValidator) -> None:
    message = dict(CRAWL)
    validator.match(message)
    assert message == CRAWL


def test_stats_type_defaults_to_all(validator: RequestValidator) -> None:
    match = validator.match({"appid": "testapp", "uuid": "x"})
    assert isinstance(match, Accepted) and match.message["stats"] == "all"


def test_domain_scale_defaults_to_one(validator: RequestValidator) -> None:
    match = validator.match({k: v for k, v in DOMAIN.items() if k != "scale"})
    assert isinstance(match, Accepted) and match.message["scale"] == 1.0


LONG = "x" * 41
# (base request, field, bad value (None = remove the field), the plugin it is closest to)
BAD_FIELDS = [
    (CRAWL, "url", None), (CRAWL, "appid", None), (CRAWL, "crawlid", None),
    (CRAWL, "url", "ftp://example.com/"), (CRAWL, "url", "www.example.com"),
    (CRAWL, "url", "http:///path"), (CRAWL, "url", 7),
    (CRAWL, "appid", "ab"), (CRAWL, "appid", LONG), (CRAWL, "crawlid", ""),
    (CRAWL, "crawlid", LONG), (CRAWL, "spiderid", ""), (CRAWL, "spiderid", 3),
    (CRAWL, "priority", 0), (CRAWL, "priority", 101), (CRAWL, "priority", 1.5),
    (CRAWL, "priority", True),
    (CRAWL, "maxdepth", -1), (CRAWL, "maxdepth", 4), (CRAWL, "expires", "soon"),
    (CRAWL, "expires", -5),
    (CRAWL, "useragent", "ab"), (CRAWL, "useragent", "u" * 1001),
    (CRAWL, "cookie", "ab"), (CRAWL, "cookie", "c" * 1001),
    (CRAWL, "attrs", []), (CRAWL, "allowed_domains", ["a.com", "a.com"]),
    (CRAWL, "allowed_domains", "a.com"), (CRAWL, "allow_regex", [1]),
    (CRAWL, "deny_regex", ["x", "x"]), (CRAWL, "deny_extensions", [None]),
    (CRAWL, "domain_max_pages", -1), (CRAWL, "domain_max_pages", 2001),
    (ACTION, "appid", None), (ACTION, "spiderid", None), (ACTION, "action", None),
    (ACTION, "uuid", None), (ACTION, "action", "pause"), (ACTION, "uuid", ""),
    (ACTION, "uuid", LONG), (ACTION, "appid", "ab"), (ACTION, "crawlid", LONG),
    (STATS, "appid", None), (STATS, "uuid", None), (STATS, "stats", "everything"),
    (STATS, "uuid", LONG), (STATS, "appid", LONG),
    (DOMAIN, "domain", None), (DOMAIN, "action", "domain-delete"), (DOMAIN, "hits", -1),
    (DOMAIN, "window", 0), (DOMAIN, "window", 1.5), (DOMAIN, "scale", 1.1),
    (DOMAIN, "scale", -0.1), (DOMAIN, "domain", ""), (DOMAIN, "uuid", LONG),
]


def _case_id(base: dict[str, Any], field: str, value: Any) -> str:
    kind = {id(CRAWL): "crawl", id(ACTION): "action", id(STATS): "stats"}.get(id(base), "domain")
    return f"{kind}-{field}-{'missing' if value is None else repr(value)[:20]}"


@pytest.mark.parametrize(("base", "field", "value"), BAD_FIELDS,
                         ids=[_case_id(*case) for case in BAD_FIELDS])
def test_bad_field_is_rejected_with_a_reason_naming_it(validator: RequestValidator,
                                                       base: dict[str, Any], field: str,
                                                       value: Any) -> None:
    message = dict(base)
    if value is None:
        del message[field]
    else:
        message[field] = value
    assert field in reason_for(validator, message)


@pytest.mark.parametrize("base", [CRAWL, ACTION, STATS, DOMAIN],
                         ids=["crawl", "action", "stats", "domain"])
def test_unknown_property_is_rejected_and_named(validator: RequestValidator,
                                                base: dict[str, Any]) -> None:
    assert "surprise" in reason_for(validator, {**base, "surprise": 1})


def test_domain_update_requires_hits_and_window(validator: RequestValidator) -> None:
    message = {k: v for k, v in DOMAIN.items() if k not in ("hits", "window")}
    assert reason_for(validator, message) == (
        "ZookeeperHandler: request must contain ['hits', 'window'] properties")


def test_domain_remove_needs_no_hits(validator: RequestValidator) -> None:
    message = {k: v for k, v in DOMAIN.items() if k not in ("hits", "window")}
    assert accepted_by(validator, {**message, "action": "domain-remove"}) == "ZookeeperHandler"


def test_rejection_is_explained_by_the_closest_schema(validator: RequestValidator) -> None:
    reason = reason_for(validator, {**ACTION, "action": "pause"})
    assert reason.startswith("ActionHandler: action must be one of")


def test_bad_url_reason_says_what_a_url_must_be(validator: RequestValidator) -> None:
    assert reason_for(validator, {**CRAWL, "url": "ftp://x.org/"}) == (
        "ScraperHandler: url must be an absolute http(s) URL")


@pytest.mark.parametrize(("message", "kind"), [([1, 2], "an array"), ("hi", "a string"),
                                               (None, "null"), (3, "a number")])
def test_non_object_request_is_rejected(validator: RequestValidator, message: Any,
                                        kind: str) -> None:
    assert reason_for(validator, message) == f"request must be a JSON object, not {kind}"


def test_maxdepth_cap_comes_from_the_setting() -> None:
    settings = load_settings("kafka-monitor", environ={}, overrides={"CRAWL_MAXDEPTH_LIMIT": 10})
    deep = build_validator(plugin_classes(settings), settings)
    assert accepted_by(deep, {**CRAWL, "maxdepth": 10}) == "ScraperHandler"
    assert "maxdepth" in reason_for(deep, {**CRAWL, "maxdepth": 11})
