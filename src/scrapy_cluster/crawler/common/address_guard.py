"""The SSRF rule both crawler engines obey: refuse requests whose host is, or resolves to, an
internal address (docs/security.md, claim 8; the Scrapy adapters are in ``crawler/ssrf.py``).

Refused: loopback, private (RFC 1918, ULA), link-local (which holds the 169.254.169.254 cloud
metadata service), unspecified, multicast, reserved, shared (100.64/10) and the other known
metadata addresses. ``CRAWLER_ALLOW_PRIVATE_NETWORKS = True`` switches the guard off (tests,
the local demo); ``CRAWLER_ALLOWED_PRIVATE_NETWORKS`` lets chosen internal networks through (an
intranet site) while every other internal address, and the metadata addresses always, stay
refused.

``AddressGuard`` is applied twice: before the request (``check``, on the host the engine's own
HTTP client parses from the URL: ``aiohttp_host`` here, ``ssrf.twisted_host`` for the Scrapy
engine), and at connect time on each address the client resolved (``socket_factory`` for
aiohttp; ``ssrf.GuardedNameResolver`` for Twisted). No Redis I/O.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yarl

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "100.100.100.200", "192.0.0.192", "fd00:ec2::254"))
SHARED_NETWORK = ipaddress.ip_network("100.64.0.0/10")
HINT = "set CRAWLER_ALLOW_PRIVATE_NETWORKS = True to allow internal addresses"


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


def unreadable_host_message(url: str, error: BaseException) -> str:
    """The text of a refusal of a URL the engine's HTTP client reads no host from."""
    return f"refused {url}: no host the HTTP client can read ({error})"


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
