"""The sitemap test site (``tests/support/sitemap_site.py``) is what it claims: its files read
back as the model says, the bombs and DTD documents are what they are, the ground truth holds
together, and both servers (Python, nginx) answer the tree."""

from __future__ import annotations

import gzip
import io
import re
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
import xml.parsers.expat
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.addresses import SITEMAPS
from tests.support.nginx import NginxSite, find_nginx
from tests.support.services import free_port
from tests.support.sitemap_site import (
    ATOM,
    BOMB,
    DTD,
    INDEX,
    LOOP,
    MIB,
    NOT_CROSS_SUBMITTED,
    OUTSIDE_DIRECTORY,
    OUTSIDE_HOST,
    ROBOTS,
    RSS,
    TEXT,
    TOO_LARGE,
    TOO_MANY_URLS,
    URLSET,
    Doc,
    SitemapRules,
    SitemapSite,
    SitemapSiteConfig,
    SitemapSiteServer,
    Stop,
    is_w3c,
    lastmod_datetime,
)

NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
ATOM_NS = "{http://www.w3.org/2005/Atom}"
A, B, C = SITEMAPS.hosts(1, 2, 3)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[SitemapSite, Path]:
    """The default site (3 x 20,000 URLs, a 50,001-URL sitemap, 64 MiB bombs), written once."""
    site = SitemapSite(SitemapSiteConfig(), free_port())
    root = tmp_path_factory.mktemp("sitemaps")
    assert site.write_static(root) == [A, B, C]
    return site, root


def body(site: SitemapSite, root: Path, url: str) -> bytes:
    """A document's bytes as a client sees them decoded (gzip by its magic number)."""
    data = SitemapSite.file(root, site.docs[url]).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def locs(stream: io.BytesIO, tag: str) -> Iterator[str]:
    for _event, element in ET.iterparse(stream, events=("end",)):
        if element.tag == tag:
            yield (element.text or "").strip()
            element.clear()


def test_the_robots_files_announce_and_disallow_as_the_layout_says(written: tuple[SitemapSite, Path]) -> None:
    site, root = written
    robots = {host: (root / host / "robots.txt").read_text() for host in (A, B, C)}
    announced = {host: re.findall(r"^Sitemap: (\S+)$", text, re.M) for host, text in robots.items()}
    assert announced == {
        A: [site.a("/sitemap_index.xml.gz"), site.url(B, "/sitemap-b.xml"),
            site.url(C, "/sitemap-c.xml")],
        B: [site.url(B, "/sitemap-b.xml")],
        C: [site.url(C, "/announced.xml")]}
    assert "Disallow: /private/\n" in robots[A]
    assert SitemapSite.file(root, site.docs[site.a("/private/sitemap.xml")]).is_file()


def test_the_index_tree_has_three_levels_gzip_files_and_one_loop(written: tuple[SitemapSite, Path]) -> None:
    site, root = written
    first = site.a("/sitemap_index.xml.gz")
    assert SitemapSite.file(root, site.docs[first]).read_bytes()[:2] == b"\x1f\x8b"
    levels: dict[str, int] = {}
    pending, links = [(first, 1)], []
    while pending:
        url, level = pending.pop(0)
        if url in levels:
            continue
        levels[url] = level
        for child in ET.fromstring(body(site, root, url)).iter(f"{NS}loc"):
            links.append((url, (child.text or "").strip()))
            if site.docs[(child.text or "").strip()].kind == INDEX:
                pending.append(((child.text or "").strip(), level + 1))
    assert levels == {first: 1, site.a("/index-2a.xml"): 2, site.a("/index-2b.xml.gz"): 2,
                      site.a("/index-3.xml"): 3}
    assert (site.a("/index-3.xml"), first) in links
    assert {url for url, _ in links} == set(levels)
    assert all(SitemapSite.file(root, site.docs[child]).is_file() for _, child in links)
    assert {site.docs[child].kind for parent, child in links
            if parent == site.a("/index-3.xml")} >= {URLSET, ATOM, BOMB, INDEX}


def test_every_urlset_feed_and_text_file_lists_the_models_urls(written: tuple[SitemapSite, Path]) -> None:
    site, root = written
    sizes = {}
    for doc in site.docs.values():
        data = body(site, root, doc.url)
        if doc.kind == URLSET:
            read = list(locs(io.BytesIO(data), f"{NS}loc"))
        elif doc.kind == RSS:
            read = [item.findtext("link") or "" for item in ET.fromstring(data).iter("item")]
        elif doc.kind == ATOM:
            read = [entry.find(f"{ATOM_NS}link").get("href", "")  # type: ignore[union-attr]
                    for entry in ET.fromstring(data).iter(f"{ATOM_NS}entry")]
        elif doc.kind == TEXT:
            read = [line.strip() for line in data.decode().splitlines() if line.strip()]
        else:
            continue
        assert read == [entry.url for entry in site.entries(doc)], doc.url
        sizes[doc.path] = len(read)
    assert [sizes[path] for path in site.large_paths()] == [20_000] * 3
    assert sizes["/sitemap-over-limit.xml"] == 50_001
    assert site.a("/p/small/query.html?page=2&sort=asc") in site.listed_urls()


def test_large_urlsets_carry_lastmod_in_every_w3c_form(written: tuple[SitemapSite, Path]) -> None:
    site, root = written
    data = body(site, root, site.a(site.large_paths()[0]))
    lastmods = re.findall(rb"<lastmod>([^<]*)</lastmod>", data)
    forms = Counter(re.sub(rb"\d", b"9", value) for value in lastmods)
    assert set(forms) == {b"9999", b"9999-99", b"9999-99-99", b"9999-99-99T99:99+99:99",
                          b"9999-99-99T99:99:99Z", b"9999-99-99T99:99:99.99-99:99"}
    assert len(lastmods) == 20_000 - len(range(6, 20_000, 7))
    assert all(is_w3c(value.decode()) for value in lastmods)
    assert [lastmod_datetime(text).isoformat() for text in (
        "2024", "2024-03", "2024-03-05", "2024-03-05T10:20+02:00", "2024-03-05T10:20:30Z",
        "2024-03-05T10:20:30.25-05:00", "Tue, 05 Mar 2024 10:20:30 +0000")] == [
        "2024-01-01T00:00:00+00:00", "2024-03-01T00:00:00+00:00", "2024-03-05T00:00:00+00:00",
        "2024-03-05T08:20:00+00:00", "2024-03-05T10:20:30+00:00",
        "2024-03-05T15:20:30.250000+00:00", "2024-03-05T10:20:30+00:00"]


@pytest.mark.parametrize("path", ["/sitemap-bomb.xml.gz", "/sitemap-bomb-encoded.xml"])
def test_a_bomb_is_small_and_inflates_past_the_cap_when_read_with_one(
        written: tuple[SitemapSite, Path], path: str) -> None:
    site, root = written
    doc = site.docs[site.a(path)]
    target = SitemapSite.file(root, doc)
    assert target.stat().st_size < 256 * 1024
    inflated, tail = _inflate(target, cap=50 * MIB + 1)
    assert inflated == 50 * MIB + 1 and doc.entries[0].url.encode() not in tail
    inflated, tail = _inflate(target, cap=None)
    assert inflated == site.inflated_size(doc) and inflated > 64 * MIB
    assert doc.entries[0].url.encode() in tail


def _inflate(target: Path, cap: int | None) -> tuple[int, bytes]:
    """Inflated bytes read (stopping at ``cap``), at most 1 MiB out per step, and the last
    bytes seen."""
    inflater, total, tail = zlib.decompressobj(31), 0, b""
    with open(target, "rb") as compressed:
        pending = b""
        while cap is None or total < cap:
            if not pending:
                pending = compressed.read(16 * 1024)
                if not pending:
                    break
            room = MIB if cap is None else min(MIB, cap - total)
            out = inflater.decompress(pending, room)
            pending = inflater.unconsumed_tail
            total, tail = total + len(out), (tail + out)[-4096:]
    return total, tail


@pytest.mark.parametrize("path, marker", [("/sitemap-laughs.xml", b"<!ENTITY lol9 "),
                                          ("/sitemap-xxe.xml", b'SYSTEM "file:///etc/passwd"')])
def test_the_dtd_documents_declare_their_entities_before_any_url(
        written: tuple[SitemapSite, Path], path: str, marker: bytes) -> None:
    site, root = written
    data = body(site, root, site.a(path))
    assert marker in data and data.index(b"<!DOCTYPE") < data.index(b"<url>")
    parser, elements = xml.parsers.expat.ParserCreate(), []
    parser.StartElementHandler = lambda name, attrs: elements.append(name)

    def refuse(*args: object) -> None:
        raise ValueError("DTD")

    parser.StartDoctypeDeclHandler = refuse
    with pytest.raises(ValueError, match="DTD"):
        parser.Parse(data, True)
    assert elements == []


def test_the_ground_truth_holds_together(written: tuple[SitemapSite, Path]) -> None:
    site, _root = written
    truth = site.expected()
    a = site.a
    assert sorted((stop.reason, stop.sitemap, stop.url or "") for stop in truth.stops) == sorted([
        (TOO_MANY_URLS, a("/sitemap-over-limit.xml"), ""),
        (TOO_LARGE, a("/sitemap-bomb.xml.gz"), ""), (TOO_LARGE, a("/sitemap-bomb-encoded.xml"), ""),
        (DTD, a("/sitemap-laughs.xml"), ""), (DTD, a("/sitemap-xxe.xml"), ""),
        (LOOP, a("/sitemap_index.xml.gz"), ""), (ROBOTS, a("/private/sitemap.xml"), ""),
        (NOT_CROSS_SUBMITTED, site.url(C, "/sitemap-c.xml"), ""),
        (OUTSIDE_DIRECTORY, a("/news/sitemap.xml"), a("/p/outside-news.html")),
        (OUTSIDE_HOST, a("/sitemap-small.xml"), site.url(B, "/p/small/other-host.html"))])
    assert len(truth.urls) == 3 * 20_000 + 50_000 + 3 + 6 * 5
    assert len(truth.fetched) == len(set(truth.fetched)) == 19
    assert {a("/private/sitemap.xml"), site.url(C, "/sitemap-c.xml"),
            site.url(C, "/announced.xml")}.isdisjoint(truth.fetched)
    listed = set(site.listed_urls())
    never = listed - truth.urls
    assert truth.urls < listed and {stop.url for stop in truth.stops if stop.url} < never
    assert {a("/p/over/50000.html"), a("/p/bomb/after.html"), a("/p/laughs/0.html"),
            a("/p/xxe/0.html"), a("/p/private/0.html"), site.url(C, "/p/c/0.html")} < never
    assert a("/p/over/49999.html") in truth.urls
    assert set(truth.lastmods) <= truth.urls
    assert all(url.split("?", 1)[0].endswith(".html") for url in truth.urls)


def test_each_relaxed_rule_adds_exactly_what_it_refused(written: tuple[SitemapSite, Path]) -> None:
    site, _root = written
    strict = site.expected()
    relaxed = {
        "cross": site.expected(SitemapRules(cross_submission=False)),
        "host": site.expected(SitemapRules(same_host=False)),
        "directory": site.expected(SitemapRules(same_directory=False)),
        "bytes": site.expected(SitemapRules(max_bytes=100 * MIB)),
    }
    assert {name: truth.urls - strict.urls for name, truth in relaxed.items()} == {
        "cross": {site.url(C, f"/p/c/{i}.html") for i in range(5)},
        "host": {site.url(B, "/p/small/other-host.html")},
        "directory": {site.a("/p/outside-news.html")},
        "bytes": {site.a("/p/bomb/after.html"), site.a("/p/bomb-encoded/after.html")}}
    assert all(truth.urls >= strict.urls for truth in relaxed.values())
    fewer = site.expected(SitemapRules(max_urls=1000))
    assert Counter(stop.reason for stop in fewer.stops)[TOO_MANY_URLS] == 4
    shallow = site.expected(SitemapRules(max_depth=2))
    assert site.a("/index-3.xml") not in shallow.fetched


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def check_served(site: SitemapSite, root: Path) -> None:
    """The answers a crawler gets: files with their types, pages for every listed path, the
    gzip body of an encoded sitemap as ``Content-Encoding``, 404 elsewhere."""
    status, headers, data = _get(site.a("/robots.txt"))
    assert (status, data) == (200, (root / A / "robots.txt").read_bytes())
    status, headers, data = _get(site.a("/sitemap_index.xml.gz"))
    assert (status, headers["Content-Type"], data[:2]) == (200, "application/gzip", b"\x1f\x8b")
    status, headers, data = _get(site.a("/sitemap-gzip-encoded.xml"))
    assert (status, headers["Content-Encoding"], headers["Content-Type"].split(";")[0]) == \
        (200, "gzip", "application/xml")
    assert gzip.decompress(data).startswith(b"<?xml")
    status, headers, _ = _get(site.a("/feed.rss"))
    assert (status, headers["Content-Type"]) == (200, "application/rss+xml")
    for url in (site.a("/p/large-1/19999.html"), site.a("/p/small/query.html?page=2&sort=asc"),
                site.url(B, "/p/b/0.html"), site.a("/news/story-0.html")):
        status, headers, data = _get(url)
        assert (status, headers["Content-Type"].split(";")[0], b"sitemap" in data) == \
            (200, "text/html", True), url
    assert [_get(site.a(path))[0] for path in ("/sitemap.xml", "/", "/p/large-0/")] == [404] * 3


def test_the_python_server_answers_the_tree(written: tuple[SitemapSite, Path]) -> None:
    site, root = written
    with SitemapSiteServer(site, root) as server:
        check_served(site, root)
        hits = server.hits_snapshot()
    assert hits[site.a("/p/small/query.html?page=2&sort=asc")] == 1


@pytest.mark.integration
@pytest.mark.skipif(find_nginx() is None, reason="needs nginx (apt-get install nginx-light)")
def test_nginx_answers_the_tree(tmp_path: Path) -> None:
    site = SitemapSite(replace(SitemapSiteConfig(), urls_per_large=50, url_limit=100,
                               bomb_bytes=MIB), free_port())
    with NginxSite(site, tmp_path, binary=str(find_nginx()), status_port=free_port()):
        check_served(site, tmp_path / "www")


def test_usp_lists_the_ground_truth_after_the_same_rules(tmp_path: Path) -> None:
    """A third-party parser reads the files as the model says (formats, escaping, gzip)."""
    tree_for_homepage = pytest.importorskip("usp.tree").sitemap_tree_for_homepage
    config = replace(SitemapSiteConfig(), urls_per_large=300, url_limit=400, bomb_bytes=2 * MIB)
    site = SitemapSite(config, free_port())
    site.write_static(tmp_path)
    rules = SitemapRules(max_urls=400, max_bytes=MIB)
    with SitemapSiteServer(site, tmp_path) as server:
        tree = tree_for_homepage(site.a("/"), use_known_paths=False)
        hits = server.hits_snapshot()
    assert site.reference_urls(tree, rules) == site.expected(rules).urls
    assert hits[site.a("/sitemap-over-limit.xml")] == 1
    assert len(site.expected(rules).urls) == 3 * 300 + 400 + 3 + 6 * 5


def test_generation_is_deterministic_and_a_doc_knows_its_file() -> None:
    first, second = (SitemapSite(SitemapSiteConfig(large_sitemaps=2), 8080) for _ in range(2))
    assert first.docs == second.docs
    doc = first.docs[first.a("/news/sitemap.xml")]
    assert (doc.path, doc.gzipped, SitemapSite.file(Path("/w"), doc)) == (
        "/news/sitemap.xml", False, Path(f"/w/{A}/news/sitemap.xml"))
    assert isinstance(doc, Doc) and Stop(LOOP, doc.url).url is None
