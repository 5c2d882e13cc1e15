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
