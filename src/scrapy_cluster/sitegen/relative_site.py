"""A generated site shaped like real ones: relative links, repeated navigation, and a page
space with no end, so that a long crawl keeps finding pages it has not seen.

Every path of every host answers the same page (robots.txt excepted). Its links are written
the way sites write them, and resolve against the page's own URL, so the same bytes lead
somewhere new from every directory:

- root-relative navigation, the same on every page (``/``, ``/news/``, ``/help/faq.html#ship``,
  ``/products/?sort=price``...) and one absolute link to the next host: seen after the first
  page;
- ``RelativeSiteConfig.children`` sub-directories (``k/``): new pages, one level deeper;
- ``RelativeSiteConfig.leaves`` documents in the same directory (``item-k.html``): new;
- ``../k/`` siblings, ``./``, ``#fragments``: pages already seen;
- ``?page=2``-style query strings: new URLs of the same directory;
- a percent-encoded directory (``caf%C3%A9/``), a ``%20`` in a name, ``javascript:`` and
  ``mailto:`` links, and an ``<a>`` without ``href``.

From ``/t/`` a breadth-first crawl finds about 24 new URLs on a directory page (a little over
half of its 37 links) and a few on the others, without end: the frontier and the dedupe set
grow as they would on a large site. Pages are ``page_bytes`` long (7 KB by default), UTF-8.

``write_static`` writes robots.txt and the one page per host, and ``NGINX_LOCATIONS`` is the
nginx configuration that answers it for every path (``tests/support/nginx.py``);
``RelativeSiteServer`` serves it from Python (no nginx; standalone:
``python -m scrapy_cluster.sitegen.relative_site --port 8080``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from w3lib.url import canonicalize_url

from scrapy_cluster.sitegen.site import (
    HostServers,
    Page,
    _HostServer,
    serve_until_interrupted,
    site_arguments,
)

PAGE_FILE = "page.html"
SEED_PATH = "/t/"
NGINX_LOCATIONS = (f"location / {{ default_type text/html; try_files /{PAGE_FILE} =404; }} "
                   "location = /robots.txt { }")
"""nginx ``server`` block body: every path answers the page, robots.txt its own file."""
NAVIGATION = ("/", "/t/", "/news/", "/about.html", "/help/faq.html#shipping",
              "/products/?sort=price")
SEEN_AGAIN = ("../0/", "../1/", "./", "#top", "#comments")
NEW_VARIANTS = ("?page=2", "?page=2&sort=asc", "caf%C3%A9/", "a%20b.html")
NOT_HTTP = ("javascript:void(0)", "mailto:team@example.com")


@dataclass(frozen=True)
class RelativeSiteConfig:
    hosts: tuple[str, ...] = ("127.0.0.2", "127.0.0.3")
    children: int = 18
    """Relative sub-directory links (``k/``) per page: pages one level deeper, all new."""
    leaves: int = 2
    """Relative documents (``item-k.html``) per page, in the page's own directory."""
    page_bytes: int = 7000


class RelativeSite:
    """The page and robots.txt of one relative-link site served on ``port``."""

    def __init__(self, config: RelativeSiteConfig, port: int, *, scheme: str = "http") -> None:
        self.config, self.port, self.scheme = config, port, scheme

    def url(self, host: str, path: str) -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def hrefs(self, host: str) -> list[str]:
        """Every ``href`` of the page served on ``host``, in page order."""
        hosts = self.config.hosts
        other = hosts[(hosts.index(host) + 1) % len(hosts)]
        return [*NAVIGATION[:3], self.url(other, SEED_PATH), *NAVIGATION[3:],
                *(f"{k}/" for k in range(self.config.children)),
                *(f"item-{k}.html" for k in range(self.config.leaves)),
                *SEEN_AGAIN, *NEW_VARIANTS, *NOT_HTTP]

    def page(self, host: str) -> bytes:
        anchors = "".join(f'<li><a href="{_escaped(href)}">{_escaped(href)}</a></li>\n'
                          for href in self.hrefs(host))
        head = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
                "<title>A section</title></head>\n<body><nav><ul>\n"
                f"{anchors}</ul></nav>\n<main><h1>A section</h1><a name=\"top\"></a>\n")
        tail = "</main></body></html>\n"
        paragraph = ("<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do "
                     "eiusmod tempor incididunt ut labore et dolore magna aliqua.</p>\n")
        room = max(0, self.config.page_bytes - len(head) - len(tail))
        body = paragraph * (room // len(paragraph))
        return (head + body + " " * (room - len(body)) + tail).encode()

    def expected_urls(self, seed_url: str, maxdepth: int) -> set[str]:
        """The URLs a breadth-first crawl from ``seed_url`` fetches within ``maxdepth`` hops,
        as its items name them (a fragment kept; the site sees the URL without it): each href
        resolved against the page URL (``urljoin``), http(s) only, one fetch per canonical URL
        (w3lib's ``canonicalize_url``, as the frontier's dedupe)."""
        seen = {canonicalize_url(seed_url)}
        fetched, level = {seed_url}, [seed_url]
        for _depth in range(maxdepth):
            found = []
            for page in level:
                host = urlsplit(page).hostname or ""
                for href in self.hrefs(host):
                    url = urljoin(page, href)
                    if not url.startswith(("http://", "https://")):
                        continue
                    canonical = canonicalize_url(url)
                    if canonical not in seen:
                        seen.add(canonical)
                        found.append(url)
            fetched.update(found)
            level = found
        return fetched

    def robots_txt(self) -> bytes:
        return b"User-agent: *\nDisallow: /private/\n"

    def render(self, host: str, path: str) -> Page:
        if path == "/robots.txt":
            return Page(200, "text/plain", self.robots_txt())
        return Page(200, "text/html; charset=utf-8", self.page(host))

    def render_streamed(self, host: str, path: str) -> None:
        return None

    def write_static(self, root: Path) -> list[str]:
        """robots.txt and the page under ``root/<host>/`` (see ``NGINX_LOCATIONS``)."""
        for host in self.config.hosts:
            (root / host).mkdir(parents=True, exist_ok=True)
            (root / host / "robots.txt").write_bytes(self.robots_txt())
            (root / host / PAGE_FILE).write_bytes(self.page(host))
        return list(self.config.hosts)

    def nginx_locations(self) -> str:
        return NGINX_LOCATIONS


def _escaped(href: str) -> str:
    return href.replace("&", "&amp;")


class RelativeSiteServer(HostServers):
    """Serves a ``RelativeSite`` from Python on every host, one thread per host, counting the
    requests per URL, query string included (``hits_snapshot``)."""

    def __init__(self, config: RelativeSiteConfig, port: int) -> None:
        self.site = RelativeSite(config, port)
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._servers = []
        self.stopping = threading.Event()

    def record(self, host: str, path: str) -> None:
        with self._lock:
            self.hits[self.site.url(host, path)] += 1

    def hits_snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.hits)

    def _hosts(self) -> Sequence[str]:
        return self.site.config.hosts

    def _server(self, host: str) -> ThreadingHTTPServer:
        return _HostServer(host, self.site.port, self, keep_query=True)


def main(argv: Sequence[str] | None = None) -> None:
    args = site_arguments("Serve the relative-link test site.").parse_args(argv)
    config = RelativeSiteConfig(hosts=tuple(args.hosts.split(",")), page_bytes=args.page_bytes)
    serve_until_interrupted(RelativeSiteServer(config, args.port).start())


if __name__ == "__main__":
    main()
