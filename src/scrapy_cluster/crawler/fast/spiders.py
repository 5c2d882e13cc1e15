"""The spiders the fast engine runs: what a fetched page queues and what its item says.

``link`` (``spiders/link.py``): every link the crawl's rules allow (``links.select_links``:
allowed domains, allow/deny regexes, extensions, ``maxdepth``, ``expires``) is queued as a child
(crawl fields inherited, ``curdepth`` + 1, priority one step of 10 below the page); the links
the rules drop are counted in the crawl's URL funnel.

``wandering`` (``spiders/wandering.py``): ONE link, drawn at random among the page's links the
crawl's rules allow (``maxdepth`` is not used; none once the crawl ``expires``), is queued as
the Scrapy spider's ``Request(link.url, callback=parse, meta={"step": step + 1},
priority=<the page's priority>)`` becomes on its way to the frontier: dropped past
URLLENGTH_LIMIT (Scrapy's UrlLengthMiddleware), a ``Referer`` by REFERRER_POLICY or the page's
``Referrer-Policy`` header (RefererMiddleware), the crawl fields inherited with ``curdepth`` + 1
(MetaPassthroughMiddleware), then ``serialization.request_to_dict``. It is deduplicated per
crawl like any request, so the walk ends at a page whose drawn link was seen before or that has
no allowed link. Its item is the page item with ``attrs.step``: the hops from the seed (0).
Nothing is counted as filtered: the Scrapy spider counts no link it does not follow.

Both queue their requests in ONE ``enqueue_many(dedupe=True)`` (none when there is nothing to
queue); the page's lease is finished only after it returned (``pages.PageProcessor``).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from scrapy import Request
from scrapy.http import Response
from scrapy.link import Link
from scrapy.spidermiddlewares.referer import RefererMiddleware

from scrapy_cluster.crawler.common import meta as crawl_meta
from scrapy_cluster.crawler.common.items import headers_to_dict
from scrapy_cluster.crawler.common.link_rules import crawl_expired, rules_for, select_links
from scrapy_cluster.crawler.common.resolution import scrapy_settings
from scrapy_cluster.crawler.fast.requests import last_header

SPIDERS = ("link", "wandering")


@dataclass(frozen=True)
class Followed:
    """What a page queues (``requests``, ONE round trip) and the links its crawl's rules
    dropped (``filtered``: reason -> count, counted under the crawl of ``crawl``)."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    filtered: Counter[str] = field(default_factory=Counter)
    crawl: Mapping[str, Any] = field(default_factory=dict)


class FastSpider(Protocol):
    """A spider's semantics in the fast engine (no I/O: ``PageProcessor`` does the I/O)."""

    name: str

    def follow(self, stored: Mapping[str, Any], *, url: str, response_url: str,
               response_headers: Sequence[tuple[str, str]], links: Sequence[Link],
               dropped: int, now_s: float) -> Followed:
        """The requests a page of ``stored`` (the queued request) queues, from its ``links``
        (``dropped``: links past CRAWLER_MAX_LINKS_PER_PAGE)."""
        ...

    def item(self, item: dict[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
        """The page's result item, from the common page item."""
        ...


class LinkSpider:
    """``spiders/link.py``: every allowed link, one step of priority down, to ``maxdepth``."""

    name = "link"

    def follow(self, stored: Mapping[str, Any], *, url: str, response_url: str,
               response_headers: Sequence[tuple[str, str]], links: Sequence[Link],
               dropped: int, now_s: float) -> Followed:
        selection = select_links(links, stored, now_s, dropped=dropped)
        base = crawl_meta.inherit(stored, {})
        requests = []
        if selection.follow:
            base["priority"] = crawl_meta.child_priority(stored)
            requests = [{**base, "url": link.url} for link in selection.follow]
        return Followed(requests, selection.filtered, base)

    def item(self, item: dict[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
        return item


def wandering_step(stored: Mapping[str, Any]) -> int:
    """Hops from the seed of the page of ``stored``: its ``meta.step`` (0 for a seed), which
    the Scrapy crawler reads as ``response.meta["step"]``."""
    return int((stored.get("meta") or {}).get("step") or 0)


class WanderingSpider:
    """``spiders/wandering.py`` (see module docstring). ``rng``: the random draw (injectable);
    ``referer``: Scrapy's RefererMiddleware, None when REFERER_ENABLED is off;
    ``url_length_limit``: URLLENGTH_LIMIT (0: none)."""

    name = "wandering"

    def __init__(self, *, referer: Any = None, url_length_limit: int = 2083,
                 rng: random.Random | None = None) -> None:
        self.referer, self.url_length_limit = referer, url_length_limit
        self.rng = rng if rng is not None else random.Random()

    @classmethod
    def from_settings(cls, cluster: Mapping[str, Any],
                      rng: random.Random | None = None) -> WanderingSpider:
        """With the Scrapy settings the Scrapy crawler runs with (``scrapy_settings``)."""
        settings = scrapy_settings(cluster)
        referer = RefererMiddleware(settings) if settings.getbool("REFERER_ENABLED") else None
        return cls(referer=referer, url_length_limit=settings.getint("URLLENGTH_LIMIT"), rng=rng)

    def follow(self, stored: Mapping[str, Any], *, url: str, response_url: str,
               response_headers: Sequence[tuple[str, str]], links: Sequence[Link],
               dropped: int, now_s: float) -> Followed:
        if crawl_expired(stored, now_s):
            return Followed(crawl=stored)
        rules = rules_for(stored)
        candidates = [link for link in links if rules.allows(link.url)]
        if not candidates:
            return Followed(crawl=stored)
        link = self.rng.choice(candidates)
        request = self.next_request(stored, link.url, response_url=response_url,
                                    response_headers=response_headers)
        return Followed([] if request is None else [request], crawl=stored)

    def next_request(self, stored: Mapping[str, Any], link_url: str, *, response_url: str,
                     response_headers: Sequence[tuple[str, str]]) -> dict[str, Any] | None:
        """The crawl-request dict the Scrapy crawler queues for the wandering spider's
        ``Request`` to ``link_url`` from the page of ``stored``; None when UrlLengthMiddleware
        drops it."""
        request = Request(link_url, meta={"step": wandering_step(stored) + 1},
                          priority=int(stored.get("priority") or 0))
        if self.url_length_limit and len(request.url) > self.url_length_limit:
            return None
        if self.referer is not None:
            policy = last_header(response_headers, "Referrer-Policy")
            page = Response(response_url, headers={} if policy is None
                            else {"Referrer-Policy": policy})
            self.referer.get_processed_request(request, page)
        meta = crawl_meta.inherit(stored, dict(request.meta))
        data: dict[str, Any] = {"url": request.url, "spiderid": self.name,
                                **crawl_meta.cluster_fields(meta), "priority": request.priority}
        if request.headers:
            data["headers"] = headers_to_dict(request.headers)
        kept = crawl_meta.user_meta(meta)
        if kept:
            data["meta"] = kept
        data["callback"] = "parse"
        data["retry_times"] = 0
        return data

    def item(self, item: dict[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
        item["attrs"] = {**(item.get("attrs") or {}), "step": wandering_step(stored)}
        return item


def fast_spider(name: str, cluster: Mapping[str, Any]) -> FastSpider:
    """The fast engine's ``name`` spider with the crawler's settings; KeyError for another."""
    if name == LinkSpider.name:
        return LinkSpider()
    if name == WanderingSpider.name:
        return WanderingSpider.from_settings(cluster)
    raise KeyError(name)
