"""A site for re-crawl tests and benchmarks: static pages served by nginx with its defaults for
validators (``etag on``: the ETag is ``"<mtime hex>-<size hex>"``; ``if_modified_since exact``),
a mutator that changes pages under it, and its access log read back as records.

``RevisitSite`` writes ``pages_per_host`` pages per host (``/p/<n>.html``), each linking to a
few others on its host and to the host's list of new pages (``/new.html``); page 0 of each host
also links to page 0 of the next host, so one seed reaches every page. ``Mutator`` rewrites
pages (new content AND a later mtime, so both the ETag and Last-Modified move) and adds new
pages (``/n/<k>.html``, linked from an existing page and from ``/new.html``), appending each
change to a ground-truth log. ``RevisitNginx`` is ``NginxSite`` with an access log of one
tab-separated record per request (``LOG_FIELDS``), unbuffered, read by ``read_log``.
``staleness`` measures how long each change went unseen by a 200 fetch.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.nginx import NginxSite

LOG_FIELDS = ("$msec", "$request_time", "$server_addr", "$status", "$body_bytes_sent",
              "$request_uri", "$http_if_none_match", "$http_if_modified_since",
              "$sent_http_etag", "$bytes_sent")
"""One access-log record: when the answer ended (epoch s, ms), how long it took, the host
(the address the request came in on), status, body bytes sent, URI, the request's
validators, the ETag answered and all bytes sent (headers included). nginx writes ``-`` for
an empty value and escapes quotes, backslashes and control bytes as ``\\xHH``."""
_ESCAPED = re.compile(r"\\x([0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class LogRecord:
    """One request as nginx logged it."""

    finished_s: float
    took_s: float
    host: str
    status: int
    body_bytes: int
    uri: str
    if_none_match: str | None
    if_modified_since: str | None
    etag: str | None
    sent_bytes: int = 0

    @property
    def arrived_s(self) -> float:
        return self.finished_s - self.took_s

    @property
    def conditional(self) -> bool:
        """The request carried a validator (If-None-Match or If-Modified-Since)."""
        return self.if_none_match is not None or self.if_modified_since is not None


def _value(raw: str) -> str | None:
    return None if raw == "-" else _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), raw)


def parse_record(line: str) -> LogRecord:
    finished, took, host, status, body, uri, none_match, modified, etag, sent = line.split("\t")
    return LogRecord(float(finished), float(took), host, int(status), int(body),
                     _value(uri) or "", _value(none_match), _value(modified), _value(etag),
                     int(sent))


def read_log(path: Path) -> list[LogRecord]:
    """Every complete record of an access log in ``LOG_FIELDS`` format (none if absent)."""
    if not path.exists():
        return []
    text = path.read_text(errors="replace")
    return [parse_record(line) for line in text.split("\n")[:-1] if line]


class RevisitNginx(NginxSite):
    """``NginxSite`` logging ``LOG_FIELDS`` to ``access_log``, each request as it ends."""

    log_format = "'" + "\t".join(LOG_FIELDS) + "'"
    log_buffer = ""

    def records(self) -> list[LogRecord]:
        return read_log(self.access_log) if self.access_log is not None else []

    def arrivals(self) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        for record in self.records():
            if record.uri != "/robots.txt":
                found.setdefault(record.host, []).append(record.arrived_s)
        return found


@dataclass(frozen=True)
class RevisitSiteConfig:
    hosts: tuple[str, ...]
    pages_per_host: int = 6
    links_per_page: int = 2
    page_bytes: int = 1200
    rate_limit_bytes_s: int = 0
    """nginx ``limit_rate`` on every page (0: none): slow fetches, so a crawler holds leases."""


@dataclass
class _Page:
    version: int = 0
    extra_links: list[str] = field(default_factory=list)


class RevisitSite:
    """The pages, their links and their current content (see module docstring)."""

    def __init__(self, config: RevisitSiteConfig, port: int) -> None:
        self._config, self.port = config, port
        self.pages: dict[tuple[str, str], _Page] = {}
        for host in config.hosts:
            for path in (*self.graph_paths(), "/new.html"):
                self.pages[(host, path)] = _Page()
        self.root: Path | None = None

    @property
    def config(self) -> RevisitSiteConfig:
        return self._config

    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.port}{path}"

    def graph_paths(self) -> list[str]:
        return [f"/p/{number}.html" for number in range(self._config.pages_per_host)]

    def urls(self) -> set[str]:
        """Every page's URL (the new ones included), robots.txt excepted."""
        return {self.url(host, path) for host, path in self.pages}

    def links(self, host: str, path: str) -> list[str]:
        """The absolute links ``path`` on ``host`` carries now."""
        page, count = self.pages[(host, path)], self._config.pages_per_host
        found = [self.url(host, extra) for extra in page.extra_links]
        if path.startswith("/p/"):
            number = int(path[3:].split(".")[0])
            found += [self.url(host, f"/p/{(number + step) % count}.html")
                      for step in range(1, self._config.links_per_page + 1)]
            found.append(self.url(host, "/new.html"))
            if number == 0:
                hosts = self._config.hosts
                found.append(self.url(hosts[(hosts.index(host) + 1) % len(hosts)], "/p/0.html"))
        return list(dict.fromkeys(found))

    def body(self, host: str, path: str) -> bytes:
        version = self.pages[(host, path)].version
        anchors = "".join(f'<li><a href="{link}">{link}</a></li>\n'
                          for link in self.links(host, path))
        head = (f"<html><head><title>{path} v{version}</title></head><body>"
                f"<h1>{path} version {version}</h1><ul>\n{anchors}</ul>")
        padding = max(0, self._config.page_bytes - len(head) - 30)
        return (head + f"<p>{'lorem ipsum ' * (padding // 12)}</p></body></html>").encode()

    def file(self, host: str, path: str) -> Path:
        assert self.root is not None, "write_static first"
        return self.root / host / path.lstrip("/")

    def write_page(self, host: str, path: str) -> Path:
        target = self.file(host, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(self.body(host, path))
        return target

    def write_static(self, root: Path) -> list[str]:
        """Every page and robots.txt (which allows everything) under ``root/<host>/``."""
        self.root = root
        for host, path in self.pages:
            self.write_page(host, path)
        for host in self._config.hosts:
            (root / host / "robots.txt").write_text("User-agent: *\nDisallow:\n")
        return list(self._config.hosts)

    def nginx_locations(self) -> str:
        rate = self._config.rate_limit_bytes_s
        return f"limit_rate {rate};" if rate else ""


@dataclass(frozen=True)
class Change:
    """A page changed (``kind`` ``changed``) or appeared (``added``) at ``at_s`` (epoch s)."""

    url: str
    at_s: float
    kind: str


class Mutator:
    """Changes pages of a written ``RevisitSite``, each change appended to ``changes`` and, when
    given, to ``change_log`` (one ``<epoch s>\\t<kind>\\t<url>`` line each)."""

    def __init__(self, site: RevisitSite, change_log: Path | None = None) -> None:
        self.site, self.change_log = site, change_log
        self.changes: list[Change] = []
        self.added = 0

    def change(self, host: str, path: str) -> Change:
        """New content and an mtime at least one second later than the file's last (the ETag
        is mtime-size and Last-Modified has one-second resolution)."""
        page = self.site.pages[(host, path)]
        page.version += 1
        target = self.site.file(host, path)
        before_s = int(target.stat().st_mtime) if target.exists() else 0
        self.site.write_page(host, path)
        mtime_s = max(int(time.time()), before_s + 1)
        os.utime(target, (mtime_s, mtime_s))
        return self._record(self.site.url(host, path), "changed")

    def add_page(self, host: str, linked_from: str) -> tuple[Change, ...]:
        """A new page ``/n/<k>.html`` linked from ``linked_from`` and from ``/new.html``, both
        of which change; returns the three changes (the new page's first)."""
        path = f"/n/{self.added}.html"
        self.added += 1
        self.site.pages[(host, path)] = _Page()
        self.site.write_page(host, path)
        added = self._record(self.site.url(host, path), "added")
        for parent in dict.fromkeys((linked_from, "/new.html")):
            self.site.pages[(host, parent)].extra_links.append(path)
        return (added, *(self.change(host, parent)
                         for parent in dict.fromkeys((linked_from, "/new.html"))))

    def _record(self, url: str, kind: str) -> Change:
        found = Change(url, time.time(), kind)
        self.changes.append(found)
        if self.change_log is not None:
            with open(self.change_log, "a") as log:
                log.write(f"{found.at_s:.3f}\t{kind}\t{url}\n")
        return found


def read_change_log(path: Path) -> list[Change]:
    changes = []
    for line in path.read_text().splitlines():
        at_s, kind, url = line.split("\t")
        changes.append(Change(url, float(at_s), kind))
    return changes


def by_url(records: Iterable[LogRecord], port: int) -> dict[str, list[LogRecord]]:
    """Each URL's requests (robots.txt excepted), in the order they ended."""
    found: dict[str, list[LogRecord]] = {}
    for record in sorted(records, key=lambda r: r.finished_s):
        if record.uri != "/robots.txt":
            found.setdefault(f"http://{record.host}:{port}{record.uri}", []).append(record)
    return found


@dataclass(frozen=True)
class Staleness:
    """How long changes went unseen: ``caught_s`` per change a later 200 fetch saw,
    ``missed_s`` (up to ``end_s``) per change none did."""

    caught_s: tuple[float, ...]
    missed_s: tuple[float, ...]

    @property
    def mean_s(self) -> float:
        every = (*self.caught_s, *self.missed_s)
        return sum(every) / len(every) if every else 0.0


def staleness(changes: Sequence[Change], fetches: dict[str, list[LogRecord]],
              end_s: float) -> Staleness:
    """For each ``changed`` change: the time to the first 200 of its page that arrived after
    it, or, if none did before ``end_s``, ``end_s`` minus its time."""
    caught: list[float] = []
    missed: list[float] = []
    for change in changes:
        if change.kind != "changed" or change.at_s >= end_s:
            continue
        seen = next((record.arrived_s for record in fetches.get(change.url, ())
                     if record.status == 200 and change.at_s < record.arrived_s < end_s), None)
        if seen is None:
            missed.append(end_s - change.at_s)
        else:
            caught.append(seen - change.at_s)
    return Staleness(tuple(caught), tuple(missed))
