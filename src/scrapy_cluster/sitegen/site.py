"""A deterministic generated web site on loopback addresses, for the demo, tests and benchmarks.

Every host in ``SiteConfig.hosts`` (127.0.0.x) serves the same port. Graph pages live at
``/p/<n>.html`` and link to each other by a seeded random graph, some links crossing to the
next host, so the pages a crawl must fetch are known in advance (``GeneratedSite.expected_urls``).
``SiteConfig.graph`` replaces the random graph by an explicit one, for tests that need a given
shape (``GeneratedSite.click_depths`` gives each page's breadth-first distance from a seed).
Edge cases live under ``/special/`` and are reachable only from ``/special/index.html``:

==========================  ===================================================
``/private/secret.html``    disallowed by ``/robots.txt``
``/special/missing.html``   404
``/special/error500.html``  always 500
``/special/latin1.html``    body that is not valid UTF-8 (no charset declared)
``/special/huge.html``      ``huge_page_bytes`` of HTML
``/special/doc.pdf``        a denied extension by default
``/special/slow.html``      answers after ``slow_page_s``
==========================  ===================================================

Pages answered chunk by chunk (``Streamed``: endless or huge bodies) come from
``SiteConfig.streamed`` when it is set; the test suite serves its hostile pages that way.

A host named in ``SiteConfig.host_status`` answers that status for every page (robots.txt
excepted, so crawlers still request pages), with a ``Retry-After`` header when
``SiteConfig.host_retry_after_s`` names it too: a site that fails, or that rate-limits.

Run standalone (benchmarks): ``python -m scrapy_cluster.sitegen.site --port 8080``.
"""

from __future__ import annotations

import argparse
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from random import Random
from typing import Protocol, Self
from urllib.parse import urlsplit

SPECIAL_PATHS = ("/private/secret.html", "/special/missing.html", "/special/error500.html",
                 "/special/latin1.html", "/special/huge.html", "/special/doc.pdf",
                 "/special/slow.html")
LATIN1_BODY = "<html><body><p>caf\xe9 cr\xe8me br\xfbl\xe9e</p></body></html>".encode("latin-1")

GraphPage = tuple[str, int]
"""A page of an explicit graph: ``(host, n)`` is served at ``http://host:port/p/<n>.html``."""


@dataclass(frozen=True)
class Streamed:
    """An answer sent chunk by chunk: status, headers and a body given as chunks (``length``
    None: the body is sent chunked, without ``Content-Length``)."""

    status: int
    content_type: str
    chunks: Iterator[bytes]
    length: int | None = None
    headers: tuple[tuple[str, str], ...] = ()


class StreamedPages(Protocol):
    """Pages answered chunk by chunk: the answer for ``path`` (``base_url`` is
    ``http://host:port``), or None for a path these pages do not serve."""

    def __call__(self, base_url: str, path: str) -> Streamed | None: ...


@dataclass(frozen=True)
class SiteConfig:
    hosts: tuple[str, ...] = ("127.0.0.2", "127.0.0.3")
    pages_per_host: int = 12
    links_per_page: int = 3
    cross_host_every: int = 3
    page_bytes: int = 1500
    seed: int = 7
    crawl_delay_s: float | None = None
    huge_page_bytes: int = 2_000_000
    slow_page_s: float = 1.0
    page_delay_s: float = 0.0
    host_status: tuple[tuple[str, int], ...] = ()
    """``(host, status)``: the host answers this status for every page but robots.txt."""
    host_retry_after_s: tuple[tuple[str, int], ...] = ()
    """``(host, seconds)``: the host's ``host_status`` answers carry ``Retry-After: seconds``."""
    graph: tuple[tuple[GraphPage, tuple[GraphPage, ...]], ...] = ()
    """``((page, (link, ...)), ...)``: an explicit link graph used instead of the random one
    (``pages_per_host``, ``links_per_page``, ``cross_host_every`` and ``seed`` then unused).
    Links keep their order on the page; a page only named as a link has none. Every page's
    host must be one of ``hosts``."""
    streamed: StreamedPages | None = None
    """Pages answered chunk by chunk; asked first for every path (None: the site's own answer)."""


@dataclass(frozen=True)
class Page:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


class GeneratedSite:
    """The pages and link graph of one generated site served on ``port``."""

    def __init__(self, config: SiteConfig, port: int) -> None:
        self.config = config
        self.port = port
        self._links = self._build_graph()
        self._host_status = dict(config.host_status)
        self._retry_after_s = dict(config.host_retry_after_s)

    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.port}{path}"

    def page_url(self, page: GraphPage) -> str:
        """The URL of an explicit graph page ``(host, n)``."""
        host, number = page
        if host not in self.config.hosts:
            raise ValueError(f"graph page {page!r}: host {host!r} is not in SiteConfig.hosts")
        return self.url(host, f"/p/{number}.html")

    def _build_graph(self) -> dict[str, list[str]]:
        if self.config.graph:
            return self._explicit_graph()
        cfg, rng = self.config, Random(self.config.seed)
        graph: dict[str, list[str]] = {}
        for host_index, host in enumerate(cfg.hosts):
            other = cfg.hosts[(host_index + 1) % len(cfg.hosts)]
            for number in range(cfg.pages_per_host):
                links = []
                for k in range(cfg.links_per_page):
                    target_host = other if k % cfg.cross_host_every == cfg.cross_host_every - 1 \
                        else host
                    links.append(self.url(target_host, f"/p/{rng.randrange(cfg.pages_per_host)}.html"))
                graph[self.url(host, f"/p/{number}.html")] = links
        return graph

    def _explicit_graph(self) -> dict[str, list[str]]:
        graph: dict[str, list[str]] = {}
        for page, links in self.config.graph:
            graph.setdefault(self.page_url(page), []).extend(self.page_url(link) for link in links)
            for link in links:
                graph.setdefault(self.page_url(link), [])
        return graph

    def graph_urls(self) -> set[str]:
        """Every graph page of the site."""
        return set(self._links)

    def click_depths(self, seed_url: str) -> dict[str, int]:
        """Breadth-first distance in clicks from ``seed_url`` of every graph page it reaches."""
        depths, level, depth = {seed_url: 0}, [seed_url], 0
        while level:
            depth += 1
            level = list(dict.fromkeys(link for url in level for link in self.graph_links(url)
                                       if link not in depths))
            depths.update(dict.fromkeys(level, depth))
        return depths

    def graph_links(self, url: str) -> list[str]:
        """Absolute outgoing links of a graph page (empty for any other URL)."""
        return list(self._links.get(url, []))

    def expected_urls(self, seed_url: str, maxdepth: int, *,
                      allowed_domains: Sequence[str] | None = None,
                      allow_regex: Sequence[str] = (), deny_regex: Sequence[str] = ()) -> set[str]:
        """URLs a correct crawl from ``seed_url`` fetches: breadth first, links filtered."""
        def keep(url: str) -> bool:
            host = urlsplit(url).hostname or ""
            if allowed_domains and host not in allowed_domains:
                return False
            if any(re.search(pattern, url) for pattern in deny_regex):
                return False
            return not allow_regex or any(re.search(pattern, url) for pattern in allow_regex)

        seen, frontier = {seed_url}, [seed_url]
        for _depth in range(maxdepth):
            found = [link for url in frontier for link in self.graph_links(url)]
            frontier = [link for link in dict.fromkeys(found) if link not in seen and keep(link)]
            seen.update(frontier)
        return seen

    def render(self, host: str, path: str) -> Page:
        """The answer for ``path`` on ``host``."""
        if path == "/robots.txt":
            delay = self.config.crawl_delay_s
            text = "User-agent: *\nDisallow: /private/\n"
            text += f"Crawl-delay: {delay:g}\n" if delay is not None else ""
            return Page(200, "text/plain", text.encode())
        if host in self._host_status:
            return self._fixed_status(host)
        url = self.url(host, path)
        if url in self._links:
            if self.config.page_delay_s:
                time.sleep(self.config.page_delay_s)
            return Page(200, "text/html; charset=utf-8", self._html(path, self._links[url]))
        return self._render_special(host, path)

    def render_streamed(self, host: str, path: str) -> Streamed | None:
        """``SiteConfig.streamed``'s answer for ``path`` on ``host``; None when it has none."""
        streamed = self.config.streamed
        return None if streamed is None else streamed(self.url(host, ""), path)

    def _fixed_status(self, host: str) -> Page:
        status = self._host_status[host]
        retry_after = self._retry_after_s.get(host)
        headers = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
        return Page(status, "text/html; charset=utf-8",
                    f"<html><body>status {status}</body></html>".encode(), headers)

    def _render_special(self, host: str, path: str) -> Page:
        html = "text/html; charset=utf-8"
        if path in ("/", "/special/index.html"):
            targets = [self.url(host, "/p/0.html")] if path == "/" else \
                [self.url(host, p) for p in SPECIAL_PATHS]
            return Page(200, html, self._html(path, targets))
        if path == "/private/secret.html":
            return Page(200, html, self._html(path, []))
        if path == "/special/error500.html":
            return Page(500, html, b"<html><body>server error</body></html>")
        if path == "/special/latin1.html":
            return Page(200, "text/html", LATIN1_BODY)
        if path == "/special/huge.html":
            filler = b"<p>" + b"x" * 96 + b"</p>\n"
            count = self.config.huge_page_bytes // len(filler) + 1
            return Page(200, html, b"<html><body>" + filler * count + b"</body></html>")
        if path == "/special/doc.pdf":
            return Page(200, "application/pdf", b"%PDF-1.4\n%%EOF\n")
        if path == "/special/slow.html":
            time.sleep(self.config.slow_page_s)
            return Page(200, html, self._html(path, []))
        return Page(404, html, b"<html><body>not found</body></html>")

    def write_static(self, root: Path) -> list[str]:
        """Write robots.txt, the index and every graph page under ``root/<host>/``.

        For a static web server (nginx, in the benchmarks). Dynamic special pages (500, slow, huge)
        are not written. Returns the hosts written.
        """
        for host in self.config.hosts:
            for path in ("/robots.txt", "/"):
                _write(root / host / (path.strip("/") or "index.html"), self.render(host, path).body)
        for url, links in self._links.items():
            parts = urlsplit(url)
            _write(root / str(parts.hostname) / parts.path.lstrip("/"), self._html(parts.path, links))
        return list(self.config.hosts)

    def nginx_locations(self) -> str:
        """nginx ``server`` block lines for ``write_static``'s files: none, the defaults."""
        return ""

    def _html(self, path: str, links: Iterable[str]) -> bytes:
        anchors = "".join(f'<li><a href="{link}">link to {urlsplit(link).path}</a></li>\n'
                          for link in links)
        head = f"<html><head><title>{path}</title></head><body><h1>{path}</h1><ul>\n{anchors}</ul>"
        padding = max(0, self.config.page_bytes - len(head) - 30)
        return (head + f"<p>{'lorem ipsum ' * (padding // 12)}</p></body></html>").encode()


def _write(target: Path, body: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(body)


class ServedSite(Protocol):
    """What ``_Handler`` asks of a site: the answer for a path on a host."""

    def render(self, host: str, path: str) -> Page: ...

    def render_streamed(self, host: str, path: str) -> Streamed | None: ...


class SiteOwner(Protocol):
    """The server object behind every host's ``_HostServer``: the site and its request log."""

    @property
    def site(self) -> ServedSite: ...

    stopping: threading.Event

    def record(self, host: str, path: str) -> None: ...

    def hits_snapshot(self) -> Counter[str]: ...


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HostServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if path == "/__hits":  # total pages served so far, for benchmarks; not counted
            body = str(sum(self.server.owner.hits_snapshot().values())).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.server.owner.record(self.server.host, self.path if self.server.keep_query else path)
        streamed = self.server.owner.site.render_streamed(self.server.host, path)
        if streamed is not None:
            self._send_streamed(streamed)
            return
        page = self.server.owner.site.render(self.server.host, path)
        self.send_response(page.status)
        self.send_header("Content-Type", page.content_type)
        self.send_header("Content-Length", str(len(page.body)))
        for name, value in page.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(page.body)

    def _send_streamed(self, page: Streamed) -> None:
        """Send ``page`` chunk by chunk (chunked when it has no length) until it ends, the
        client goes away or the server stops."""
        chunked = page.length is None
        try:
            self.send_response(page.status)
            self.send_header("Content-Type", page.content_type)
            self.send_header(*(("Transfer-Encoding", "chunked") if chunked
                               else ("Content-Length", str(page.length))))
            for name, value in page.headers:
                self.send_header(name, value)
            self.end_headers()
            for chunk in page.chunks:
                if self.server.owner.stopping.is_set():
                    self.close_connection = True
                    return
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client hung up (a cancelled download): nothing more to send
            self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


class _HostServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog (5) drops the SYNs of a burst of new connections;
    # the client retries after 1 s and the site log shows requests that were sent long before.
    request_queue_size = 128

    def __init__(self, host: str, port: int, owner: SiteOwner, *, keep_query: bool = False) -> None:
        """``keep_query``: the request log records the path with its query string."""
        self.host, self.owner, self.keep_query = host, owner, keep_query
        super().__init__((host, port), _Handler)


class HostServers:
    """One threaded HTTP server per host, all on one port, each in a daemon thread; a
    subclass says which hosts and builds each server (``_server``)."""

    stopping: threading.Event
    """Set by ``stop``: long answers (streamed bodies) end at their next chunk."""
    _servers: list[ThreadingHTTPServer]

    def _hosts(self) -> Sequence[str]:
        raise NotImplementedError

    def _server(self, host: str) -> ThreadingHTTPServer:
        raise NotImplementedError

    def start(self) -> Self:
        self.stopping.clear()
        for host in self._hosts():
            server = self._server(host)
            threading.Thread(target=server.serve_forever, name=f"site-{host}", daemon=True).start()
            self._servers.append(server)
        return self

    def stop(self) -> None:
        self.stopping.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SiteServer(HostServers):
    """Serves a ``GeneratedSite`` on every configured host, one thread per host.

    Keeps the site's own request log: hits per URL, and the arrival time
    (``time.monotonic()``) of every request per host, robots.txt excepted.
    """

    def __init__(self, config: SiteConfig, port: int) -> None:
        self.site = GeneratedSite(config, port)
        self.hits: Counter[str] = Counter()
        self.arrivals_s: dict[str, list[float]] = defaultdict(list)
        self._lock = threading.Lock()
        self._servers = []
        self.stopping = threading.Event()

    def record(self, host: str, path: str) -> None:
        arrived_s = time.monotonic()
        with self._lock:
            self.hits[self.site.url(host, path)] += 1
            if path != "/robots.txt":
                self.arrivals_s[host].append(arrived_s)

    def hits_snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.hits)

    def arrivals_snapshot(self) -> dict[str, list[float]]:
        """Arrival times per host so far (robots.txt not included)."""
        with self._lock:
            return {host: list(times) for host, times in self.arrivals_s.items()}

    def _hosts(self) -> Sequence[str]:
        return self.site.config.hosts

    def _server(self, host: str) -> ThreadingHTTPServer:
        return _HostServer(host, self.site.port, self)


def site_arguments(description: str) -> argparse.ArgumentParser:
    """The command-line options every generated site's ``main`` takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", default="127.0.0.2,127.0.0.3")
    parser.add_argument("--page-bytes", type=int, default=7000)
    return parser


def serve_until_interrupted(server: HostServers) -> None:
    """Serve (already started) until Ctrl-C, then stop."""
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = site_arguments("Serve the generated test site.")
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--links", type=int, default=20)
    args = parser.parse_args(argv)
    config = SiteConfig(hosts=tuple(args.hosts.split(",")), pages_per_host=args.pages,
                        links_per_page=args.links, page_bytes=args.page_bytes)
    serve_until_interrupted(SiteServer(config, args.port).start())


if __name__ == "__main__":
    main()
