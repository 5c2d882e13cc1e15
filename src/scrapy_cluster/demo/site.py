"""The demo's web site: the generated test site plus what a real site has.

Compared with ``sitegen.site.GeneratedSite``, some graph pages also link to a
path that robots.txt disallows and to pages that do not exist (404), the seed
page links to the first pages of every other host (so each domain has backlog
from the start), and one host answers slowly. Every request's arrival time is recorded
so the demo can show each domain's achieved request rate against its limit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from scrapy_cluster.sitegen.site import GeneratedSite, Page, SiteConfig, SiteServer

DISALLOWED_PREFIX = "/private/"
ENTRY_PAGES = 4
"""The seed page links to this many pages of every other host."""


@dataclass(frozen=True)
class DemoDomain:
    """One demo host and the throttle the demo configures for it (``moderated`` None:
    QUEUE_MODERATED)."""

    host: str
    hits: int
    window_s: float
    delay_s: float = 0.0
    moderated: bool | None = None


class DemoSite(GeneratedSite):
    """Graph pages with robots-disallowed and broken links; per-host response delays."""

    def __init__(self, config: SiteConfig, port: int, delays_s: dict[str, float]) -> None:
        self.delays_s = delays_s
        super().__init__(config, port)

    def _build_graph(self) -> dict[str, list[str]]:
        graph = super()._build_graph()
        seed = self.url(self.config.hosts[0], "/p/0.html")
        graph[seed] += [self.url(host, f"/p/{number}.html")
                        for host in self.config.hosts[1:] for number in range(ENTRY_PAGES)]
        for host in self.config.hosts:
            graph[self.url(host, "/p/0.html")].append(self.url(host, "/private/secret.html"))
            graph[self.url(host, "/p/0.html")].append(self.url(host, f"/gone/{host}.html"))
        return graph

    def expected_urls(self, seed_url: str, maxdepth: int, **filters: object) -> set[str]:
        """What a polite crawl fetches: the reachable pages minus robots-disallowed ones."""
        return {url for url in self.reachable_urls(seed_url, maxdepth)
                if not is_disallowed(url)}

    def reachable_urls(self, seed_url: str, maxdepth: int) -> set[str]:
        return super().expected_urls(seed_url, maxdepth)

    def render(self, host: str, path: str) -> Page:
        delay_s = self.delays_s.get(host, 0.0)
        if delay_s and path != "/robots.txt":
            time.sleep(delay_s)
        return super().render(host, path)


def is_disallowed(url: str) -> bool:
    return urlsplit(url).path.startswith(DISALLOWED_PREFIX)


class DemoSiteServer(SiteServer):
    """Serves a ``DemoSite``; the request log (hits, arrivals) is ``SiteServer``'s."""

    def __init__(self, domains: list[DemoDomain], port: int, pages_per_host: int = 60) -> None:
        config = SiteConfig(hosts=tuple(d.host for d in domains), pages_per_host=pages_per_host,
                            links_per_page=20, cross_host_every=4,
                            page_bytes=2500, seed=11)
        super().__init__(config, port)
        self.site: DemoSite = DemoSite(config, port, {d.host: d.delay_s for d in domains})

    def __enter__(self) -> DemoSiteServer:
        self.start()
        return self
