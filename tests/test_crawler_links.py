"""The crawler's own link extraction gives what Scrapy's LinkExtractor gives, only faster."""

from __future__ import annotations

import pytest
from scrapy.http import HtmlResponse, TextResponse
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor
from scrapy.utils.url import url_has_any_extension

from scrapy_cluster.crawler.common.link_rules import has_extension, rules_for, select_links
from scrapy_cluster.crawler.page_links import extract_links, page_links

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
