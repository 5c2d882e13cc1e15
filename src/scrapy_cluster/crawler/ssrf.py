"""SSRF guard: refuse requests whose host is, or resolves to, an internal address.

Refused: loopback, private (RFC 1918, ULA), link-local (which holds the 169.254.169.254 cloud
metadata service), unspecified, multicast, reserved, shared (100.64/10) and the other known
metadata addresses. ``CRAWLER_ALLOW_PRIVATE_NETWORKS = True`` switches the guard off (tests,
the local demo); ``CRAWLER_ALLOWED_PRIVATE_NETWORKS`` lets chosen internal networks through (an
intranet site) while every other internal address, and the metadata addresses always, stay
refused. A refused request reaches the spider's errback as ``ForbiddenAddress`` and
becomes an error item saying why. Known limit: the check resolves the name once; a DNS answer
that changes between the check and the fetch (rebinding) is not caught.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable, Sequence

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured

from scrapy_cluster.crawler.config import cluster_settings

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "100.100.100.200", "192.0.0.192", "fd00:ec2::254"))
SHARED_NETWORK = ipaddress.ip_network("100.64.0.0/10")


class ForbiddenAddress(IgnoreRequest):
    """The request's host is an internal address and private networks are not allowed."""


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
    """The addresses ``host`` names: itself when it is an IP literal, else a DNS lookup."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class SsrfGuardMiddleware:
    """Downloader middleware refusing internal addresses (see module docstring)."""

    def __init__(self, allowed: Sequence[IpNetwork] = ()) -> None:
        self.allowed = tuple(allowed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SsrfGuardMiddleware:
        settings = cluster_settings(crawler)
        if bool(settings["CRAWLER_ALLOW_PRIVATE_NETWORKS"]):
            raise NotConfigured("CRAWLER_ALLOW_PRIVATE_NETWORKS is on")
        return cls([ipaddress.ip_network(str(network), strict=False)
                    for network in settings["CRAWLER_ALLOWED_PRIVATE_NETWORKS"]])

    async def process_request(self, request: Request) -> None:
        host = request.url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
        host = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        try:
            addresses = await resolve(host)
        except OSError as exc:
            raise ForbiddenAddress(f"cannot resolve {host!r}: {exc}") from exc
        found = first_forbidden(addresses, self.allowed)
        if found is not None:
            address, reason = found
            raise ForbiddenAddress(
                f"refused {request.url}: {host} is {reason} ({address}); set "
                f"CRAWLER_ALLOW_PRIVATE_NETWORKS = True to allow internal addresses")
