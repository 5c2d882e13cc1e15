"""robots.txt for the fast engine: Protego, one parse per host and port, cached in-process.

Like Scrapy's RobotsTxtMiddleware: ``<scheme>://<host[:port]>/robots.txt`` is fetched once (a
few redirects followed) and its body parsed whatever the status (a 404 page has no rules, so
everything is allowed); a download that fails allows everything. Concurrent requests of a new
host wait for the same fetch. The user agent is ROBOTSTXT_USER_AGENT, else the request's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urljoin, urlsplit

from protego import Protego

from scrapy_cluster.crawler.fast.fetch import FetchError, FetchRequest, FetchResponse

ROBOTS_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
logger = logging.getLogger(__name__)
FetchRobots = Callable[[FetchRequest], Awaitable[FetchResponse]]
OnParsed = Callable[[str, Protego], Awaitable[None]]


class RobotsCache:
    """``allowed(url, user_agent)``: one robots.txt download per host for the process's life."""

    def __init__(self, fetch: FetchRobots, *, headers: tuple[tuple[str, str], ...] = (),
                 user_agent: str | None = None, on_parsed: OnParsed | None = None) -> None:
        self._fetch, self.headers, self.user_agent = fetch, headers, user_agent
        self.on_parsed = on_parsed
        self._parsers: dict[str, asyncio.Future[Protego | None]] = {}

    async def allowed(self, url: str, user_agent: str) -> bool:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        future = self._parsers.get(origin)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._parsers[origin] = future
            try:
                future.set_result(await self._load(origin))
            finally:
                if not future.done():  # cancelled or failed: the next request tries again
                    del self._parsers[origin]
                    future.set_result(None)
        parser = await asyncio.shield(future)
        return parser is None or bool(parser.can_fetch(url, self.user_agent or user_agent))

    async def _load(self, origin: str) -> Protego | None:
        url = f"{origin}/robots.txt"
        try:
            for _ in range(ROBOTS_REDIRECTS + 1):
                response = await self._fetch(FetchRequest(url, headers=self.headers))
                location = dict((k.lower(), v) for k, v in response.headers).get("location")
                if response.status not in REDIRECT_STATUSES or not location:
                    parser = Protego.parse(response.body.decode("utf-8", errors="ignore"))
                    await self._parsed(url, parser)
                    return parser
                url = urljoin(url, location)
        except FetchError as exc:
            logger.warning("robots.txt of %s could not be read: %s", origin, exc)
        return None

    async def _parsed(self, url: str, parser: Protego) -> None:
        """Tell ``on_parsed`` (the Crawl-delay hook); its failure never blocks the crawl."""
        if self.on_parsed is None:
            return
        try:
            await self.on_parsed(url, parser)
        except Exception:  # noqa: BLE001 - logged; robots.txt is still obeyed
            logger.exception("robots.txt hook failed", extra={"url": url})
