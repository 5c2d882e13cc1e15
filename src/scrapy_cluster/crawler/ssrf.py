"""The SSRF guard in the Scrapy engine: the adapters of ``common/address_guard.py``'s rule.

The rule (``AddressGuard``) is one, shared by both crawler engines, and is applied twice:

1. **Before the request** (``SsrfGuardMiddleware``, ``AddressGuard.check``): the host *as the
   engine's HTTP client parses the URL* (``twisted_host`` here, ``aiohttp_host`` for the fast
   engine; no hand-written URL splitting) is resolved and judged. A refusal is an error item
   naming the address and the reason (``ForbiddenAddress``, funnel ``filtered:ssrf``), and no
   connection is opened.
2. **At connect time**, on the address the client really connects to, after its own DNS
   lookup, on every connection (robots.txt and every redirect hop included): the Scrapy
   engine's name resolver (``GuardedNameResolver``, Scrapy's ``TWISTED_DNS_RESOLVER``) hands
   Twisted only allowed addresses; the fast engine's aiohttp connector creates its sockets
   through ``AddressGuard.socket_factory``, which refuses a forbidden address. This closes what
   step 1 cannot see: a DNS answer that changes between the check and the fetch (rebinding),
   and any URL form the two parsers would read differently.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any
from urllib.parse import urldefrag

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.resolver import CachingThreadedResolver
from scrapy.settings import SETTINGS_PRIORITIES
from twisted.internet._resolver import GAIResolver
from twisted.internet.interfaces import IHostnameResolver, IResolutionReceiver
from twisted.web.client import URI
from zope.interface import implementer

from scrapy_cluster.crawler.common.address_guard import (
    AddressGuard,
    IpNetwork,
    refusal_message,
    unreadable_host_message,
)
from scrapy_cluster.crawler.common.resolution import cluster_settings

logger = logging.getLogger(__name__)


class ForbiddenAddress(IgnoreRequest):
    """The request's host is an internal address and private networks are not allowed."""


def twisted_host(url: str) -> str:
    """The host the Scrapy engine's HTTP client (Scrapy's HTTP/1.1 handler over Twisted's
    ``Agent``) connects to for ``url``: the handler drops the fragment, then Twisted's ``URI``
    parses the rest. ``ValueError`` when it cannot."""
    host: bytes = URI.fromBytes(urldefrag(url)[0].encode("ascii")).host
    return host.decode("ascii")


class SsrfGuardMiddleware:
    """Downloader middleware, step 1 for the Scrapy engine (see module docstring)."""

    def __init__(self, allowed: Sequence[IpNetwork] = ()) -> None:
        self.guard = AddressGuard(tuple(allowed))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SsrfGuardMiddleware:
        guard = AddressGuard.from_settings(cluster_settings(crawler))
        if guard is None:
            raise NotConfigured("CRAWLER_ALLOW_PRIVATE_NETWORKS is on")
        resolver = installed_resolver(crawler.settings)
        if resolver != RESOLVER_PATH:
            logger.warning(
                "the SSRF guard checks only URLs, not the addresses connected to: the DNS "
                "resolver is %s, not %s (leave TWISTED_DNS_RESOLVER and DNS_RESOLVER unset)",
                resolver, RESOLVER_PATH, extra={"event": "ssrf_resolver_replaced"})
        return cls(guard.allowed)

    async def process_request(self, request: Request) -> None:
        try:
            host = twisted_host(request.url)
        except (ValueError, UnicodeError) as exc:
            raise ForbiddenAddress(unreadable_host_message(request.url, exc)) from exc
        message = await self.guard.check(request.url, host)
        if message is not None:
            raise ForbiddenAddress(message)


RESOLVER_PATH = "scrapy_cluster.crawler.ssrf.GuardedNameResolver"


def installed_resolver(settings: Any) -> str:
    """The resolver class Scrapy's ``CrawlerProcess`` installs (its own rule: the deprecated
    DNS_RESOLVER wins when it was set with a higher priority than TWISTED_DNS_RESOLVER)."""
    dns_priority = settings.getpriority("DNS_RESOLVER") or 0
    twisted_priority = settings.getpriority("TWISTED_DNS_RESOLVER") or 0
    if dns_priority > SETTINGS_PRIORITIES["default"] and dns_priority >= twisted_priority:
        return str(settings["DNS_RESOLVER"])
    return str(settings["TWISTED_DNS_RESOLVER"])


REFUSALS_KEPT = 1024
"""Hosts whose last refusal ``GuardedNameResolver`` remembers, to name it in the error item."""


@implementer(IHostnameResolver)
class GuardedNameResolver:
    """Step 2 for the Scrapy engine: Twisted's name resolver (``getaddrinfo`` in a thread:
    IPv4 and IPv6), handing the connection only the addresses the guard allows. Installed
    through Scrapy's ``TWISTED_DNS_RESOLVER`` (the crawler settings name it); with the guard
    off it is Scrapy's default resolver. A host all of whose addresses are refused fails to
    connect (Twisted: "no results for hostname lookup"); ``refusal(host)`` then gives the
    refusal so the download handler can raise ``ForbiddenAddress`` instead."""

    def __init__(self, reactor: Any, guard: AddressGuard) -> None:
        self.reactor, self.guard = reactor, guard
        self.resolver: Any = None
        self._refusals: OrderedDict[str, tuple[str, str]] = OrderedDict()

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> Any:
        guard = AddressGuard.from_settings(cluster_settings(crawler))
        if guard is None:
            return CachingThreadedResolver.from_crawler(crawler, reactor)
        return cls(reactor, guard)

    def install_on_reactor(self) -> None:
        self.resolver = GAIResolver(self.reactor)
        self.reactor.installNameResolver(self)

    def resolveHostName(self, resolutionReceiver: Any, hostName: str, portNumber: int = 0,
                        addressTypes: Any = None, transportSemantics: str = "TCP") -> Any:
        receiver = _GuardedReceiver(resolutionReceiver, self, hostName)
        return self.resolver.resolveHostName(receiver, hostName, portNumber, addressTypes,
                                             transportSemantics)

    def refused(self, host: str, address: str, reason: str) -> None:
        self._refusals[host.lower()] = (address, reason)
        self._refusals.move_to_end(host.lower())
        while len(self._refusals) > REFUSALS_KEPT:
            self._refusals.popitem(last=False)

    def refusal(self, host: str) -> tuple[str, str] | None:
        """``(address, reason)`` of the last address of ``host`` this resolver refused."""
        return self._refusals.get(host.lower())


@implementer(IResolutionReceiver)
class _GuardedReceiver:
    """Passes the allowed addresses of one resolution on to Twisted's receiver."""

    def __init__(self, receiver: Any, resolver: GuardedNameResolver, host: str) -> None:
        self.receiver, self.resolver, self.host = receiver, resolver, host

    def resolutionBegan(self, resolution: Any) -> None:
        self.receiver.resolutionBegan(resolution)

    def addressResolved(self, address: Any) -> None:
        reason = self.resolver.guard.reason(str(address.host))
        if reason is None:
            self.receiver.addressResolved(address)
        else:
            self.resolver.refused(self.host, str(address.host), reason)

    def resolutionComplete(self) -> None:
        self.receiver.resolutionComplete()


def connect_refusal(url: str) -> ForbiddenAddress | None:
    """For a download of ``url`` that failed to connect: the ``ForbiddenAddress`` to raise
    instead when the installed ``GuardedNameResolver`` refused its host's addresses."""
    # Imported here, not at the top: importing the reactor installs Twisted's default one, and
    # Scrapy must install the configured reactor first.
    from twisted.internet import reactor

    resolver = getattr(reactor, "nameResolver", None)
    if not isinstance(resolver, GuardedNameResolver):
        return None
    try:
        host = twisted_host(url)
    except (ValueError, UnicodeError):
        return None
    refusal = resolver.refusal(host)
    if refusal is None:
        return None
    return ForbiddenAddress(refusal_message(url, host, *refusal) + " (refused at connect time)")
