"""The crawler's own link extraction gives what Scrapy's LinkExtractor gives, only faster."""

from __future__ import annotations

import pytest
from scrapy.http import HtmlResponse, TextResponse
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor
from scrapy.utils.url import url_has_any_extension

from scrapy_cluster.crawler.links import extract_links, has_extension, rules_for

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
