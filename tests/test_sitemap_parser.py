"""The streaming sitemap parser and the sitemap host rules (crawler/common/sitemaps.py).

Every format, gzip by magic number at any chunk boundary, chunk boundaries inside tags and
entities, lastmod formats, the limits (entries, inflated bytes, elements held), refused DTDs,
malformed input, flat memory, and the URL sets against ultimate-sitemap-parser (usp).
"""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from scrapy_cluster.crawler.common import sitemaps
from scrapy_cluster.crawler.common.sitemaps import (
    STEP,
    SitemapEntry,
    SitemapLimits,
    SitemapParser,
    SitemapResult,
    allowed,
    parse_sitemap,
)

SITE = "https://shop.example"
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def run(body: bytes, *, size: int = STEP, url: str = f"{SITE}/sitemap.xml",
        content_type: str | None = None, limits: SitemapLimits | None = None
        ) -> tuple[list[SitemapEntry], SitemapResult]:
    chunks = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
    stream = parse_sitemap(chunks, url=url, content_type=content_type,
                           limits=limits or SitemapLimits())
    return list(stream), stream.result


def locs(entries: list[SitemapEntry]) -> list[str]:
    return [entry.loc for entry in entries]


def epoch(year: int, month: int, day: int, hour: int = 0, minute: int = 0,
          second: int = 0) -> float:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


URLSET = f"""<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS} xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
  <!-- a comment -->
  <url>
    <loc> {SITE}/a?x=1&amp;y=2 </loc>
    <lastmod>2024-05-06</lastmod>
    <changefreq>daily</changefreq>
    <image:image><image:loc>{SITE}/img.png</image:loc></image:image>
  </url>
  <url><loc><![CDATA[{SITE}/b]]></loc><lastmod>2024-05-06T07:08:09+02:00</lastmod></url>
  <url><loc>/relative</loc></url>
  <url><lastmod>2024-01-01</lastmod></url>
  <url><loc>ftp://shop.example/file</loc></url>
  <url><loc>{SITE}/c</loc><priority>0.5</priority></url>
</urlset>
""".encode()
URLSET_ENTRIES = [
    SitemapEntry("url", f"{SITE}/a?x=1&y=2", epoch(2024, 5, 6)),
    SitemapEntry("url", f"{SITE}/b", epoch(2024, 5, 6, 5, 8, 9)),
    SitemapEntry("url", f"{SITE}/c", None),
]


def test_urlset_entries_and_refusals() -> None:
    entries, result = run(URLSET)
    assert entries == URLSET_ENTRIES
    assert result.stop is None and result.format == "urlset" and not result.gzip
    assert (result.urls, result.sitemaps) == (3, 0)
    assert result.refused == {"relative": 1, "empty": 1, "not_http": 1}
    assert result.document_bytes == result.raw_bytes == len(URLSET)


@pytest.mark.parametrize("root", [
    "<urlset>",                                                      # no namespace
    '<urlset xmlns="http://www.google.com/schemas/sitemap/0.84">',   # an old one
    '<sm:urlset xmlns:sm="http://www.sitemaps.org/schemas/sitemap/0.9">',
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">',
])
def test_urlset_whatever_its_namespace(root: str) -> None:
    prefix = "sm:" if root.startswith("<sm:") else ""
    body = (f"{root}<{prefix}url><{prefix}loc>{SITE}/1</{prefix}loc></{prefix}url>"
            f"<{prefix}url><{prefix}loc>{SITE}/2</{prefix}loc></{prefix}url>"
            f"</{prefix}urlset>").encode()
    entries, result = run(body)
    assert locs(entries) == [f"{SITE}/1", f"{SITE}/2"] and result.stop is None


def test_undeclared_prefix_is_tolerated() -> None:
    body = (f"<urlset {NS}><url><loc>{SITE}/1</loc><image:image><image:loc>{SITE}/i.png"
            f"</image:loc></image:image></url><url><loc>{SITE}/2</loc></url></urlset>").encode()
    entries, result = run(body, size=16)
    assert locs(entries) == [f"{SITE}/1", f"{SITE}/2"]
    assert result.stop is None


def test_nested_url_elements_are_not_entries() -> None:
    body = (f"<urlset><url><loc>{SITE}/1</loc><x:url xmlns:x='urn:x'><x:loc>{SITE}/no</x:loc>"
            f"</x:url></url></urlset>").encode()
    entries, _ = run(body)
    assert locs(entries) == [f"{SITE}/1"]


def test_sitemap_index() -> None:
    body = (f'<?xml version="1.0"?><sitemapindex {NS}>'
            f"<sitemap><loc>{SITE}/s1.xml.gz</loc><lastmod>2024-02-03T04:05:06Z</lastmod>"
            f"</sitemap><sitemap><loc>{SITE}/s2.xml</loc></sitemap></sitemapindex>").encode()
    entries, result = run(body)
    assert entries == [SitemapEntry("sitemap", f"{SITE}/s1.xml.gz", epoch(2024, 2, 3, 4, 5, 6)),
                       SitemapEntry("sitemap", f"{SITE}/s2.xml", None)]
    assert (result.format, result.urls, result.sitemaps) == ("sitemapindex", 0, 2)


TEXT = (f"\ufeff{SITE}/1\r\n\r\n   \n{SITE}/2  \n# a comment\nmailto:x@y.z\n/relative\n"
        f"HTTP://SHOP.EXAMPLE/3\n{SITE}/4").encode()


@pytest.mark.parametrize("size", [1, 5, 64, STEP])
def test_text_sitemap(size: int) -> None:
    entries, result = run(TEXT, size=size, url=f"{SITE}/sitemap.txt")
    assert locs(entries) == [f"{SITE}/1", f"{SITE}/2", "HTTP://SHOP.EXAMPLE/3", f"{SITE}/4"]
    assert result.format == "text" and result.stop is None
    assert result.refused == {"not_http": 3}


def test_text_sitemap_drops_long_lines_and_bad_utf8_without_buffering_them() -> None:
    long_line = f"{SITE}/".encode() + b"x" * 100_000
    body = b"\n".join([f"{SITE}/1".encode(), long_line, f"{SITE}/\xff".encode("latin-1"),
                       f"{SITE}/2".encode()])
    parser = SitemapParser(url=f"{SITE}/s.txt", content_type="text/plain")
    got: list[SitemapEntry] = []
    for i in range(0, len(body), 4096):
        got += parser.feed(body[i:i + 4096])
        assert len(parser._sink._pending) <= 4096 + 2048
    got += parser.close()
    assert locs(got) == [f"{SITE}/1", f"{SITE}/2"]
    assert parser.result.refused == {"too_long": 1, "not_utf8": 1}


def test_text_sitemap_told_by_content_type() -> None:
    body = f"# list\n{SITE}/1\n".encode()
    assert run(body, url=f"{SITE}/list")[1].stop == "unknown_format"
    entries, result = run(body, url=f"{SITE}/list", content_type="text/plain; charset=utf-8")
    assert locs(entries) == [f"{SITE}/1"] and result.format == "text"


RSS = f"""<?xml version="1.0" encoding="ISO-8859-1"?>
<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel>
  <title>News</title><link>{SITE}/</link>
  <atom:link href="{SITE}/feed" rel="self"/>
  <item><title>One</title><link>{SITE}/news/1</link>
    <pubDate>Mon, 06 May 2024 07:08:09 GMT</pubDate></item>
  <item><title>Caf\xe9</title><link> {SITE}/news/caf%C3%A9 </link>
    <pubDate>Tue, 07 May 2024 01:00:00 +0200</pubDate></item>
  <item><title>No link</title></item>
</channel></rss>""".encode("latin-1")


def test_rss() -> None:
    entries, result = run(RSS, size=50)
    assert entries == [SitemapEntry("url", f"{SITE}/news/1", epoch(2024, 5, 6, 7, 8, 9)),
                       SitemapEntry("url", f"{SITE}/news/caf%C3%A9", epoch(2024, 5, 6, 23))]
    assert result.format == "rss" and result.refused == {"empty": 1}


ATOM = f"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Feed</title>
  <link href="{SITE}/" rel="alternate"/>
  <entry><title>A</title><link rel="enclosure" href="{SITE}/a.mp3"/>
    <link rel="alternate" href="{SITE}/a"/><updated>2024-05-06T07:08:09Z</updated></entry>
  <entry><title>B</title><link href="{SITE}/b"/><published>2024-05-01T00:00:00Z</published>
  </entry>
  <entry><title>C</title><link rel="self" href="{SITE}/c.atom"/></entry>
</feed>""".encode()


def test_atom() -> None:
    entries, result = run(ATOM, size=33)
    assert entries == [SitemapEntry("url", f"{SITE}/a", epoch(2024, 5, 6, 7, 8, 9)),
                       SitemapEntry("url", f"{SITE}/b", epoch(2024, 5, 1))]
    assert result.format == "atom" and result.refused == {"empty": 1}


# -- gzip ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 10, 11, 1000, STEP])
def test_gzip_by_magic_at_any_chunk_size(size: int) -> None:
    entries, result = run(gzip.compress(URLSET), size=size)
    assert entries == URLSET_ENTRIES
    assert result.gzip and result.stop is None
    assert result.document_bytes == len(URLSET)


def test_gzip_told_by_magic_only() -> None:
    # No magic: a plain body under a .gz name with a gzip type is read as it is.
    entries, result = run(URLSET, url=f"{SITE}/s.xml.gz", content_type="application/x-gzip")
    assert entries == URLSET_ENTRIES and not result.gzip
    # Gzipped twice (a .gz file also sent with Content-Encoding, not decoded by the client):
    # inflated once only, and what remains is no sitemap.
    _, twice = run(gzip.compress(gzip.compress(URLSET)))
    assert twice.gzip and twice.stop == "unknown_format"


def test_gzip_members_and_trailing_bytes() -> None:
    half = len(TEXT) // 2
    body = gzip.compress(TEXT[:half]) + gzip.compress(TEXT[half:]) + b"\0\0\0"
    entries, result = run(body, size=7, url=f"{SITE}/s.txt")
    assert len(entries) == 4 and result.stop is None


def test_corrupt_and_truncated_gzip() -> None:
    packed = gzip.compress(URLSET)
    _, corrupt = run(packed[:10] + b"\xff" * 50 + packed[60:])
    assert corrupt.stop == "gzip"
    entries, truncated = run(packed[:-30])
    assert truncated.stop == "gzip"
    assert locs(entries) == locs(URLSET_ENTRIES)[:len(entries)]


class CountingInflater:
    """zlib.decompressobj, counting the bytes it gives out."""

    total = 0

    def __init__(self, *args: Any) -> None:
        self._inner = ORIGINAL_DECOMPRESSOBJ(*args)

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        out = self._inner.decompress(data, max_length)
        CountingInflater.total += len(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


ORIGINAL_DECOMPRESSOBJ = zlib.decompressobj


def gzip_of(blocks: Iterable[bytes]) -> bytes:
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join([packer.compress(block) for block in blocks] + [packer.flush()])


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """200 MB of zeros, and a urlset with 200 MB of elements that hold no entry, gzipped."""
    mb = 1024 * 1024
    filler = (b"<x/>" + b" " * 1020) * 1024
    return {
        "zeros": gzip_of(b"\0" * mb for _ in range(200)),
        "xml": gzip_of([f"<urlset {NS}><url><loc>{SITE}/1</loc></url>".encode()]
                       + [filler] * 200),
    }


def test_gzip_bomb_stops_at_the_cap(bombs: dict[str, bytes],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zlib, "decompressobj", CountingInflater)
    CountingInflater.total = 0
    limits = SitemapLimits()
    entries, result = run(bombs["xml"], limits=limits)
    assert len(bombs["xml"]) < 2 * 1024 * 1024      # over 100 times smaller than inflated
    assert result.stop == "too_large" and locs(entries) == [f"{SITE}/1"]
    assert limits.max_bytes < CountingInflater.total <= limits.max_bytes + 1
    assert result.document_bytes == CountingInflater.total
    assert result.peak_open_nodes < 100

    CountingInflater.total = 0
    entries, result = run(bombs["zeros"])
    assert result.stop == "unknown_format" and entries == []
    assert CountingInflater.total <= STEP


def test_plain_body_over_the_cap() -> None:
    limits = SitemapLimits(max_bytes=50_000)
    body = (f"<urlset {NS}>" + "".join(f"<url><loc>{SITE}/{i}</loc></url>"
                                       for i in range(5_000)) + "</urlset>").encode()
    entries, result = run(body, size=4096, limits=limits)
    assert result.stop == "too_large" and 1_000 < len(entries) < 5_000
    assert result.document_bytes <= 50_000 + 4096


# -- boundaries, dates -----------------------------------------------------------------------


def test_every_split_point_gives_the_same_entries() -> None:
    body = (f'<?xml version="1.0"?>\n<!-- x --><urlset {NS}><url><loc>{SITE}/a?b=1&amp;c=&#233;'
            f"</loc><lastmod>2024-05-06</lastmod></url><url><loc>{SITE}/z</loc></url>"
            "</urlset>").encode()
    expected = [SitemapEntry("url", f"{SITE}/a?b=1&c=\xe9", epoch(2024, 5, 6)),
                SitemapEntry("url", f"{SITE}/z", None)]
    for cut in range(1, len(body)):
        parser = SitemapParser(url=f"{SITE}/sitemap.xml", content_type=None)
        got = parser.feed(body[:cut]) + parser.feed(body[cut:]) + parser.close()
        assert got == expected, cut
        assert parser.result.stop is None


@pytest.mark.parametrize(("text", "expected"), [
    ("2024", epoch(2024, 1, 1)),
    ("2024-05", epoch(2024, 5, 1)),
    ("2024-05-06", epoch(2024, 5, 6)),
    ("2024-05-06T07:08Z", epoch(2024, 5, 6, 7, 8)),
    ("2024-05-06T07:08:09Z", epoch(2024, 5, 6, 7, 8, 9)),
    ("2024-05-06T07:08:09+02:00", epoch(2024, 5, 6, 5, 8, 9)),
    ("2024-05-06T07:08:09.5-05:00", epoch(2024, 5, 6, 12, 8, 9) + 0.5),
    ("2024-05-06T07:08:09", epoch(2024, 5, 6, 7, 8, 9)),
    (" 2024-05-06 ", epoch(2024, 5, 6)),
    ("yesterday", None),
    ("2024-13-01", None),
    ("", None),
])
def test_lastmod_formats(text: str, expected: float | None) -> None:
    body = f"<urlset><url><loc>{SITE}/1</loc><lastmod>{text}</lastmod></url></urlset>".encode()
    entries, _ = run(body)
    assert entries[0].lastmod == expected
    assert sitemaps.w3c_time(text) == expected


# -- limits, safety --------------------------------------------------------------------------


def urlset_of(count: int, *, loc: str = f"{SITE}/p/", extra: str = "") -> Iterator[bytes]:
    yield f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {NS}>\n'.encode()
    for start in range(0, count, 1_000):
        yield "".join(f"<url><loc>{loc}{i}</loc>{extra}</url>\n"
                      for i in range(start, min(count, start + 1_000))).encode()
    yield b"</urlset>\n"


def test_entry_limit() -> None:
    whole = b"".join(urlset_of(50_001))
    entries, result = run(whole)
    assert len(entries) == 50_000 and entries[-1].loc == f"{SITE}/p/49999"
    assert result.stop == "too_many_urls" and result.urls == 50_000
    entries, result = run(b"".join(urlset_of(50_000)))
    assert len(entries) == 50_000 and result.stop is None
    entries, result = run(whole, limits=SitemapLimits(max_entries=10))
    assert len(entries) == 10 and result.stop == "too_many_urls"


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol9 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
]>
<urlset><url><loc>https://shop.example/&lol9;</loc></url></urlset>"""


@pytest.mark.parametrize("size", [1, 4, STEP])
def test_dtd_refused(size: int, tmp_path: Any) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    xxe = (f'<?xml version="1.0"?><!-- c --><!DOCTYPE urlset [<!ENTITY x SYSTEM '
           f'"file://{secret}">]><urlset><url><loc>{SITE}/&x;</loc></url></urlset>').encode()
    for body in (BILLION_LAUGHS, xxe, gzip.compress(xxe),
                 b"<!doctype urlset SYSTEM 'http://127.0.0.1:9/x.dtd'><urlset/>"):
        entries, result = run(body, size=size)
        assert entries == [] and result.stop == "dtd" and result.format is None


def test_lxml_never_expands_entities_even_past_the_check(tmp_path: Any) -> None:
    """Defence in depth: the parser the sink builds resolves no entity of a DTD."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    result = SitemapResult(url="x")
    fmt = sitemaps._XML_FORMATS["urlset"]
    sink = sitemaps._XmlSink("urlset", fmt, SitemapLimits(), result)
    body = (f'<!DOCTYPE urlset [<!ENTITY x SYSTEM "file://{secret}"><!ENTITY y "why">]>'
            f"<urlset><url><loc>{SITE}/&x;&y;</loc></url></urlset>").encode()
    got = [raw for batch in sink.feed(body) for raw in batch]
    got += [raw for batch in sink.close() for raw in batch]
    assert "TOP-SECRET" not in repr(got) and "why" not in repr(got)


def test_malformed_keeps_what_came_before() -> None:
    body = (f"<urlset><url><loc>{SITE}/1</loc></url><url><loc>{SITE}/2</lo></url>"
            f"<url><loc>{SITE}/3</loc></url></urlset>").encode()
    entries, result = run(body)
    assert locs(entries) == [f"{SITE}/1"] and result.stop == "malformed"
    assert "mismatch" in result.detail
    entries, result = run(b"".join(urlset_of(3))[:-10])      # no end tag
    assert len(entries) == 3 and result.stop == "malformed"
    entries, result = run(b"".join(urlset_of(3)) + b"<junk>\x00")  # bytes after the end
    assert len(entries) == 3 and result.stop is None


@pytest.mark.parametrize(("body", "stop"), [
    (b"", "empty"),
    (b"  \n ", "empty"),
    (b"<html><body>Not found</body></html>", "unknown_format"),
    (b"\xff\xfe<\x00u\x00", "unknown_format"),
    (b"{\"urls\": []}", "unknown_format"),
    (b"<?xml version='1.0'?><urlset", "malformed"),
    (b"<?xml version='1.0'", "malformed"),
])
def test_no_sitemap(body: bytes, stop: str) -> None:
    entries, result = run(body, size=3)
    assert entries == [] and result.stop == stop


def test_elements_held_are_bounded() -> None:
    wide_entry = (f"<urlset><url><loc>{SITE}/1</loc></url><url><loc>{SITE}/2</loc>"
                  + "<x/>" * 20_000 + "</url></urlset>").encode()
    entries, result = run(wide_entry, size=4096)
    assert locs(entries) == [f"{SITE}/1"] and result.stop == "entry_too_large"
    junk_between = (f"<urlset><url><loc>{SITE}/1</loc></url>" + "<x><y/></x>" * 50_000
                    + f"<url><loc>{SITE}/2</loc></url></urlset>").encode()
    entries, result = run(junk_between, size=4096)
    assert len(entries) == 2 and result.stop is None and result.peak_open_nodes < 2_000


def test_feeding_after_a_stop_does_nothing() -> None:
    parser = SitemapParser(url=f"{SITE}/s.xml", content_type=None,
                           limits=SitemapLimits(max_entries=1))
    assert len(parser.feed(b"".join(urlset_of(3)))) == 1
    assert parser.stopped and parser.result.stop == "too_many_urls"
    assert parser.feed(b"".join(urlset_of(3))) == [] and parser.close() == []
    assert parser.result.urls == 1


def test_memory_stays_flat() -> None:
    """50,000 URLs (over 10 MB of XML) in 64 KB chunks: Python's peak stays a few MB and the
    tree holds a handful of elements, where the document or its entries would not fit."""
    extra = ("<lastmod>2024-05-06T07:08:09+00:00</lastmod><changefreq>weekly</changefreq>"
             "<priority>0.5</priority>")
    loc = f"{SITE}/catalogue/department/category/subcategory/some-long-product-name-"
    parts = list(urlset_of(50_000, loc=loc, extra=extra))
    size = sum(map(len, parts))
    assert size > 10 * 1024 * 1024

    def chunks() -> Iterator[bytes]:
        for part in parts:
            for i in range(0, len(part), STEP):
                yield part[i:i + STEP]

    tracemalloc.start()
    try:
        stream = parse_sitemap(chunks(), url=f"{SITE}/sitemap.xml", content_type=None)
        count = sum(1 for _ in stream)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 50_000 and stream.result.stop is None
    assert peak < 8 * 1024 * 1024, peak
    assert stream.result.peak_open_nodes < 50


# -- host rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(("loc", "sitemap_url", "expected"), [
    (f"{SITE}/a", f"{SITE}/sitemap.xml", None),
    (f"{SITE}/deep/er/page", f"{SITE}/sitemap_index.xml.gz", None),
    ("https://SHOP.example:443/a", f"{SITE}/sitemap.xml", None),
    (f"{SITE}/a/b", f"{SITE}/a/sitemap.xml", None),
    (f"{SITE}/a/", f"{SITE}/a/sitemap.xml", None),
    (f"{SITE}/a", f"{SITE}/a/sitemap.xml", "outside_directory"),
    (f"{SITE}/ab/c", f"{SITE}/a/sitemap.xml", "outside_directory"),
    (f"{SITE}/a/../admin", f"{SITE}/a/sitemap.xml", "outside_directory"),
    (f"{SITE}/a/%2e%2e/admin", f"{SITE}/a/sitemap.xml", "outside_directory"),
    (f"{SITE}/a/./b", f"{SITE}/a/sitemap.xml", None),
    ("http://shop.example/a", f"{SITE}/sitemap.xml", "cross_host"),
    ("https://shop.example:8443/a", f"{SITE}/sitemap.xml", "cross_host"),
    ("https://www.shop.example/a", f"{SITE}/sitemap.xml", "cross_host"),
    ("https://other.example/a", f"{SITE}/sitemap.xml", "cross_host"),
    ("ftp://shop.example/a", f"{SITE}/sitemap.xml", "not_http"),
    ("/a", f"{SITE}/sitemap.xml", "not_http"),
    ("https://shop.example:99999/a", f"{SITE}/sitemap.xml", "bad_url"),
])
def test_host_rules(loc: str, sitemap_url: str, expected: str | None) -> None:
    assert allowed(loc, sitemap_url, cross_submitted_hosts=frozenset(), relaxed=False) == expected


def test_cross_submission_and_relaxed() -> None:
    sitemap_url = "https://sitemaps.cdn.example/shop/sitemap-1.xml"
    announced = frozenset({"shop.example", "blog.example:8080"})

    def rule(loc: str) -> str | None:
        return allowed(loc, sitemap_url, cross_submitted_hosts=announced, relaxed=False)

    assert rule(f"{SITE}/any/where") is None                  # announced: the whole host
    assert rule("http://shop.example/x") is None
    assert rule("http://blog.example:8080/x") is None
    assert rule("http://blog.example/x") == "cross_host"
    assert rule("https://spam.example/x") == "cross_host"
    assert rule("https://sitemaps.cdn.example/other/x") == "outside_directory"
    assert allowed("https://spam.example/x", sitemap_url, cross_submitted_hosts=frozenset(),
                   relaxed=True) is None
    assert allowed("javascript:alert(1)", sitemap_url, cross_submitted_hosts=frozenset(),
                   relaxed=True) == "not_http"


# -- the reference parser ----------------------------------------------------------------------


def fixture_site() -> dict[str, tuple[bytes, str]]:
    """A small site's sitemaps: URL -> (body, content type)."""
    index = (f'<?xml version="1.0"?><sitemapindex {NS}>'
             + "".join(f"<sitemap><loc>{SITE}/{name}</loc></sitemap>"
                       for name in ("pages.xml.gz", "plain.xml", "list.txt", "news.rss",
                                    "feed.atom"))
             + "</sitemapindex>").encode()
    plain = ("<urlset>" + "".join(f"<url><loc>{SITE}/plain/{i}</loc></url>" for i in range(50))
             + "</urlset>").encode()
    return {
        f"{SITE}/sitemap_index.xml": (index, "application/xml"),
        f"{SITE}/pages.xml.gz": (gzip.compress(b"".join(urlset_of(2_000))),
                                 "application/x-gzip"),
        f"{SITE}/plain.xml": (plain, "text/xml"),
        f"{SITE}/list.txt": (TEXT.replace(b"\xef\xbb\xbf", b""), "text/plain"),
        f"{SITE}/news.rss": (RSS, "application/rss+xml"),
        f"{SITE}/feed.atom": (ATOM_ONE_LINK, "application/atom+xml"),
    }


# usp reads an Atom entry's rel="self" link, else its first one (an enclosure, say), where the
# Atom RFC makes rel="alternate" (or no rel) the entry's page: its fixture has one link per entry.
ATOM_ONE_LINK = f"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Feed</title>
  <entry><title>A</title><link rel="alternate" href="{SITE}/a"/></entry>
  <entry><title>B</title><link href="{SITE}/b"/></entry>
</feed>""".encode()


def ours(site: dict[str, tuple[bytes, str]], url: str) -> set[str]:
    body, content_type = site[url]
    found: set[str] = set()
    for entry in parse_sitemap([body[i:i + 1000] for i in range(0, len(body), 1000)],
                               url=url, content_type=content_type):
        found |= ours(site, entry.loc) if entry.kind == "sitemap" else {entry.loc}
    return found


def test_same_urls_as_ultimate_sitemap_parser() -> None:
    pytest.importorskip("usp")
    from usp.fetch_parse import SitemapFetcher
    from usp.web_client.abstract_client import (
        AbstractWebClient,
        AbstractWebClientResponse,
        AbstractWebClientSuccessResponse,
    )

    site = fixture_site()

    class Response(AbstractWebClientSuccessResponse):
        def __init__(self, url: str) -> None:
            self._url = url

        def status_code(self) -> int:
            return 200

        def status_message(self) -> str:
            return "OK"

        def header(self, case_insensitive_name: str) -> str | None:
            return site[self._url][1] if case_insensitive_name.lower() == "content-type" else None

        def raw_data(self) -> bytes:
            return site[self._url][0]

        def url(self) -> str:
            return self._url

    class LocalClient(AbstractWebClient):
        """Serves the fixture from memory: no socket, no network."""

        def set_max_response_data_length(self, max_response_data_length: int | None) -> None:
            pass

        def get(self, url: str) -> AbstractWebClientResponse:
            return Response(url)

    tree = SitemapFetcher(url=f"{SITE}/sitemap_index.xml", recursion_level=0,
                          web_client=LocalClient()).sitemap()
    reference = {page.url for page in tree.all_pages()}
    mine = ours(site, f"{SITE}/sitemap_index.xml")
    assert len(mine) == 2_000 + 50 + 4 + 2 + 2
    # usp lists "HTTP://SHOP.EXAMPLE/3" of the text sitemap as it is too.
    assert mine - reference == set()
    assert reference - mine == set()
