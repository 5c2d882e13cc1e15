"""The crawler's own link extraction gives what Scrapy's LinkExtractor gives, only faster."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scrapy.http import HtmlResponse, TextResponse
from scrapy.link import Link
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor
from scrapy.utils.url import url_has_any_extension

from scrapy_cluster.crawler.common.link_rules import (
    _AUTHORITY_END,
    LinkRules,
    has_extension,
    host_in_domains,
    rules_for,
    select_links,
)
from scrapy_cluster.crawler.page_links import extract_links, page_links
from scrapy_cluster.sitegen.relative_site import RelativeSite, RelativeSiteConfig

HREFS = [
    "http://a.test/x", "HTTP://A.test/Y", "https://a.test/p?q=1&b=2", "http://a.test/p?",
    "http://a.test/p#", "http://a.test/p#frag", "/rel", "rel2", "../up", "http://a.test/a b",
    " http://a.test/ws\n", "http://a.test/%zz", "http://a.test/%20ok", "http://ex\u00e4mple.test/\u00fc",
    "http://a.test/p;x", "http://a.test/p;", "mailto:x@y", "javascript:void(0)", "ftp://x/y",
    "//proto.rel/x", "http://a.test:8080/x", "http://a.test/./b/../c", "http://a.test/x?a=1#b",
    "?only=query", "#only", "", "http://a.test/[x]", "http://user:pw@a.test/x",
    "http://a.test/x'y", 'http://a.test/x"y', "http://a.test/x|y", "http://a.test/x^y",
    "http://a.test/x{y}", "http://[::1]:80/x", "http://a.test/x/", "https://a.test",
    "http://A.TEST/x", "http://a.test/x",
]


def _page(base: str) -> HtmlResponse:
    anchors = "".join(f'<a href="{href.replace(chr(34), "&quot;")}" rel="{"nofollow" if i % 2 else ""}">'
                      f"t<b>{i}</b> </a><area href=\"{href.replace(chr(34), '&quot;')}z\">"
                      for i, href in enumerate(HREFS))
    body = f"<html><head>{base}</head><body>{anchors}<a>no href</a></body></html>"
    return HtmlResponse("http://page.test/d/p.html", body=body.encode(), encoding="utf-8")


def _scrapy_links(response: TextResponse) -> list[tuple[str, str, bool]]:
    found = LinkExtractor(deny_extensions=[], unique=True).extract_links(response)
    return [(link.url, link.text, link.nofollow) for link in found
            if link.url.startswith(("http://", "https://"))]


@pytest.mark.parametrize("base", ["", "<base href='http://base.test/dir/'>"])
def test_extract_links_matches_scrapy_link_extractor(base: str) -> None:
    response = _page(base)
    assert [(link.url, link.text, link.nofollow) for link in extract_links(response)] == \
        _scrapy_links(response)


def test_extract_links_reads_xhtml_namespaced_anchors() -> None:
    body = (b'<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><body>'
            b'<a href="/x">x</a></body></html>')
    response = HtmlResponse("http://page.test/", body=body, encoding="utf-8")
    assert [link.url for link in extract_links(response)] == ["http://page.test/x"]


def test_extract_links_of_an_empty_page_is_empty() -> None:
    assert extract_links(HtmlResponse("http://page.test/", body=b"", encoding="utf-8")) == []


@pytest.mark.parametrize("url", [
    "http://a/x.pdf", "http://a/x.PDF?x=1", "http://a/x.tar.gz", "http://a/x.gz", "http://a/a.b/c",
    "http://a/.pdf", "http://a/x.html", "http://a/x.pdf/", "http://a/x.jpg#f", "http://a/x.pdf.html",
    "http://a.pdf/", "http://a/x", "http://a/x.", "http://a.pdf", "http://a/x?y=z.pdf",
    "http://a/x#y.pdf", "http://a/x.pdf?y", "http://a/p;x.pdf", "http://u:p@a/x.PdF",
    "http://a?x=/y.pdf", "http://a#/y.pdf", "/rel/x.pdf",
])
def test_has_extension_agrees_with_scrapy(url: str) -> None:
    extensions = frozenset(f".{e}" for e in [*IGNORED_EXTENSIONS, "tar.gz"])
    assert has_extension(url, extensions) == url_has_any_extension(url, extensions)


def test_rules_for_equal_filters_is_built_once() -> None:
    meta = {"allowed_domains": ["a.test"], "deny_regex": ["/x"]}
    assert rules_for(meta) is rules_for(dict(meta))


# --- CRAWLER_MAX_LINKS_PER_PAGE ---------------------------------------------------------------

def _numbered_links(hrefs: list[str]) -> HtmlResponse:
    anchors = "".join(f'<a href="{href}">{href}</a>' for href in hrefs)
    return HtmlResponse("http://page.test/", body=f"<html><body>{anchors}</body></html>".encode(),
                        encoding="utf-8")


def test_page_links_keeps_the_first_max_links_and_counts_the_rest() -> None:
    found = page_links(_numbered_links([f"/l/{n}" for n in range(10)]), max_links=4)
    assert ([link.url for link in found.links], found.dropped) == \
        ([f"http://page.test/l/{n}" for n in range(4)], 6)


def test_page_links_counts_duplicates_within_the_limit_once() -> None:
    found = page_links(_numbered_links(["/a", "/a", "/b", "/a", "/c", "/d"]), max_links=3)
    assert ([link.url for link in found.links], found.dropped) == \
        (["http://page.test/a", "http://page.test/b", "http://page.test/c"], 1)


def test_page_links_counts_every_href_past_the_limit_unresolved() -> None:
    found = page_links(_numbered_links(["/a", "/a", "mailto:x@y", "/b"]), max_links=1)
    assert (len(found.links), found.dropped) == (1, 3)


def test_page_links_without_a_limit_is_extract_links() -> None:
    response = _page("")
    found = page_links(response, max_links=0)
    assert (found.links, found.dropped) == (extract_links(response), 0)


def test_page_links_at_exactly_the_limit_drops_nothing() -> None:
    found = page_links(_numbered_links(["/a", "/b"]), max_links=2)
    assert (len(found.links), found.dropped) == (2, 0)


def test_links_past_the_limit_are_filtered_as_max_links() -> None:
    found = page_links(_numbered_links([f"/l/{n}" for n in range(5)]), max_links=2)
    selection = select_links(found.links, {"maxdepth": 1}, 0.0, dropped=found.dropped)
    assert (len(selection.follow), dict(selection.filtered)) == (2, {"max_links": 3})


def test_links_past_the_limit_stay_max_links_when_the_rest_hit_maxdepth() -> None:
    found = page_links(_numbered_links([f"/l/{n}" for n in range(5)]), max_links=2)
    selection = select_links(found.links, {"maxdepth": 0}, 0.0, dropped=found.dropped)
    assert (selection.follow, dict(selection.filtered)) == ([], {"max_links": 3, "maxdepth": 2})


def test_filter_answers_are_remembered_per_url_and_bounded() -> None:
    from scrapy_cluster.crawler.common import link_rules as links_module

    rules = links_module.LinkRules.from_meta({"allowed_domains": ["a.com"],
                                             "deny_regex": ["/private/"]})
    assert rules.refusal("http://b.com/x") == "offsite"
    assert rules.refusal("http://a.com/private/1") == "deny_regex"
    assert rules.refusal("http://a.com/doc.pdf") == "deny_extensions"
    assert rules.refusal("http://a.com/ok") is None
    assert rules.refusal("http://b.com/x") == "offsite"  # remembered: same answer
    assert len(rules._answers) == 4
    for i in range(links_module.REFUSAL_MEMO + 5):
        rules.refusal(f"http://a.com/{i}")
    assert len(rules._answers) <= links_module.REFUSAL_MEMO


# --- fast paths of the link filters against their reference ----------------------------------

def _reference_has_extension(url: str, extensions: frozenset[str]) -> bool:
    """``has_extension`` before its fast paths: the path located, then every dot tried."""
    if not extensions:
        return False
    authority = url.find("//")
    found = _AUTHORITY_END.search(url, authority + 2 if authority != -1 else 0)
    if found is None or found.group() != "/":
        return False
    path = url[found.start():].split("#", 1)[0].split("?", 1)[0].lower()
    segment = path[path.rfind("/") + 1:].split(";", 1)[0]
    dot = segment.find(".")
    while dot != -1:
        if segment[dot:] in extensions:
            return True
        dot = segment.find(".", dot + 1)
    return False


def _reference_host_in_domains(url: str, domains: Sequence[str]) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return any(host == d or host.endswith("." + d) for d in (d.lower() for d in domains))


_URL_TAILS = st.text(alphabet="aZ.:/?#;%-_5xXpdfPDFgzİΣσ ", max_size=24)
_URLS = st.one_of(
    st.builds(lambda prefix, tail: prefix + tail,
              st.sampled_from(["http://", "https://", "HTTP://", "//", "", "/", "ftp://",
                               "http://a.test", "http://a.test/", "http://a.test:80/d/",
                               "http://u@a.pdf", "x//y/"]), _URL_TAILS),
    _URL_TAILS)
_EXTENSIONS = frozenset(f".{e}" for e in [*IGNORED_EXTENSIONS, "tar.gz", "x", "σ", "i̇"])


@settings(max_examples=3000, deadline=None)
@given(_URLS)
@example("http://a/x.pdf?y=/z/")
@example("http://a/x/?q#f.pdf")
@example("http://a.pdf/")
@example("http://a.pdf")
@example("http://a/b.PDF;p")
@example("/rel/x.pdf")
@example("http://a/xΣ.σ")
@example("http:/x.pdf")
def test_has_extension_equals_its_reference(url: str) -> None:
    assert has_extension(url, _EXTENSIONS) == _reference_has_extension(url, _EXTENSIONS)
    assert has_extension(url, frozenset()) is False


def test_the_relative_sites_links_keep_their_extension_answers() -> None:
    site = RelativeSite(RelativeSiteConfig(), 8080)
    pages = [site.url("127.0.0.2", path) for path in ("/t/", "/t/3/", "/t/caf%C3%A9/")]
    urls = [urljoin(page, href) for page in pages for href in site.hrefs("127.0.0.2")]
    urls += [f"{url}.pdf" for url in urls] + [f"{url}/a.jpg?x=1" for url in urls]
    extensions = rules_for({}).deny_extensions
    assert [has_extension(url, extensions) for url in urls] == \
        [_reference_has_extension(url, extensions) for url in urls]
    assert any(has_extension(url, extensions) for url in urls)


@settings(max_examples=2000, deadline=None)
@given(st.one_of(_URLS, st.builds(lambda host, rest: f"http://{host}{rest}",
                                  st.sampled_from(["a.com", "A.Com", "b.a.com", "xa.com",
                                                   "a.com:80", "[::1]", "u:p@a.com", ""]),
                                  _URL_TAILS)),
       st.lists(st.sampled_from(["a.com", "A.COM", "b.a.com", "com", "", "::1", "x"]),
                max_size=3))
def test_host_in_domains_equals_its_reference(url: str, domains: list[str]) -> None:
    try:
        expected = _reference_host_in_domains(url, domains)
    except ValueError:  # urlsplit refuses it (e.g. an unbalanced '['): so must the fast path
        with pytest.raises(ValueError):
            host_in_domains(url, domains)
        return
    assert host_in_domains(url, domains) == expected


@pytest.mark.parametrize("meta", [{}, {"deny_extensions": ["html"]}, {"allowed_domains": ["a.com"]},
                                  {"deny_regex": ["/p/"]}, {"allow_regex": ["x"]}])
def test_refusal_with_or_without_its_memo_equals_the_filters(meta: dict[str, Any]) -> None:
    rules = LinkRules.from_meta(meta)
    urls = ["http://a.com/x.html", "http://b.com/p/x", "http://a.com/doc.PDF", "http://a.com/",
            "http://a.com/x.html"]
    assert [rules.refusal(url) for url in urls] == [rules._refusal(url) for url in urls]
    assert bool(rules._answers) == bool(meta.get("allowed_domains") or meta.get("deny_regex")
                                        or meta.get("allow_regex"))


@pytest.mark.parametrize("meta", [{"maxdepth": 2}, {"maxdepth": 2, "deny_extensions": []},
                                  {"maxdepth": 2, "deny_regex": ["item"]},
                                  {"maxdepth": 2, "allowed_domains": ["127.0.0.2"]}])
def test_select_links_counts_as_the_filters_answer_link_by_link(meta: dict[str, Any]) -> None:
    site = RelativeSite(RelativeSiteConfig(), 8080)
    page = site.url("127.0.0.2", "/t/1/")
    urls = [urljoin(page, href) for href in site.hrefs("127.0.0.2")]
    links = [Link(url) for url in [*urls, "http://127.0.0.2/a.PDF", "http://127.0.0.2/b.zip?x"]]
    rules = LinkRules.from_meta(meta)
    expected = [(link, rules._refusal(link.url)) for link in links]
    for _ in range(2):  # the second time from the memo, if any
        selection = select_links(links, meta, 0.0)
        assert selection.follow == [link for link, reason in expected if reason is None]
        assert selection.filtered == Counter(reason for _, reason in expected if reason)
        assert all(selection.filtered.values())
