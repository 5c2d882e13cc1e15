"""A static site of sitemaps over three hosts, with the ground truth a sitemap crawler is judged by.

``SitemapSite.write_static`` writes the files under ``root/<host>/``; nginx serves them
(``tests/support/nginx.py``: ``NginxSite(site, workdir, ...)``, the site's ``nginx_locations``)
or ``SitemapSiteServer`` does from Python (standalone:
``python -m tests.support.sitemap_site --port 8080 --root /tmp/sitemaps``). Every ``*.html``
path answers one small page without links (nginx ``try_files``), so the millions of page URLs
the sitemaps list need no file each. Hosts A, B, C are ``SitemapSiteConfig.hosts``; the crawl's
seed is A.

==============================  ============================================================
A ``/robots.txt``               ``Disallow: /private/``; ``Sitemap:`` lines to A's index, to
                                B's ``/sitemap-b.xml`` (B's robots.txt announces it too:
                                cross-submitted) and to C's ``/sitemap-c.xml`` (C's robots.txt
                                announces another one: ``not_cross_submitted``)
A ``/sitemap_index.xml.gz``     level 1 (gzip file): level-2 indexes, ``/news/sitemap.xml``,
                                ``/private/sitemap.xml`` (``robots``: never fetched),
                                ``/sitemap.txt`` (plain text), ``/feed.rss`` (RSS 2.0)
A ``/index-2a.xml``             level 2: the even large urlsets, ``/sitemap-small.xml``,
                                ``/sitemap-over-limit.xml`` (``url_limit`` + 1 URLs:
                                ``too_many_urls``), ``/sitemap-bomb.xml.gz`` (``too_large``)
A ``/index-2b.xml.gz``          level 2: ``/index-3.xml``, ``/sitemap-gzip-encoded.xml``
                                (gzip body served with ``Content-Encoding: gzip``)
A ``/index-3.xml``              level 3: the odd large urlsets, ``/feed.atom``,
                                ``/sitemap-laughs.xml`` and ``/sitemap-xxe.xml`` (``dtd``),
                                ``/sitemap-bomb-encoded.xml`` (a bomb as ``Content-Encoding``:
                                ``too_large``) and the level-1 index again (``loop``)
==============================  ============================================================

The large urlsets (``large_sitemaps`` x ``urls_per_large``, ``/sitemap-large-<k>.xml``, gzip
files for even k) carry ``<lastmod>`` in each W3C Datetime form in turn (none every 7th URL).
``/sitemap-small.xml`` holds the awkward entries: an escaped ``&``, a ``<loc>`` padded with
white space, a percent-encoded path, two URLs of the first large urlset again (same lastmod)
and a URL on host B (``outside_host``). ``/news/sitemap.xml`` lists one URL outside ``/news/``
(``outside_directory``). The bombs are ``<urlset>``, ``bomb_bytes`` of spaces, then one
``<url>``: none of their URLs counts when decompression stops at the cap.

``SitemapSite.expected(rules)`` walks the same model the files are written from and gives the
page URLs a correct crawler enqueues (``urls``), the stops with their reasons (``stops``) and
the sitemaps it fetches, each once (``fetched``). ``SitemapRules`` holds the limits and the
host rules (each can be relaxed). ``reference_urls`` applies the same rules to the tree
``ultimate-sitemap-parser`` (usp) reads from the served site. With the well-known paths mode a crawler also asks for
``/sitemap.xml`` and friends on A: they answer 404 but ``/sitemap_index.xml.gz``, already seen.
"""

from __future__ import annotations

import argparse
import email.utils
import functools
import gzip
import re
import threading
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

from scrapy_cluster.sitegen.site import (
    HostServers,
    Page,
    Streamed,
    _HostServer,
    serve_until_interrupted,
)
from tests.support.addresses import SITEMAPS

# Why a correct crawler stops (a sitemap, or one URL of it).
TOO_LARGE = "too_large"
DTD = "dtd"
TOO_MANY_URLS = "too_many_urls"
NOT_CROSS_SUBMITTED = "not_cross_submitted"
ROBOTS = "robots"
OUTSIDE_DIRECTORY = "outside_directory"
OUTSIDE_HOST = "outside_host"
LOOP = "loop"
TOO_DEEP = "too_deep"

# What a document is.
INDEX, URLSET, TEXT, RSS, ATOM, BOMB, LAUGHS, XXE = (
    "index", "urlset", "text", "rss", "atom", "bomb", "laughs", "xxe")

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
PAGE_FILE = "page.html"
PAGE = (b'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Listed</title>'
        b"</head><body><p>A page listed in a sitemap.</p></body></html>\n")
CONTENT_TYPES = {".xml": "application/xml", ".gz": "application/gzip", ".txt": "text/plain",
                 ".rss": "application/rss+xml", ".atom": "application/atom+xml"}
ENCODED = ("/sitemap-gzip-encoded.xml", "/sitemap-bomb-encoded.xml")
"""Files whose body is gzip, served as ``application/xml`` with ``Content-Encoding: gzip``."""
_TYPES = " ".join(f"{kind} {suffix[1:]};" for suffix, kind in CONTENT_TYPES.items())
NGINX_LOCATIONS = (
    f"location / {{ types {{ {_TYPES} }} default_type application/octet-stream; }} "
    f"location ~ \\.html$ {{ default_type text/html; try_files /{PAGE_FILE} =404; }} "
    "location = / { return 404; } "
    + " ".join(f"location = {path} {{ types {{ }} default_type application/xml; "
               "add_header Content-Encoding gzip; }" for path in ENCODED))
"""nginx ``server`` block body: sitemap files with their types, every ``*.html`` the page."""
MIB = 1024 * 1024
BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
W3C_FORMS = 6
"""``<lastmod>`` forms of the large urlsets, in turn (a 7th URL has none): YYYY, YYYY-MM,
YYYY-MM-DD, hh:mm with an offset, hh:mm:ss in UTC (Z), hh:mm:ss.ss with an offset."""


@dataclass(frozen=True)
class SitemapSiteConfig:
    hosts: tuple[str, str, str] = (SITEMAPS.host(1), SITEMAPS.host(2), SITEMAPS.host(3))
    """A (the seed host, most sitemaps), B (a cross-submitted sitemap), C (one that is not)."""
    large_sitemaps: int = 3
    urls_per_large: int = 20_000
    url_limit: int = 50_000
    """The protocol's URLs per file: the over-limit sitemap lists one more."""
    bomb_bytes: int = 64 * MIB
    """Spaces inside each gzip bomb (it inflates to a little more)."""
    small_count: int = 5
    """URLs of each small sitemap (text, feeds, news, B, C...)."""


@dataclass(frozen=True)
class SitemapRules:
    """What a correct crawler enforces (the defaults: the protocol's and the issue's)."""

    max_urls: int = 50_000
    max_bytes: int = 50 * MIB
    """Inflated bytes per sitemap (decompression capped there too)."""
    max_depth: int = 10
    """Sitemaps followed from robots.txt: its own lines are depth 1."""
    cross_submission: bool = True
    """A sitemap on another host than the seed's counts only when that host's robots.txt
    announces it."""
    same_host: bool = True
    """A URL counts only on its sitemap's host (scheme, host and port)."""
    same_directory: bool = True
    """A URL on its sitemap's host counts only under the sitemap's directory."""


@dataclass(frozen=True)
class Entry:
    """One page URL as a sitemap lists it; ``lastmod`` as written (W3C, or RFC 822 in RSS)."""

    url: str
    lastmod: str | None = None
    padded: bool = False
    """Written with white space and new lines around it inside ``<loc>``."""


@dataclass(frozen=True)
class Series:
    """Generated entries: ``<prefix><i>.html`` for i in range(count), lastmod in every form."""

    prefix: str
    count: int


@dataclass(frozen=True)
class Doc:
    url: str
    kind: str
    children: tuple[str, ...] = ()
    entries: tuple[Entry, ...] = ()
    series: Series | None = None

    @property
    def path(self) -> str:
        return urlsplit(self.url).path

    @property
    def gzipped(self) -> bool:
        """The body is gzip (a ``.gz`` file, or served with ``Content-Encoding: gzip``)."""
        return self.path.endswith(".gz") or self.path in ENCODED


@dataclass(frozen=True)
class Stop:
    reason: str
    sitemap: str
    url: str | None = None
    """The refused URL, for a stop about one URL of the sitemap."""


@dataclass
class Expected:
    urls: set[str] = field(default_factory=set)
    lastmods: dict[str, str] = field(default_factory=dict)
    stops: list[Stop] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    """Sitemap URLs a correct crawler requests, each once, in walk order."""


@functools.lru_cache(maxsize=1 << 16)
def lastmod_text(i: int) -> str | None:
    """The ``<lastmod>`` of the i-th URL of a large urlset, one W3C Datetime form in turn
    (the same for the i-th URL of every large urlset)."""
    form = i % (W3C_FORMS + 1)
    if form == W3C_FORMS:
        return None
    moment = BASE_TIME + timedelta(minutes=7 * i, seconds=i % 60)
    if form == 0:
        return f"{moment:%Y}"
    if form == 1:
        return f"{moment:%Y-%m}"
    if form == 2:
        return f"{moment:%Y-%m-%d}"
    if form == 3:
        return (moment + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M+02:00")
    if form == 4:
        return f"{moment:%Y-%m-%dT%H:%M:%SZ}"
    local = moment - timedelta(hours=5)
    return f"{local:%Y-%m-%dT%H:%M:%S}.{i % 100:02d}-05:00"


W3C = re.compile(r"(\d{4})(?:-(\d\d)(?:-(\d\d)(?:T(\d\d):(\d\d)(?::(\d\d)(\.\d+)?)?"
                 r"(Z|[+-]\d\d:\d\d))?)?)?$")


def lastmod_datetime(text: str) -> datetime:
    """A lastmod as an aware datetime: W3C Datetime (missing parts: the first month, day,
    midnight UTC) or RFC 822 (RSS ``pubDate``)."""
    match = W3C.match(text)
    if match is None:
        return email.utils.parsedate_to_datetime(text)
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    zone = UTC if offset in (None, "Z") else timezone(
        (-1 if offset[0] == "-" else 1) * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:])))
    moment = datetime(int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0),
                      int(second or 0), round(float(fraction or 0) * 1_000_000), tzinfo=zone)
    return moment.astimezone(UTC)


def is_w3c(text: str) -> bool:
    return W3C.match(text) is not None


class SitemapSite:
    """The documents of the sitemap site served on ``port`` (see the module docstring)."""

    def __init__(self, config: SitemapSiteConfig, port: int, *, scheme: str = "http") -> None:
        self.config, self.port, self.scheme = config, port, scheme
        self.docs = {doc.url: doc for doc in self._documents()}

    def url(self, host: str, path: str) -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def a(self, path: str) -> str:
        return self.url(self.config.hosts[0], path)

    # -- the model -------------------------------------------------------------------------

    def robots_lines(self, host: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(Disallow paths, Sitemap URLs)`` of ``host``'s robots.txt."""
        a, b, c = self.config.hosts
        if host == a:
            return ("/private/",), (self.a("/sitemap_index.xml.gz"),
                                    self.url(b, "/sitemap-b.xml"), self.url(c, "/sitemap-c.xml"))
        if host == b:
            return (), (self.url(b, "/sitemap-b.xml"),)
        return (), (self.url(c, "/announced.xml"),)

    def robots_txt(self, host: str) -> bytes:
        disallow, sitemaps = self.robots_lines(host)
        lines = ["User-agent: *", *(f"Disallow: {path}" for path in disallow or ("",)), "",
                 *(f"Sitemap: {url}" for url in sitemaps)]
        return ("\n".join(lines) + "\n").encode()

    def large_paths(self) -> list[str]:
        return [f"/sitemap-large-{k}.xml" + (".gz" if k % 2 == 0 else "")
                for k in range(self.config.large_sitemaps)]

    def _documents(self) -> list[Doc]:
        a = self.a
        large = [Doc(a(path), URLSET, series=Series(a(f"/p/large-{k}/"), self.config.urls_per_large))
                 for k, path in enumerate(self.large_paths())]
        return [
            Doc(a("/sitemap_index.xml.gz"), INDEX, children=(
                a("/index-2a.xml"), a("/index-2b.xml.gz"), a("/news/sitemap.xml"),
                a("/private/sitemap.xml"), a("/sitemap.txt"), a("/feed.rss"))),
            Doc(a("/index-2a.xml"), INDEX, children=(
                *(doc.url for doc in large[0::2]), a("/sitemap-small.xml"),
                a("/sitemap-over-limit.xml"), a("/sitemap-bomb.xml.gz"))),
            Doc(a("/index-2b.xml.gz"), INDEX, children=(
                a("/index-3.xml"), a("/sitemap-gzip-encoded.xml"))),
            Doc(a("/index-3.xml"), INDEX, children=(
                *(doc.url for doc in large[1::2]), a("/feed.atom"), a("/sitemap-laughs.xml"),
                a("/sitemap-xxe.xml"), a("/sitemap-bomb-encoded.xml"), a("/sitemap_index.xml.gz"))),
            *large,
            Doc(a("/sitemap-over-limit.xml"), URLSET,
                series=Series(a("/p/over/"), self.config.url_limit + 1)),
            Doc(a("/sitemap-small.xml"), URLSET, entries=self._small_entries()),
            self._few(a("/news/sitemap.xml"), URLSET, "/news/story-",
                      extra=(Entry(a("/p/outside-news.html")),)),
            self._few(a("/private/sitemap.xml"), URLSET, "/p/private/"),
            self._few(a("/sitemap.txt"), TEXT, "/p/text/"),
            self._few(a("/feed.rss"), RSS, "/p/rss/"),
            self._few(a("/feed.atom"), ATOM, "/p/atom/"),
            self._few(a("/sitemap-gzip-encoded.xml"), URLSET, "/p/encoded/"),
            Doc(a("/sitemap-bomb.xml.gz"), BOMB, entries=(Entry(a("/p/bomb/after.html")),)),
            Doc(a("/sitemap-bomb-encoded.xml"), BOMB,
                entries=(Entry(a("/p/bomb-encoded/after.html")),)),
            Doc(a("/sitemap-laughs.xml"), LAUGHS, entries=(Entry(a("/p/laughs/0.html")),)),
            Doc(a("/sitemap-xxe.xml"), XXE, entries=(Entry(a("/p/xxe/0.html")),)),
            self._few(self.url(self.config.hosts[1], "/sitemap-b.xml"), URLSET, "/p/b/"),
            self._few(self.url(self.config.hosts[2], "/sitemap-c.xml"), URLSET, "/p/c/"),
            self._few(self.url(self.config.hosts[2], "/announced.xml"), URLSET, "/p/announced/"),
        ]

    def _few(self, url: str, kind: str, prefix: str, extra: tuple[Entry, ...] = ()) -> Doc:
        base = urlsplit(url)
        entries = [Entry(f"{base.scheme}://{base.netloc}{prefix}{i}.html", self._feed_date(kind, i))
                   for i in range(self.config.small_count)]
        return Doc(url, kind, entries=(*entries, *extra))

    @staticmethod
    def _feed_date(kind: str, i: int) -> str | None:
        moment = BASE_TIME + timedelta(days=i, hours=i)
        if kind == RSS:
            return email.utils.format_datetime(moment)
        if kind in (ATOM, URLSET):
            return f"{moment:%Y-%m-%dT%H:%M:%SZ}"
        return None

    def _small_entries(self) -> tuple[Entry, ...]:
        a = self.a
        again = [Entry(f"{a('/p/large-0/')}{i}.html", lastmod_text(i))
                 for i in range(min(2, self.config.urls_per_large))] \
            if self.config.large_sitemaps else []
        return (Entry(a("/p/small/query.html?page=2&sort=asc"), "2024-02-03"),
                Entry(a("/p/small/spaced.html"), "2024-02-03T04:05:06Z", padded=True),
                Entry(a("/p/small/caf%C3%A9.html")),
                *again,
                Entry(self.url(self.config.hosts[1], "/p/small/other-host.html")))

    def entries(self, doc: Doc) -> Iterator[Entry]:
        """The page URLs ``doc`` lists, in file order (for a bomb or a DTD document: the URLs
        written in it, which none counts)."""
        yield from doc.entries
        if doc.series is not None:
            prefix = doc.series.prefix
            for i in range(doc.series.count):
                yield Entry(f"{prefix}{i}.html", lastmod_text(i))

    def listed_urls(self) -> Iterator[str]:
        """Every page URL written in any document (expected or not)."""
        for doc in self.docs.values():
            for entry in self.entries(doc):
                yield entry.url

    def inflated_size(self, doc: Doc) -> int | None:
        """The decoded size of a bomb (the other documents are well under any limit)."""
        if doc.kind != BOMB:
            return None
        return len(_bomb_head()) + self.config.bomb_bytes + len(_bomb_tail(doc))

    # -- the ground truth ------------------------------------------------------------------

    def expected(self, rules: SitemapRules | None = None) -> Expected:
        rules = rules or SitemapRules()
        found = Expected()
        seen: set[str] = set()
        for url in self.robots_lines(self.config.hosts[0])[1]:
            self._visit(url, 1, rules, seen, found)
        return found

    def expected_urls(self, rules: SitemapRules | None = None) -> set[str]:
        return self.expected(rules).urls

    def _visit(self, url: str, depth: int, rules: SitemapRules, seen: set[str],
               found: Expected) -> None:
        reason = self._refusal(url, depth, rules, seen)
        if reason is not None:
            found.stops.append(Stop(reason, url))
            return
        seen.add(url)
        found.fetched.append(url)
        doc = self.docs[url]
        if doc.kind == INDEX:
            for child in doc.children:
                self._visit(child, depth + 1, rules, seen, found)
        elif doc.kind in (LAUGHS, XXE):
            found.stops.append(Stop(DTD, url))
        elif (self.inflated_size(doc) or 0) > rules.max_bytes:
            found.stops.append(Stop(TOO_LARGE, url))
        else:
            self._take(doc, rules, found)

    def _refusal(self, url: str, depth: int, rules: SitemapRules, seen: set[str]) -> str | None:
        host = urlsplit(url).hostname or ""
        disallow, _ = self.robots_lines(host)
        if rules.cross_submission and host != self.config.hosts[0] \
                and url not in self.robots_lines(host)[1]:
            return NOT_CROSS_SUBMITTED
        if any(urlsplit(url).path.startswith(path) for path in disallow):
            return ROBOTS
        if url in seen:
            return LOOP
        if depth > rules.max_depth:
            return TOO_DEEP
        return None

    def _take(self, doc: Doc, rules: SitemapRules, found: Expected) -> None:
        sitemap = urlsplit(doc.url)
        origin = f"{sitemap.scheme}://{sitemap.netloc}"
        directory = origin + sitemap.path.rsplit("/", 1)[0] + "/"
        for count, entry in enumerate(self.entries(doc)):
            if count == rules.max_urls:
                found.stops.append(Stop(TOO_MANY_URLS, doc.url))
                return
            on_host = entry.url.startswith(origin + "/")
            if rules.same_host and not on_host:
                found.stops.append(Stop(OUTSIDE_HOST, doc.url, entry.url))
            elif rules.same_directory and on_host and not entry.url.startswith(directory):
                found.stops.append(Stop(OUTSIDE_DIRECTORY, doc.url, entry.url))
            else:
                found.urls.add(entry.url)
                if entry.lastmod is not None:
                    found.lastmods[entry.url] = entry.lastmod

    def reference_urls(self, tree: Any, rules: SitemapRules | None = None) -> set[str]:
        """The pages of a tree ``usp`` (ultimate-sitemap-parser) fetched from A's robots.txt,
        after the same rules as ``expected``: a sitemap refused, too large (the model's
        decoded size: usp's own cap is higher) or seen before gives none, a urlset its first
        ``max_urls`` pages that pass the host rules. usp itself refuses DTDs."""
        rules = rules or SitemapRules()
        found, seen = Expected(), set[str]()

        def walk(sitemap: Any, depth: int) -> None:
            if sitemap.url.endswith("/robots.txt"):
                for child in sitemap.sub_sitemaps:
                    walk(child, depth + 1)
                return
            doc = self.docs[sitemap.url]
            if self._refusal(sitemap.url, depth, rules, seen) is not None \
                    or (self.inflated_size(doc) or 0) > rules.max_bytes:
                return
            seen.add(sitemap.url)
            for child in getattr(sitemap, "sub_sitemaps", ()):
                walk(child, depth + 1)
            listed = Doc(doc.url, URLSET, entries=tuple(
                Entry(page.url) for page in getattr(sitemap, "pages", ())))
            self._take(listed, rules, found)

        for robots in tree.sub_sitemaps:
            walk(robots, 0)
        return found.urls

    # -- the files -------------------------------------------------------------------------

    def write_static(self, root: Path) -> list[str]:
        """robots.txt, the page and every document under ``root/<host>/``."""
        for host in self.config.hosts:
            (root / host).mkdir(parents=True, exist_ok=True)
            (root / host / "robots.txt").write_bytes(self.robots_txt(host))
            (root / host / PAGE_FILE).write_bytes(PAGE)
        bombs = [doc for doc in self.docs.values() if doc.kind == BOMB]
        _write_bombs([(self.file(root, doc), _bomb_tail(doc)) for doc in bombs],
                     self.config.bomb_bytes)
        for doc in self.docs.values():
            if doc.kind != BOMB:
                self._write_doc(doc, self.file(root, doc))
        return list(self.config.hosts)

    def nginx_locations(self) -> str:
        return NGINX_LOCATIONS

    @staticmethod
    def file(root: Path, doc: Doc) -> Path:
        parts = urlsplit(doc.url)
        return root / (parts.hostname or "") / parts.path.lstrip("/")

    def _write_doc(self, doc: Doc, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        chunks = (chunk.encode() for chunk in _batched(self._render(doc)))
        if doc.gzipped:
            with gzip.GzipFile(target, "wb", compresslevel=6, mtime=0) as packed:
                packed.writelines(chunks)
        else:
            with open(target, "wb") as plain:
                plain.writelines(chunks)

    def _render(self, doc: Doc) -> Iterator[str]:
        if doc.kind == INDEX:
            yield f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{SITEMAP_NS}">\n'
            for child in doc.children:
                yield f"<sitemap><loc>{escape(child)}</loc><lastmod>2024-05-06</lastmod></sitemap>\n"
            yield "</sitemapindex>\n"
        elif doc.kind == URLSET:
            yield f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}">\n'
            yield from map(_url_element, self.entries(doc))
            yield "</urlset>\n"
        elif doc.kind == TEXT:
            yield from _text_lines(self.entries(doc))
        elif doc.kind == RSS:
            yield from _rss(self.entries(doc))
        elif doc.kind == ATOM:
            yield from _atom(doc.url, self.entries(doc))
        else:
            yield _dtd_document(doc.kind, next(self.entries(doc)).url)


def _batched(parts: Iterable[str], size: int = 2000) -> Iterator[str]:
    batch: list[str] = []
    for part in parts:
        batch.append(part)
        if len(batch) == size:
            yield "".join(batch)
            batch.clear()
    yield "".join(batch)


def _url_element(entry: Entry) -> str:
    loc = escape(entry.url)
    if entry.padded:
        loc = f"\n    {loc}\n  "
    lastmod = "" if entry.lastmod is None else f"<lastmod>{entry.lastmod}</lastmod>"
    return f"<url><loc>{loc}</loc>{lastmod}</url>\n"


def _text_lines(entries: Iterable[Entry]) -> Iterator[str]:
    for i, entry in enumerate(entries):
        if i == 1:
            yield "\n"
            yield f"  {entry.url}  \r\n"
        else:
            yield f"{entry.url}\n"


def _rss(entries: Iterable[Entry]) -> Iterator[str]:
    items = list(entries)
    yield ('<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel>\n'
           f"<title>Feed</title><link>{escape(items[0].url)}</link>"
           "<description>Latest pages</description>\n")
    for i, entry in enumerate(items):
        yield (f"<item><title>Story {i}</title><link>{escape(entry.url)}</link>"
               f"<pubDate>{entry.lastmod}</pubDate></item>\n")
    yield "</channel></rss>\n"


def _atom(url: str, entries: Iterable[Entry]) -> Iterator[str]:
    items = list(entries)
    yield ('<?xml version="1.0" encoding="UTF-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">\n'
           f'<title>Feed</title><id>{escape(url)}</id><updated>{items[0].lastmod}</updated>'
           f'<link rel="alternate" href="{escape(items[0].url)}"/>\n')
    for i, entry in enumerate(items):
        yield (f'<entry><title>Story {i}</title><id>{escape(entry.url)}</id>'
               f'<link rel="alternate" href="{escape(entry.url)}"/>'
               f"<updated>{entry.lastmod}</updated></entry>\n")
    yield "</feed>\n"


def _dtd_document(kind: str, url: str) -> str:
    if kind == LAUGHS:
        entities = '  <!ENTITY lol "lol">\n' + "".join(
            f'  <!ENTITY lol{n} "{("&lol" + (str(n - 1) if n > 1 else "") + ";") * 10}">\n'
            for n in range(1, 10))
        reference = "&lol9;"
    else:
        entities = '  <!ENTITY xxe SYSTEM "file:///etc/passwd">\n'
        reference = "&xxe;"
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE urlset [\n{entities}]>\n'
            f'<urlset xmlns="{SITEMAP_NS}">\n<url><loc>{escape(url)}</loc></url>\n'
            f"<url><loc>{url.rsplit('/', 1)[0]}/{reference}</loc></url>\n</urlset>\n")


def _bomb_head() -> bytes:
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}">\n'.encode()


def _bomb_tail(doc: Doc) -> bytes:
    return f"<url><loc>{escape(doc.entries[0].url)}</loc></url>\n</urlset>\n".encode()


def _write_bombs(targets: Sequence[tuple[Path, bytes]], padding: int) -> None:
    """Each target: gzip of the head, ``padding`` spaces and its own tail. The shared part is
    compressed once, 1 MiB at a time (never whole in memory), and each file finishes a copy."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    shared = [compressor.compress(_bomb_head())]
    block = b" " * MIB
    for start in range(0, padding, MIB):
        shared.append(compressor.compress(block[:min(MIB, padding - start)]))
    for target, tail in targets:
        finishing = compressor.copy()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"".join(shared) + finishing.compress(tail) + finishing.flush())


# -- serving from Python -------------------------------------------------------------------


class _Files:
    """The answers of the written tree, as nginx with ``NGINX_LOCATIONS`` gives them."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def render(self, host: str, path: str) -> Page:
        if path.endswith(".html"):
            return Page(200, "text/html; charset=utf-8", PAGE)
        return Page(404, "text/html", b"<html><body>not found</body></html>")

    def render_streamed(self, host: str, path: str) -> Streamed | None:
        target = (self.root / host / path.lstrip("/")).resolve()
        if path.endswith(".html") or not target.is_file() or self.root not in target.parents:
            return None
        headers = (("Content-Encoding", "gzip"),) if path in ENCODED else ()
        kind = CONTENT_TYPES.get(target.suffix, "application/octet-stream")
        return Streamed(200, kind, _chunks(target), target.stat().st_size, headers)


def _chunks(target: Path) -> Iterator[bytes]:
    with open(target, "rb") as body:
        while chunk := body.read(256 * 1024):
            yield chunk


class SitemapSiteServer(HostServers):
    """Serves a tree ``SitemapSite.write_static`` wrote under ``root`` on every host, one
    thread per host, counting requests per URL, query string included (``hits_snapshot``)."""

    def __init__(self, site: SitemapSite, root: Path) -> None:
        self.sitemaps, self.site = site, _Files(root)
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._servers = []
        self.stopping = threading.Event()

    def record(self, host: str, path: str) -> None:
        with self._lock:
            self.hits[self.sitemaps.url(host, path)] += 1

    def hits_snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.hits)

    def _hosts(self) -> Sequence[str]:
        return self.sitemaps.config.hosts

    def _server(self, host: str) -> ThreadingHTTPServer:
        return _HostServer(host, self.sitemaps.port, self, keep_query=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write and serve the sitemap test site.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--hosts", default=",".join(SitemapSiteConfig().hosts))
    parser.add_argument("--large", type=int, default=3, help="large urlsets")
    parser.add_argument("--urls", type=int, default=20_000, help="URLs per large urlset")
    args = parser.parse_args(argv)
    hosts = tuple(args.hosts.split(","))
    if len(hosts) != 3:
        parser.error("--hosts takes three addresses: A,B,C")
    config = replace(SitemapSiteConfig(), hosts=hosts, large_sitemaps=args.large,
                     urls_per_large=args.urls)
    site = SitemapSite(config, args.port)
    site.write_static(args.root)
    serve_until_interrupted(SitemapSiteServer(site, args.root).start())


if __name__ == "__main__":
    main()
