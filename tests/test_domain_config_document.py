"""The operators' YAML document: validation messages, domain matching, replacement, diff."""

from __future__ import annotations

import pytest

from scrapy_cluster.domain_config.document import DomainDocument, frontier_domain
from scrapy_cluster.errors import DomainConfigError
from scrapy_cluster.frontier.config import DomainThrottle

NORMALIZE = frontier_domain()

SEED_EXAMPLE = """
blacklist:
  - ex2.com
domains:
  dmoztools.net:
    window: 60
    hits: 60
  wikipedia.org:
    window: 60
    hits: 30
    scale: 0.5
"""


def parse(text: str) -> DomainDocument:
    return DomainDocument.from_yaml(text, NORMALIZE)


def test_the_seed_example_parses() -> None:
    document = parse(SEED_EXAMPLE)
    assert document.blacklist == frozenset({"ex2.com"})
    assert document.throttles == {
        "dmoztools.net": DomainThrottle(window_s=60.0, hits=60),
        "wikipedia.org": DomainThrottle(window_s=60.0, hits=30, scale=0.5)}


@pytest.mark.parametrize("name", ["www.example.com", "http://example.com:8080/path",
                                  "EXAMPLE.com.", "shop.example.com"])
def test_domains_are_matched_as_the_frontier_keys_them(name: str) -> None:
    document = parse(f"domains: {{'{name}': {{window: 10, hits: 1}}}}\nblacklist: ['{name}']")
    assert list(document.throttles) == ["example.com"]
    assert document.blacklist == {"example.com"}


def test_an_ip_address_with_a_port_is_its_own_domain() -> None:
    assert list(parse("domains: {'127.0.0.5:8080': {window: 1, hits: 1}}").throttles) == \
        ["127.0.0.5"]


def test_two_names_of_one_domain_are_refused() -> None:
    with pytest.raises(DomainConfigError, match="'www.a.com' and 'a.com' both name 'a.com'"):
        parse("domains: {www.a.com: {window: 1, hits: 1}, a.com: {window: 2, hits: 1}}")


@pytest.mark.parametrize(("text", "message"), [
    ("domains: [", "not valid YAML"),
    ("- a\n- b", "must be a mapping"),
    ("domainz: {}", "unknown top-level key(s): domainz"),
    ("blacklist: a.com", "blacklist: must be a list"),
    ("domains: {a.com: {hits: 1}}", "domain 'a.com': 'window' is required"),
    ("domains: {a.com: {window: 10}}", "domain 'a.com': 'hits' is required"),
    ("domains: {a.com: {window: 10, hits: -1}}", "domain 'a.com': hits must be an integer >= 0"),
    ("domains: {a.com: {window: 10, hits: 2.5}}", "domain 'a.com': hits must be an integer"),
    ("domains: {a.com: {window: 0, hits: 1}}", "domain 'a.com': window must be a number"),
    ("domains: {a.com: {window: true, hits: 1}}", "domain 'a.com': window must be a number"),
    ("domains: {a.com: {window: 1, hits: 1, scale: x}}", "domain 'a.com': scale must be"),
    ("domains: {a.com: {window: 1, hits: 1, moderated: 1}}", "moderated must be true or false"),
    ("domains: {a.com: {window: 1, hits: 1, burst: 2}}", "unknown field(s) burst"),
    ("domains: {a.com: 5}", "domain 'a.com': must be a mapping"),
])
def test_invalid_documents_are_refused_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(DomainConfigError) as caught:
        parse(text)
    assert message in str(caught.value)


def test_a_limit_that_rounds_to_zero_pauses_without_error() -> None:
    document = parse("domains: {a.com: {window: 10, hits: 3, scale: 1}, "
                     "b.com: {window: 10, hits: 3, scale: 0}, c.com: {window: 10, hits: 3, "
                     "scale: 0.1}}")
    assert [document.throttles[d].limit for d in ("a.com", "b.com", "c.com")] == [3, 0, 0]


@pytest.mark.parametrize("scale", ["7", "-0.5", "1.01"])
def test_a_scale_out_of_range_is_refused(scale: str) -> None:
    with pytest.raises(DomainConfigError,
                       match=f"domain 'a.com': scale must be a number from 0 to 1, got {scale}"):
        parse(f"domains: {{a.com: {{window: 10, hits: 3, scale: {scale}}}}}")


def test_an_empty_document_is_the_empty_configuration() -> None:
    assert parse("") == DomainDocument()
    assert parse("domains:\nblacklist:") == DomainDocument()


def test_yaml_round_trip_keeps_every_field() -> None:
    document = parse("domains: {a.com: {window: 2.5, hits: 4, scale: 0.5, moderated: false}, "
                     "b.com: {window: 60, hits: 10}}\nblacklist: [c.com]")
    assert parse(document.to_yaml()) == document


def test_diff_names_added_changed_and_removed_entries() -> None:
    old = parse("domains: {a.com: {window: 60, hits: 10}, b.com: {window: 60, hits: 5}}\n"
                "blacklist: [x.com]")
    new = parse("domains: {a.com: {window: 60, hits: 20}, c.com: {window: 1, hits: 1, "
                "moderated: true}}\nblacklist: [y.com]")
    assert old.diff(new) == [
        "+ blacklist y.com", "- blacklist x.com",
        "~ domain a.com: 10 per 60s -> 20 per 60s",
        "- domain b.com: 5 per 60s (back to the default)",
        "+ domain c.com: 1 per 1s, moderated"]
    assert new.diff(new) == []


def test_single_entry_changes_leave_the_rest() -> None:
    document = parse("domains: {a.com: {window: 60, hits: 10}}\nblacklist: [x.com]")
    changed = document.with_throttle("b.com", DomainThrottle(1, 1)).without_throttle("a.com")
    changed = changed.with_blacklisted("y.com").without_blacklisted("x.com")
    assert (set(changed.throttles), changed.blacklist) == ({"b.com"}, {"y.com"})
    assert set(document.throttles) == {"a.com"}


# --- the per-domain re-crawl default -----------------------------------------------------------

RECRAWL_FILLED = {"links": True, "not_modified": "item"}


def test_a_recrawl_default_is_parsed_with_its_defaults_filled() -> None:
    document = parse("domains:\n  www.news.com: {recrawl: {interval: 3600}}\n"
                     "  shop.com: {window: 60, hits: 5, recrawl: {adaptive: {min: 60, "
                     "max: 600}, links: false}}")
    assert document.throttles == {"shop.com": DomainThrottle(window_s=60.0, hits=5)}
    assert document.recrawls == {
        "news.com": {"interval": 3600, **RECRAWL_FILLED},
        "shop.com": {"adaptive": {"min": 60, "max": 600, "inc": 0.4, "dec": 0.2,
                                  "estimate": False},
                     "links": False, "not_modified": "item"}}


@pytest.mark.parametrize(("recrawl", "message"), [
    ("{adaptive: {min: 600, max: 60}}", "recrawl.adaptive.min must not exceed max"),
    ("{links: false}", "recrawl must have interval or adaptive"),
    ("{interval: 0}", "recrawl.interval must be bigger than or equal to 1"),
    ("{interval: 31536001}", "recrawl.interval must be smaller than or equal to 31536000"),
    ("{interval: 60, max_cycles: 0}", "recrawl.max_cycles must be bigger than or equal to 1"),
    ("{interval: 60, not_modified: body}",
     "recrawl.not_modified must be one of ['item', 'none']"),
    ("{interval: 60, every: 5}", "recrawl must not contain {'every'} properties"),
    ("3600", "recrawl must be object"),
])
def test_a_bad_recrawl_default_is_refused_naming_the_domain_and_field(
        recrawl: str, message: str) -> None:
    with pytest.raises(DomainConfigError) as caught:
        parse(f"domains: {{a.com: {{recrawl: {recrawl}}}}}")
    assert str(caught.value) == f"domain 'a.com': {message}"


def test_a_recrawl_entry_with_a_partial_throttle_or_an_unknown_field_is_refused() -> None:
    with pytest.raises(DomainConfigError, match="domain 'a.com': 'window' is required"):
        parse("domains: {a.com: {hits: 1, recrawl: {interval: 60}}}")
    with pytest.raises(DomainConfigError, match=r"unknown field\(s\) burst \(allowed: window, "
                                                r"hits, scale, moderated, recrawl, "
                                                r"sitemaps\)"):
        parse("domains: {a.com: {burst: 1, recrawl: {interval: 60}}}")


def test_a_recrawl_default_round_trips_and_is_diffed() -> None:
    old = parse("domains: {a.com: {window: 60, hits: 10, recrawl: {interval: 60}}, "
                "b.com: {recrawl: {interval: 5}}}")
    assert parse(old.to_yaml()) == old
    new = parse("domains: {a.com: {window: 60, hits: 10, recrawl: {interval: 120}}, "
                "c.com: {recrawl: {interval: 5, links: false}}}")
    assert old.diff(new) == [
        '~ recrawl a.com: {"interval":60,"links":true,"not_modified":"item"} -> '
        '{"interval":120,"links":true,"not_modified":"item"}',
        '- recrawl b.com: {"interval":5,"links":true,"not_modified":"item"}',
        '+ recrawl c.com: {"interval":5,"links":false,"not_modified":"item"}']


def test_throttle_and_blacklist_changes_keep_the_recrawl_defaults() -> None:
    document = parse("domains: {a.com: {window: 60, hits: 10, recrawl: {interval: 60}}}")
    changed = document.without_throttle("a.com").with_blacklisted("x.com")
    changed = changed.with_throttle("b.com", DomainThrottle(1, 1))
    assert changed.recrawls == {"a.com": {"interval": 60, **RECRAWL_FILLED}}
    assert changed.with_recrawl("b.com", {"interval": 9}).recrawls["b.com"] == {
        "interval": 9, **RECRAWL_FILLED}
    assert changed.without_recrawl("a.com").recrawls == {}
    with pytest.raises(DomainConfigError, match="domain 'b.com': recrawl.interval must be"):
        changed.with_recrawl("b.com", {"interval": -1})


def test_a_past_until_is_kept_so_that_a_stored_document_stays_readable() -> None:
    assert parse("domains: {a.com: {recrawl: {interval: 60, until: 5}}}").recrawls == {
        "a.com": {"interval": 60, "until": 5, **RECRAWL_FILLED}}


# --- the per-domain sitemaps default -----------------------------------------------------------

def test_a_sitemaps_default_is_parsed_alone_or_beside_a_throttle_and_a_recrawl() -> None:
    document = parse("domains:\n  www.news.com: {sitemaps: paths}\n"
                     "  shop.com: {window: 60, hits: 5, recrawl: {interval: 60}, "
                     "sitemaps: [https://cdn.shop.net/sitemap.xml]}\n"
                     "  quiet.org: {sitemaps: off}")
    assert document.throttles == {"shop.com": DomainThrottle(window_s=60.0, hits=5)}
    assert document.recrawls == {"shop.com": {"interval": 60, **RECRAWL_FILLED}}
    assert document.sitemaps == {"news.com": "paths", "quiet.org": "off",
                                 "shop.com": ["https://cdn.shop.net/sitemap.xml"]}


@pytest.mark.parametrize(("sitemaps", "message"), [
    ("all", "sitemaps must be one of ['off', 'robots', 'paths']"),
    ("on", "sitemaps must be string or array"),  # YAML reads it as true
    ("[]", "sitemaps must contain at least 1 items"),
    ("[https://a.com/s.xml, /b.xml]", "sitemaps[1] must be an absolute http(s) URL"),
    ("[https://a.com:99999/s.xml]", "sitemaps[0] must be an absolute http(s) URL"),
    ("{robots: true}", "sitemaps must be string or array"),
])
def test_a_bad_sitemaps_default_is_refused_naming_the_domain_and_field(
        sitemaps: str, message: str) -> None:
    with pytest.raises(DomainConfigError) as caught:
        parse(f"domains: {{a.com: {{sitemaps: {sitemaps}}}}}")
    assert str(caught.value) == f"domain 'a.com': {message}"


def test_a_sitemaps_default_round_trips_is_diffed_and_survives_throttle_changes() -> None:
    old = parse("domains: {a.com: {window: 60, hits: 10, sitemaps: robots}, "
                "b.com: {sitemaps: off}, c.com: {sitemaps: [https://c.com/s.xml]}}")
    assert parse(old.to_yaml()) == old
    new = parse("domains: {a.com: {window: 60, hits: 10, sitemaps: paths}, "
                "c.com: {sitemaps: [https://c.com/s.xml]}, d.com: {sitemaps: robots}}")
    assert old.diff(new) == ['~ sitemaps a.com: "robots" -> "paths"',
                             '- sitemaps b.com: "off"', '+ sitemaps d.com: "robots"']
    changed = old.without_throttle("a.com").with_blacklisted("x.com")
    assert changed.sitemaps == old.sitemaps
    assert changed.to_data()["domains"]["a.com"] == {"sitemaps": "robots"}
