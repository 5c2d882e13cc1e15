"""The fast engine's link extractor parses with lxml directly: the same encoding and links as the
parsel-based extractor it replaced and as the Scrapy crawler (``links.page_links`` on a Scrapy
response), for pages in many encodings, with BOMs, broken markup and hostile bytes."""

from __future__ import annotations

import random
import threading
from typing import Any

import parsel
import pytest
from lxml import etree
from scrapy.http import TextResponse
from scrapy.http.headers import Headers
from scrapy.linkextractors import LinkExtractor
from scrapy.responsetypes import responsetypes
from w3lib.encoding import html_to_unicode
from w3lib.html import get_base_url

from scrapy_cluster.crawler.common.link_rules import links_in_tree
from scrapy_cluster.crawler.common.url_join import PlainJoin
from scrapy_cluster.crawler.fast import extract
from scrapy_cluster.crawler.fast.extract import (
    BASE_URL_SCAN_CHARS,
    Extracted,
    LxmlExtractor,
    page_encoding,
    parser_input,
    response_kind,
)
from scrapy_cluster.crawler.page_links import page_links

URL = "http://example.com/dir/page.html"
MAX_LINKS = 1000


def parsel_extract(body: bytes, *, url: str, content_type: str | None,
                   content_disposition: str | None = None,
                   max_links: int = MAX_LINKS) -> tuple[str | None, list[Any], int]:
    """The extractor as it was before lxml parsed directly: a parsel ``Selector`` built from
    the text w3lib decodes, ``<base>`` read from that text."""
    kind = response_kind(content_type, url, body, content_disposition=content_disposition)
    if kind == "binary":
        return None, [], 0
    encoding = page_encoding(body, content_type)
    text = html_to_unicode(f"charset={encoding}", body)[1]
    root = parsel.Selector(text=text, type="xml" if kind == "xml" else "html").root
    base_url = get_base_url(text[:BASE_URL_SCAN_CHARS], url, encoding)
    found = links_in_tree(root, base_url=base_url, page_url=url, encoding=encoding,
                          max_links=max_links)
    return encoding, found.links, found.dropped


def lxml_extract(body: bytes, *, url: str, content_type: str | None,
                 content_disposition: str | None = None,
                 max_links: int = MAX_LINKS) -> tuple[str | None, list[Any], int]:
    found = LxmlExtractor()(body, url=url, content_type=content_type,
                            content_disposition=content_disposition, max_links=max_links)
    return found.encoding, found.links, found.dropped


def scrapy_extract(body: bytes, *, url: str, content_type: str | None,
                   max_links: int = MAX_LINKS) -> tuple[str | None, list[Any], int]:
    """What the Scrapy crawler reads from the same download: ``response.encoding`` and
    ``links.page_links``."""
    headers = Headers()
    if content_type is not None:
        headers["Content-Type"] = content_type
    cls = responsetypes.from_args(headers=headers, url=url, body=body)
    response = cls(url=url, status=200, headers=headers, body=body)
    if not isinstance(response, TextResponse):
        return None, [], 0
    found = page_links(response, max_links=max_links)
    return response.encoding, found.links, found.dropped


_LINK_EXTRACTOR = LinkExtractor(canonicalize=False, unique=True, deny_extensions=[],
                                tags=("a", "area"), attrs=("href",))


def link_extractor_links(body: bytes, *, url: str,
                         content_type: str | None) -> list[tuple[str, str, bool]]:
    """Scrapy's own ``LinkExtractor`` on the response the Scrapy crawler builds: it resolves
    every href with ``urljoin`` and ``safe_url_string`` itself. Its ``ftp:`` and ``file:``
    links, which the crawler does not follow, are left out; it has no link limit."""
    headers = Headers()
    if content_type is not None:
        headers["Content-Type"] = content_type
    response = responsetypes.from_args(headers=headers, url=url, body=body)(
        url=url, status=200, headers=headers, body=body)
    if not isinstance(response, TextResponse):
        return []
    return [(link.url, link.text, link.nofollow) for link in _LINK_EXTRACTOR.extract_links(response)
            if link.url.startswith(("http://", "https://"))]


def anchors(*hrefs: str) -> str:
    return "".join(f'<a href="{href}">{href}</a>' for href in hrefs)


HTML = "text/html"
UTF8 = "text/html; charset=utf-8"
_BASIC = ('<html><head><title>t</title></head><body><p>x</p>'
          + anchors("a.html", "/b/c.html", "http://Other.ORG/x y", "//cdn.example.net/s",
                    "mailto:x@y", "#frag", "?q=1", "javascript:void(0)", "a.html")
          + '<area href="map.html"><a href="n.html" rel="nofollow">n</a></body></html>')
_CAFE = '<html><body><a href="café.html">café crème</a><a href="/ü?ß=1">üß</a></body></html>'
_RELATIVE = anchors("k/", "./k2/", "../up/", "../../../../../x", "..", ".", "a/..", "a/.", "a/./b",
                    "a/../b", "/root/../r2", "/..", "a//b", "/a//b", "?", "#", "?#f", "a?#f",
                    "#a?b", "?q=1#f", "?sort=asc&page=2", "#top", "", ".hidden", "~user/",
                    "a:b/c", "b/c:d", "!$&'()*+,=")
_QUOTED = (anchors("a%20b.html", "%zz", "a%E9", "%C3%A9/", "a b.html", "/x%2Fy", "?q=a%20b",
                   "#%41", "?q='x'", "#a#b", "a;p", "a;p/b", "a;", "a;?x", "b;#f", "?a;b", "a|b", "a[b]", "a\\b",
                   "/a\\..\\b")
           + '<a href="a\tb">tab</a><a href="c\nd">newline</a><a href=" e.html ">spaces</a>')
_HOSTS = anchors("http://bücher.example/p", "HTTP://EXAMPLE.COM/X", "http://Example.com:8080/y",
                 "//bücher.example/z", "//EXAMPLE.com/w", "http://user:pw@example.com/u",
                 "https://example.com:443/s", "http://127.0.0.1:8080/ip", "http://[::1]:8080/v6")
_SCHEMES = anchors("javascript:void(0)", "javascript:go('/x')", "mailto:x@y", "tel:+123",
                   "data:text/html,hi", "ftp://x/y", "http:relative", "https:other",
                   "about:blank", "HTTP:/abs", "c.html")
_NAV = anchors("/", "/section/news.html", "/section/blog.html", "/about/", "/contact.html#form")


def _realistic(children: int) -> str:
    """A listing page of a crawled site: the menu at the top and the bottom, child pages,
    parents' siblings, paging and sorting links, fragments."""
    return ("<html><head><title>listing</title></head><body><nav>" + _NAV + "</nav><ul>"
            + "".join(f'<li><a href="{k}/">item {k}</a></li>' for k in range(children))
            + "</ul>" + anchors(*(f"../{k}/" for k in range(5)), "?sort=asc&page=2",
                               "?sort=desc&page=3", "#top", "#main", "index.html#comments",
                               "../index.html?ref=nav", "./")
            + "<footer>" + _NAV + "</footer></body></html>")

PAGES: list[tuple[str, bytes, str | None]] = [
    ("utf8 declared in the header", _BASIC.encode(), UTF8),
    ("utf8 non-ascii, header", _CAFE.encode(), UTF8),
    ("utf8 non-ascii, meta charset", f'<meta charset="utf-8">{_CAFE}'.encode(), HTML),
    ("utf8 undeclared", _CAFE.encode(), HTML),
    ("utf8 bom", b"\xef\xbb\xbf" + _CAFE.encode(), HTML),
    ("utf8 bom, header says latin-1", b"\xef\xbb\xbf" + _CAFE.encode(),
     "text/html; charset=latin-1"),
    ("utf8 bom, ascii", b"\xef\xbb\xbf" + _BASIC.encode(), "text/html; charset=cp1251"),
    ("utf16le bom", b"\xff\xfe" + _CAFE.encode("utf-16-le"), HTML),
    ("utf16be bom", b"\xfe\xff" + _CAFE.encode("utf-16-be"), HTML),
    ("utf16 header, no bom", _CAFE.encode("utf-16-be"), "text/html; charset=utf-16"),
    ("utf32 bom", b"\xff\xfe\x00\x00" + _CAFE.encode("utf-32-le"), HTML),
    ("latin1 undeclared", _CAFE.encode("latin-1"), HTML),
    ("latin1 in the header", _CAFE.encode("latin-1"), "text/html; charset=ISO-8859-1"),
    ("cp1252 meta http-equiv",
     b'<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">'
     b'<a href="\x80\x93.html">\x93quoted\x94</a><a href="x\x81y">hole</a>', HTML),
    ("cp1251 meta", '<meta charset="windows-1251"><a href="/путь">путь</a>'.encode("cp1251"),
     HTML),
    ("koi8-r header", '<a href="путь.html">путь</a>'.encode("koi8-r"),
     "text/html; charset=koi8-r"),
    ("shift_jis meta", '<meta charset="shift_jis"><a href="日本.html">日本</a>'.encode("cp932"),
     HTML),
    ("gb18030 header", '<a href="中文.html">中文</a>'.encode("gb18030"),
     "text/html; charset=gbk"),
    ("iso-8859-15 ascii only", _BASIC.encode(), "text/html; charset=iso-8859-15"),
    ("ascii undeclared", _BASIC.encode(), HTML),
    ("bogus charset", _CAFE.encode(), "text/html; charset=no-such-thing"),
    ("meta and header disagree", f'<meta charset="koi8-r">{_CAFE}'.encode(), UTF8),
    ("invalid utf8 bytes", b'<a href="a\xff.html">x\xfe\xc3(</a><a href="b.html">\xe2\x82</a>',
     UTF8),
    ("truncated utf8 at the end", _CAFE.encode()[:-1] + b"\xc3", UTF8),
    ("surrogate bytes in utf8", b'<a href="\xed\xa0\x80.html">s</a>', UTF8),
    ("mixed utf8 and latin1", "<a href='é.html'>é</a>".encode() + b"<a href='\xe9'>\xe9</a>",
     HTML),
    ("nul bytes", b'\x00<a href="a\x00b.html">x\x00y</a>\x00', UTF8),
    ("leading and trailing whitespace", b" \t\r\n\x0c<a href='a'>a</a>\n\n ", UTF8),
    ("leading information separators", b"\x1c\x1d\x1e\x1f<a href='a'>a</a>\x1f", UTF8),
    ("leading nbsp and trailing ideographic space",
     "\u00a0\u2003<a href='a'>a</a>\u3000".encode(), UTF8),
    ("trailing non-ascii letter", "<a href='a'>a</a>é".encode(), UTF8),
    ("empty body", b"", UTF8),
    ("whitespace only", b" \n\t ", UTF8),
    ("nul only", b"\x00\x00", UTF8),
    ("a bom only", b"\xef\xbb\xbf", HTML),
    ("text without markup", b"just some text, no links", UTF8),
    ("broken markup", b'<html><body><a href="a.html">one<a href="b.html">two</p></div>'
     b'<a href=c.html>three<a href="d.html"<a href="e.html">five</a><table><a href="f">'
     b'</td></tr><area href="g"></body></head><a href="h">after', HTML),
    ("unclosed comment", b'<a href="a">a</a><!-- <a href="b">b</a>', HTML),
    ("script and template", b'<script>var s = "<a href=\'x\'>";</script>'
     b'<template><a href="t.html">t</a></template><noscript><a href="n">n</a></noscript>',
     HTML),
    ("base href relative", b'<head><base href="/sub/"></head>' + _BASIC.encode(), UTF8),
    ("base href absolute other host",
     b'<base href="http://base.example.org/x/">' + _BASIC.encode(), UTF8),
    ("base href after 4096 chars is ignored",
     b"<p>" + b"x" * 5000 + b'</p><base href="/late/"><a href="a.html">a</a>', UTF8),
    ("base href non-ascii in cp1251",
     '<meta charset="cp1251"><base href="/база/"><a href="a">a</a>'.encode("cp1251"), HTML),
    ("href whitespace and entities",
     b'<a href="  a b.html\n">x</a><a href="&#x68;ttp://e.org/&amp;q">y</a>', UTF8),
    ("uppercase tags", b'<A HREF="up.html">UP</A><AREA HREF="ar.html">', UTF8),
    ("xml declaration in html", b'<?xml version="1.0" encoding="iso-8859-1"?>'
     b'<html><a href="x\xc3\xa9.html">x</a></html>', UTF8),
    ("xhtml as xml", b'<?xml version="1.0" encoding="utf-8"?>'
     b'<html xmlns="http://www.w3.org/1999/xhtml"><body><a href="x.html">x</a>'
     b'<area href="y.html"/></body></html>', "application/xhtml+xml"),
    ("xml with a lying declaration", b'<?xml version="1.0" encoding="iso-8859-1"?>'
     + '<r><a href="é.html">é</a></r>'.encode(), "text/xml"),
    ("xml broken", b'<r><a href="a.html">a<b></r><a href="b.html">', "text/xml"),
    ("xml entity declaration", b'<!DOCTYPE r [<!ENTITY e "ent.html">]>'
     b'<r><a href="&e;">&e;</a></r>', "application/xml"),
    ("xml empty", b"", "text/xml"),
    ("plain text type", b'<a href="t.html">t</a>', "text/plain"),
    ("no content type, html body", _BASIC.encode(), None),
    ("binary type", b'<a href="x.html">x</a>', "application/pdf"),
    ("image bytes", b"\x89PNG\r\n\x1a\n\x00\x00<a href='x'>", "image/png"),
    ("deep nesting", b"<div>" * 20_000 + b'<a href="deep.html">deep</a>', HTML),
    ("link text with markup, comments, entities and none", b'<a href="a"><b>bold</b> and '
     b'<!-- c --> text</a><a href="b">&amp; &eacute;</a><a href="c"></a><a href="d"><!-- x -->'
     b'</a><a href="e"> <img alt="i"> </a><area href="f" alt="x">', UTF8),
    ("many links past the limit", "".join(
        f'<a href="/l{n}.html">{n}</a>' for n in range(1500)).encode(), UTF8),
    ("relative forms and dot segments", _RELATIVE.encode(), UTF8),
    ("percent-encodings, spaces and other quoted characters", _QUOTED.encode(), UTF8),
    ("quoted characters in latin-1", _QUOTED.encode("latin-1"), "text/html; charset=latin-1"),
    ("idn, upper-case, ports, user info", _HOSTS.encode(), UTF8),
    ("javascript, mailto and other schemes", _SCHEMES.encode(), UTF8),
    ("relative forms in utf-16", b"\xff\xfe" + _RELATIVE.encode("utf-16-le"), HTML),
    ("base href relative with dot segments",
     b'<head><base href="../base/./dir/"></head>' + _RELATIVE.encode(), UTF8),
    ("base href absolute other host with a query",
     b'<head><base href="https://other.example/b/?x=1"></head>' + _RELATIVE.encode(), UTF8),
    ("base href idn", '<head><base href="http://bücher.example/b/"></head>'.encode()
     + _RELATIVE.encode(), UTF8),
    ("base href upper-case host with a port",
     b'<head><base href="HTTP://Other.EXAMPLE:8080"></head>' + _RELATIVE.encode(), UTF8),
    ("base href with a space", b'<head><base href="/a b/"></head>' + _RELATIVE.encode(), UTF8),
    ("base href upper-case host", b'<head><base href="http://Other.EXAMPLE/b/"></head>'
     + _RELATIVE.encode(), UTF8),
    ("base href with empty and dot segments",
     b'<head><base href="http://example.com/a//b/./c/"></head>' + _RELATIVE.encode(), UTF8),
    ("realistic listing page", _realistic(20).encode(), UTF8),
    ("realistic listing page, latin-1", _realistic(20).replace("item", "élément").encode(
        "latin-1"), "text/html; charset=iso-8859-1"),
]


@pytest.mark.parametrize("reference", [parsel_extract, scrapy_extract],
                         ids=["parsel-extractors", "scrapy-crawlers"])
@pytest.mark.parametrize(("body", "content_type"), [(b, c) for _, b, c in PAGES],
                         ids=[name for name, _, _ in PAGES])
def test_links_and_encoding_equal_the_reference_extraction(
        body: bytes, content_type: str | None, reference: Any) -> None:
    assert lxml_extract(body, url=URL, content_type=content_type) == \
        reference(body, url=URL, content_type=content_type)


@pytest.mark.parametrize(("body", "content_type"), [(b, c) for _, b, c in PAGES],
                         ids=[name for name, _, _ in PAGES])
def test_links_equal_scrapys_link_extractor(body: bytes, content_type: str | None) -> None:
    """The references above resolve hrefs with ``links_in_tree`` too; Scrapy's
    ``LinkExtractor`` resolves them with the formula, so a wrong ``PlainJoin`` fails here."""
    found = lxml_extract(body, url=URL, content_type=content_type, max_links=0)[1]
    assert [(link.url, link.text, link.nofollow) for link in found] == \
        link_extractor_links(body, url=URL, content_type=content_type)


@pytest.mark.parametrize(("body", "content_type"), [(b, c) for _, b, c in PAGES],
                         ids=[name for name, _, _ in PAGES])
def test_the_parser_gets_the_bytes_parsel_gets(body: bytes, content_type: str | None) -> None:
    """Byte for byte what ``parsel.Selector(text=response.text)`` hands lxml, and the text
    ``<base href>`` is looked for in: the same tree, whatever lxml makes of it."""
    encoding = page_encoding(body, content_type)
    text = html_to_unicode(f"charset={encoding}", body)[1]
    assert parser_input(body, encoding) == \
        (text.strip().replace("\x00", "").encode("utf-8") or b"<html/>",
         text[:BASE_URL_SCAN_CHARS])


def test_the_page_set_exercises_links_limits_and_both_parser_inputs() -> None:
    """Guards the tests above against passing vacuously."""
    results = {name: lxml_extract(body, url=URL, content_type=ctype) for name, body, ctype in PAGES}
    assert len(results["utf8 declared in the header"][1]) == 8
    assert results["many links past the limit"][1:] != ([], 0)
    assert results["many links past the limit"][2] == 500
    assert [link.url for link in results["base href relative"][1]][:2] == \
        ["http://example.com/sub/a.html", "http://example.com/b/c.html"]
    assert (results["cp1251 meta"][0], results["cp1251 meta"][1][0].text) == ("cp1251", "путь")
    assert results["latin1 in the header"][0] == "cp1252"
    assert results["latin1 in the header"][1][0].text == "café crème"
    assert lxml_extract(b"\x89PNG\r\n\x1a\n\x00\x00", url="http://example.com/i.png",
                        content_type="image/png") == (None, [], 0)
    direct = [name for name, body, ctype in PAGES
              if response_kind(ctype, URL, body) != "binary"
              and body.strip() and parser_input(body, page_encoding(body, ctype))[0]
              in (body.strip(), body[3:].strip())]
    assert {"utf8 declared in the header", "utf8 non-ascii, header", "utf8 bom",
            "iso-8859-15 ascii only", "ascii undeclared"} <= set(direct)
    assert not {"latin1 undeclared", "invalid utf8 bytes", "nul bytes", "utf16le bom",
                "leading information separators"} & set(direct)


def test_most_links_of_the_relative_pages_skip_the_formula() -> None:
    """Guards the comparisons with ``LinkExtractor`` against passing without ``PlainJoin``."""
    root = etree.HTML(_realistic(20) + _RELATIVE)
    hrefs = [element.get("href") for element in root.iter("a")]
    join = PlainJoin.for_page(URL, URL, "utf-8")
    assert join is not None
    assert sum(join(href) is not None for href in hrefs) >= len(hrefs) - 3
    results = {name: lxml_extract(body, url=URL, content_type=ctype, max_links=0)[1]
               for name, body, ctype in PAGES}
    assert len(results["realistic listing page"]) == 37
    assert len(results["relative forms and dot segments"]) >= 20
    assert [link.url for link in results["base href relative with dot segments"]][:3] == \
        ["http://example.com/base/dir/k/", "http://example.com/base/dir/k2/",
         "http://example.com/base/up/"]


def test_clean_utf8_reaches_the_parser_as_the_body_itself() -> None:
    body = b"  " + _CAFE.encode() + b"\n"
    document, head = parser_input(body, "utf-8")
    assert (document, head) == (body.strip(), body.decode()[:BASE_URL_SCAN_CHARS])


def test_other_encodings_reach_the_parser_as_the_decoded_text_in_utf8() -> None:
    body = _CAFE.encode("cp1252")
    assert parser_input(body, "cp1252") == (_CAFE.encode(), _CAFE)


def test_every_codec_taken_as_ascii_compatible_decodes_ascii_to_itself() -> None:
    ascii_bytes = bytes(range(128))
    assert all(ascii_bytes.decode(codec) == ascii_bytes.decode("ascii")
               for codec in extract._ASCII_COMPATIBLE)


_SEEDS = [page[1] for page in PAGES if len(page[1]) < 2000]
_PIECES = [b"<", b">", b"</a>", b"<a href=", b'"', b"'", b"\x00", b"\xc3", b"\xa9", b"\xe9",
           b"\x81", b"\xa0", b"\x1c", b" ", b"\n", b"<base href='/b/'>", b"<meta charset=cp1251>",
           b'<meta charset="utf-16">', b"&#0;", b"&amp;", b"<!--", b"-->", b"]]>", b"\xef\xbb\xbf",
           b"\xff\xfe", b"<?xml version='1.0'?>", b"<area href=x>", b"<script>", b"\xe2\x80\x83"]
_TYPES = [HTML, UTF8, "text/html; charset=latin-1", "text/html; charset=shift_jis",
          "text/html; charset=utf-16", "text/xml", "application/xhtml+xml", "text/plain", None]


def _mutated(rng: random.Random) -> bytes:
    body = bytearray(rng.choice(_SEEDS))
    for _ in range(rng.randrange(1, 8)):
        position = rng.randrange(len(body) + 1)
        choice = rng.random()
        if choice < 0.5:
            body[position:position] = rng.choice(_PIECES)
        elif choice < 0.8:
            del body[position:position + rng.randrange(1, 6)]
        else:
            body[position:position] = bytes([rng.randrange(256)])
    return bytes(body)


def test_mutated_pages_give_the_parsel_extractors_links_and_parser_input() -> None:
    rng = random.Random(20261124)
    differing: list[tuple[bytes, str | None, object]] = []
    for _ in range(1500):
        body, content_type = _mutated(rng), rng.choice(_TYPES)
        max_links = rng.choice([0, 1, 3, MAX_LINKS])
        new = lxml_extract(body, url=URL, content_type=content_type, max_links=max_links)
        if new != parsel_extract(body, url=URL, content_type=content_type, max_links=max_links):
            differing.append((body, content_type, max_links))
        encoding = page_encoding(body, content_type)
        text = html_to_unicode(f"charset={encoding}", body)[1]
        if parser_input(body, encoding) != (text.strip().replace("\x00", "").encode("utf-8")
                                            or b"<html/>", text[:BASE_URL_SCAN_CHARS]):
            differing.append((body, content_type, "parser input"))
    assert differing == []


def test_a_document_lxml_refuses_gives_its_encoding_and_no_links() -> None:
    class Refusing(LxmlExtractor):
        def _parse(self, document: bytes, *, xml: bool) -> Any:
            raise etree.XMLSyntaxError("refused", 1, 1, 1)

    found = Refusing()(_BASIC.encode(), url=URL, content_type=UTF8, content_disposition=None,
                       max_links=MAX_LINKS)
    assert found == Extracted("utf-8")


@pytest.mark.parametrize("body", [b"", b"\x00", b"\xff\xfe", b"\xfe\xff\x00", b"<" * 10_000,
                                  b"\xff" * 5000, b"<a href=" + b'"' * 3000,
                                  b"<a href='http://[::1'>v6</a><a href='http://a:99999/'>p</a>",
                                  b"\xef\xbb\xbf\x00\x00\xfe\xff"])
def test_hostile_bytes_never_raise(body: bytes) -> None:
    for content_type in (UTF8, "text/xml", "text/html; charset=utf-32", None):
        found = LxmlExtractor()(body, url=URL, content_type=content_type,
                                content_disposition=None, max_links=MAX_LINKS)
        assert (found.encoding, found.links, found.dropped) == \
            parsel_extract(body, url=URL, content_type=content_type)


def test_one_extractor_used_from_several_threads_gives_each_the_same_links() -> None:
    extractor = LxmlExtractor()
    pages = [(body, ctype) for _, body, ctype in PAGES[:20]]
    expected = [lxml_extract(body, url=URL, content_type=ctype) for body, ctype in pages]
    results: list[list[Any]] = []

    def work() -> None:
        found = []
        for _ in range(20):
            for body, ctype in pages:
                out = extractor(body, url=URL, content_type=ctype, content_disposition=None,
                                max_links=MAX_LINKS)
                found.append((out.encoding, out.links, out.dropped))
        results.append(found)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected * 20] * 4
