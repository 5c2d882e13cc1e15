"""A small local web site whose every page a test chooses, with the site's own request log.

Used by the engine-agnostic crawl contract suite (``tests/contract/``): the verdict on a crawl
is what the site itself saw (which path was requested how often, and when), not what the
crawler or Redis say about it.

``ContractSite(hosts)`` serves every host (loopback addresses from ``tests/support/addresses.py``) on one free port, one
thread per host. ``add(host, path, Reply(...))`` sets a page; ``add_html`` builds an HTML page
from a list of links. Every host answers ``/robots.txt`` (``Disallow: /private/`` unless told
otherwise) and 404 for any path it was not given; every request is logged, 404s included, so
a request the crawler should never have sent shows up. ``generated_graph`` builds a seeded
random link graph with many repeated links and cycles, ``reachable`` the pages a breadth-first
crawl from a seed reaches within a depth.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from random import Random

from scrapy_cluster.sitegen.site import HostServers
from tests.support.services import free_port

ROBOTS_PATH = "/robots.txt"
DEFAULT_ROBOTS = "User-agent: *\nDisallow: /private/\n"
HTML = "text/html; charset=utf-8"
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Reply:
    """One answer. ``chunked``: sent with ``Transfer-Encoding: chunked`` (no length);
    ``delay_s``: the server waits this long before answering."""

    status: int = 200
    content_type: str = HTML
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    chunked: bool = False
    delay_s: float = 0.0


@dataclass(frozen=True)
class Hit:
    """One request the site received: host, path (query included), arrival time
    (``time.monotonic()``) and User-Agent."""

    host: str
    path: str
    at_s: float
    agent: str = ""


def html_page(title: str, links: Iterable[str], extra: str = "") -> bytes:
    """A plain HTML page linking to ``links`` (absolute or relative hrefs, in order)."""
    anchors = "".join(f'<li><a href="{link}">{link}</a></li>\n' for link in links)
    return (f"<html><head><title>{title}</title></head><body><h1>{title}</h1>\n"
            f"<ul>\n{anchors}</ul>{extra}</body></html>").encode()


class ContractSite(HostServers):
    """Serves chosen pages on several loopback hosts and logs every request."""

    def __init__(self, hosts: Sequence[str], port: int | None = None) -> None:
        self.hosts = tuple(hosts)
        self.port = port or free_port()
        self._pages: dict[tuple[str, str], Reply] = {}
        self._robots: dict[str, Reply] = {}
        self._log: list[Hit] = []
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self.stopping = threading.Event()

    # --- pages ------------------------------------------------------------------------------
    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.port}{path}"

    def add(self, host: str, path: str, reply: Reply) -> str:
        """Serve ``reply`` at ``path`` on ``host``; returns the page's URL."""
        if host not in self.hosts:
            raise ValueError(f"{host} is not one of the site's hosts {self.hosts}")
        self._pages[(host, path)] = reply
        return self.url(host, path)

    def add_html(self, host: str, path: str, links: Iterable[str], *, extra: str = "",
                 delay_s: float = 0.0) -> str:
        return self.add(host, path, Reply(body=html_page(path, links, extra), delay_s=delay_s))

    def add_graph(self, graph: Mapping[str, Sequence[str]], *, delay_s: float = 0.0) -> None:
        """Serve every page of ``graph`` (URL -> hrefs, as ``generated_graph`` builds it)."""
        for url, links in graph.items():
            host, path = self.split(url)
            self.add_html(host, path, links, delay_s=delay_s)

    def set_robots(self, host: str, robots: str | Reply) -> None:
        """The host's ``/robots.txt``: a text served as text/plain, or any ``Reply``."""
        self._robots[host] = robots if isinstance(robots, Reply) else \
            Reply(content_type="text/plain", body=robots.encode())

    def split(self, url: str) -> tuple[str, str]:
        """``(host, path)`` of one of this site's URLs."""
        prefix, _, path = url.partition("://")[2].partition("/")
        host, _, port = prefix.partition(":")
        if int(port) != self.port:
            raise ValueError(f"{url} is not on port {self.port}")
        return host, "/" + path

    def reply(self, host: str, path: str) -> Reply:
        if path == ROBOTS_PATH:
            return self._robots.get(host) or Reply(content_type="text/plain",
                                                   body=DEFAULT_ROBOTS.encode())
        found = self._pages.get((host, path))
        return found if found is not None else Reply(404, body=b"<html>not found</html>")

    # --- the request log --------------------------------------------------------------------
    def record(self, host: str, path: str, agent: str = "") -> None:
        at_s = time.monotonic()
        with self._lock:
            self._log.append(Hit(host, path, at_s, agent))

    def log(self) -> list[Hit]:
        with self._lock:
            return list(self._log)

    def hits(self, hosts: Iterable[str] | None = None, *, robots: bool = False) -> Counter[str]:
        """Requests per URL on ``hosts`` (all by default), robots.txt left out unless asked."""
        wanted = set(self.hosts if hosts is None else hosts)
        return Counter(self.url(hit.host, hit.path) for hit in self.log()
                       if hit.host in wanted and (robots or hit.path != ROBOTS_PATH))

    def arrivals(self, host: str) -> list[float]:
        """Arrival times of the requests ``host`` received, robots.txt left out."""
        return sorted(hit.at_s for hit in self.log()
                      if hit.host == host and hit.path != ROBOTS_PATH)

    # --- serving ----------------------------------------------------------------------------
    def _hosts(self) -> Sequence[str]:
        return self.hosts

    def _server(self, host: str) -> ThreadingHTTPServer:
        return _HostServer(host, self.port, self)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HostServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        site, host = self.server.site, self.server.host
        site.record(host, self.path, self.headers.get("User-Agent", ""))
        reply = site.reply(host, self.path)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            if reply.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(len(reply.body)))
            for name, value in reply.headers:
                self.send_header(name, value)
            self.end_headers()
            if not reply.chunked:
                self.wfile.write(reply.body)
                return
            for chunk in _chunks(reply.body):
                if site.stopping.is_set():
                    self.close_connection = True
                    return
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client hung up (a cancelled download)
            self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


def _chunks(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), CHUNK_BYTES):
        yield body[start:start + CHUNK_BYTES]


class _HostServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of new connections must not wait for SYN retries

    def __init__(self, host: str, port: int, site: ContractSite) -> None:
        self.host, self.site = host, site
        super().__init__((host, port), _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that reset its connection (a crawler killed or cancelling a download) is
        no error of the site: say nothing (socketserver would print a traceback)."""


# --- generated graphs ---------------------------------------------------------------------
def generated_graph(site: ContractSite, hosts: Sequence[str], pages_per_host: int, *,
                    random_links: int = 4, seed: int = 11) -> dict[str, list[str]]:
    """A seeded link graph over ``/g/<n>.html`` of ``hosts``, every page reachable from the
    first host's page 0 and full of repeats: each page links to the next page of its host (a
    cycle through all of them), back to page 0 (absolute), to itself (relative), to
    ``random_links`` random pages of its host (relative, some twice), and every third page to
    a random page of the next host. Returns URL -> hrefs in page order."""
    rng = Random(seed)
    graph: dict[str, list[str]] = {}
    for index, host in enumerate(hosts):
        other = hosts[(index + 1) % len(hosts)]
        for number in range(pages_per_host):
            links = [f"/g/{(number + 1) % pages_per_host}.html",
                     site.url(host, "/g/0.html"), f"/g/{number}.html"]
            picks = [rng.randrange(pages_per_host) for _ in range(random_links)]
            links += [f"/g/{n}.html" for n in picks] + [f"/g/{picks[0]}.html"]
            if number % 3 == 0:
                links.append(site.url(other, f"/g/{rng.randrange(pages_per_host)}.html"))
            graph[site.url(host, f"/g/{number}.html")] = links
    return graph


def absolute_links(page_url: str, hrefs: Iterable[str]) -> list[str]:
    """``hrefs`` of the page at ``page_url`` made absolute (the graph's hrefs are plain)."""
    origin = page_url.split("/", 3)
    return [href if "://" in href else f"{origin[0]}//{origin[2]}{href}" for href in hrefs]


def reachable(graph: Mapping[str, Sequence[str]], seed: str, maxdepth: int) -> dict[str, int]:
    """Breadth-first click depth of every page of ``graph`` within ``maxdepth`` of ``seed``."""
    depths, level = {seed: 0}, [seed]
    for depth in range(1, maxdepth + 1):
        level = list(dict.fromkeys(
            link for url in level for link in absolute_links(url, graph.get(url, ()))
            if link not in depths))
        depths.update(dict.fromkeys(level, depth))
        if not level:
            break
    return depths
