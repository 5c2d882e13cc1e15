"""SSRF guard: refuse requests whose host is, or resolves to, an internal address.

Refused: loopback, private (RFC 1918, ULA), link-local (which holds the 169.254.169.254 cloud
metadata service), unspecified, multicast, reserved, shared (100.64/10) and the other known
metadata addresses. ``CRAWLER_ALLOW_PRIVATE_NETWORKS = True`` switches the guard off (tests,
the local demo); ``CRAWLER_ALLOWED_PRIVATE_NETWORKS`` lets chosen internal networks through (an
intranet site) while every other internal address, and the metadata addresses always, stay
refused.

The rule (``AddressGuard``) is one, shared by both crawler engines, and is applied twice:

1. **Before the request** (``AddressGuard.check``): the host *as the engine's HTTP client parses
   the URL* (``twisted_host`` for the Scrapy engine, ``aiohttp_host`` for the fast engine; no
   hand-written URL splitting) is resolved and judged. A refusal is an error item naming the
   address and the reason (``ForbiddenAddress``, funnel ``filtered:ssrf``), and no connection
   is opened.
2. **At connect time**, on the address the client really connects to, after its own DNS
   lookup, on every connection (robots.txt and every redirect hop included): the Scrapy
   engine's name resolver (``GuardedNameResolver``, Scrapy's ``TWISTED_DNS_RESOLVER``) hands
   Twisted only allowed addresses; the fast engine's aiohttp connector creates its sockets
   through ``AddressGuard.socket_factory``, which refuses a forbidden address. This closes what
   step 1 cannot see: a DNS answer that changes between the check and the fetch (rebinding),
   and any URL form the two parsers would read differently.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urldefrag

import yarl
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.settings import SETTINGS_PRIORITIES
from twisted.internet.interfaces import IHostnameResolver, IResolutionReceiver
from twisted.web.client import URI
from zope.interface import implementer

from scrapy_cluster.crawler.config import cluster_settings

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "100.100.100.200", "192.0.0.192", "fd00:ec2::254"))
SHARED_NETWORK = ipaddress.ip_network("100.64.0.0/10")
logger = logging.getLogger(__name__)
HINT = "set CRAWLER_ALLOW_PRIVATE_NETWORKS = True to allow internal addresses"


class ForbiddenAddress(IgnoreRequest):
    """The request's host is an internal address and private networks are not allowed."""


class ForbiddenConnection(OSError):
    """A connection to an internal address, refused at connect time. ``str()`` is the same for
    every address (so a refusal of all of a host's addresses stays this type through
    aiohappyeyeballs); ``address`` and ``reason`` say which and why."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(errno.EACCES, "connection to an internal address refused by the "
                                       "SSRF guard")
        self.address, self.reason = address, reason


def forbidden_reason(address: IpAddress, allowed: Sequence[IpNetwork] = ()) -> str | None:
    """Why ``address`` may not be fetched, or None when it is a public address or in one of
    the ``allowed`` networks (a metadata address never is)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address not in METADATA_ADDRESSES and any(address in network for network in allowed):
        return None
    checks = (
        (address in METADATA_ADDRESSES, "a cloud metadata address"),
        (address.is_unspecified, "the unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_private, "a private address"),
        (isinstance(address, ipaddress.IPv4Address) and address in SHARED_NETWORK,
         "a shared (carrier-grade NAT) address"),
        (address.is_multicast, "a multicast address"),
        (address.is_reserved, "a reserved address"),
    )
    return next((reason for hit, reason in checks if hit), None)


def first_forbidden(addresses: Iterable[str],
                    allowed: Sequence[IpNetwork] = ()) -> tuple[str, str] | None:
    """``(address, reason)`` for the first refused internal address among ``addresses``."""
    for text in addresses:
        reason = forbidden_reason(ipaddress.ip_address(text.split("%", 1)[0]), allowed)
        if reason is not None:
            return text, reason
    return None


async def resolve(host: str) -> list[str]:
    """The addresses ``host`` names: itself when it is an IP literal, else a DNS lookup (the
    system's ``getaddrinfo``, as both HTTP clients use: it also reads ``2130706433``,
    ``0x7f.1`` and ``127.1`` as IPv4 addresses)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def twisted_host(url: str) -> str:
    """The host the Scrapy engine's HTTP client (Scrapy's HTTP/1.1 handler over Twisted's
    ``Agent``) connects to for ``url``: the handler drops the fragment, then Twisted's ``URI``
    parses the rest. ``ValueError`` when it cannot."""
    host = URI.fromBytes(urldefrag(url)[0].encode("ascii")).host
    return host.decode("ascii")


def aiohttp_host(url: str) -> str:
    """The host the fast engine's HTTP client (aiohttp, the URL given as already encoded)
    connects to for ``url``. ``ValueError`` when yarl refuses the URL."""
    host = yarl.URL(url, encoded=True).raw_host
    if not host:
        raise ValueError(f"no host in {url!r}")
    return host


def refusal_message(url: str, host: str, address: str, reason: str) -> str:
    """The text of a refusal, the same for both engines and both steps."""
    return f"refused {url}: {host} is {reason} ({address}); {HINT}"


@dataclass(frozen=True)
class AddressGuard:
    """The SSRF rule: internal addresses are refused unless in ``allowed`` (metadata never)."""

    allowed: tuple[IpNetwork, ...] = ()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> AddressGuard | None:
        """The guard, or None when CRAWLER_ALLOW_PRIVATE_NETWORKS switches it off."""
        if bool(settings["CRAWLER_ALLOW_PRIVATE_NETWORKS"]):
            return None
        return cls(tuple(ipaddress.ip_network(str(network), strict=False)
                         for network in settings["CRAWLER_ALLOWED_PRIVATE_NETWORKS"]))

    def reason(self, address: str) -> str | None:
        """Why ``address`` (an IP address as text, maybe with a ``%scope``) is refused."""
        return forbidden_reason(ipaddress.ip_address(address.split("%", 1)[0]), self.allowed)

    async def check(self, url: str, host: str) -> str | None:
        """Step 1: the refusal message for ``url`` whose client connects to ``host``, or
        None when every address ``host`` resolves to is allowed."""
        try:
            addresses = await resolve(host)
        except (OSError, UnicodeError, ValueError) as exc:
            return f"refused {url}: cannot resolve {host!r}: {exc}"
        found = first_forbidden(addresses, self.allowed)
        return None if found is None else refusal_message(url, host, *found)

    def socket_factory(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """Step 2 for aiohttp (``TCPConnector(socket_factory=...)``): the socket for one
        resolved address, or ``ForbiddenConnection`` when that address is refused."""
        family, type_, proto, _, sockaddr = addr_info
        address = str(sockaddr[0])
        reason = self.reason(address)
        if reason is not None:
            raise ForbiddenConnection(address, reason)
        sock = socket.socket(family=family, type=type_, proto=proto)
        sock.setblocking(False)
        return sock


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
            raise ForbiddenAddress(f"refused {request.url}: no host the HTTP client can "
                                   f"read ({exc})") from exc
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
            from scrapy.resolver import CachingThreadedResolver

            return CachingThreadedResolver.from_crawler(crawler, reactor)
        return cls(reactor, guard)

    def install_on_reactor(self) -> None:
        from twisted.internet._resolver import GAIResolver

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
