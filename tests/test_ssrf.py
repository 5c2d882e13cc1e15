"""The SSRF guard shared by both engines (crawler/ssrf.py): the host it judges is the host each
engine's HTTP client connects to, and the address refused is the one the client would use.

The crawl-level run of every URL form against a trap, with real crawler processes of both
engines, is tests/reliability/test_ssrf_trap.py (``make test-reliability``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterator
from urllib.parse import urldefrag

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import Request
from twisted.internet import reactor
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.web.client import URI, Agent

from scrapy_cluster.crawler.common.address_guard import AddressGuard, aiohttp_host
from scrapy_cluster.crawler.fast.app import ssrf_check
from scrapy_cluster.crawler.fast.fetch import AiohttpFetcher, FetchError, FetchRequest
from scrapy_cluster.crawler.ssrf import (
    ForbiddenAddress,
    GuardedNameResolver,
    SsrfGuardMiddleware,
    twisted_host,
)
from tests.support.trap import Trap, running_trap, trap_urls

DECOY = "127.0.0.2"
GUARD = AddressGuard((ipaddress.ip_network(f"{DECOY}/32"),))


@pytest.fixture(scope="module")
def trap() -> Iterator[Trap]:
    with running_trap() as started:
        yield started


# --- the host each client connects to -----------------------------------------------------

def agent_host(url: str) -> str:
    """The host Twisted's ``Agent`` builds its connection endpoint for, after Scrapy's handler
    dropped the fragment: the real code path, not ours."""
    endpoint = Agent(reactor)._getEndpoint(URI.fromBytes(urldefrag(url)[0].encode("ascii")))
    return str(endpoint._hostText)


@pytest.mark.parametrize("url, twisted, aiohttp", [
    ("http://127.0.0.1:18790#@1.1.1.1/x", "127.0.0.1", "127.0.0.1"),
    ("http://[::1]:18790#@1.1.1.1/x", "::1", "::1"),
    ("http://127.0.0.1:8?@1.1.1.1/", "127.0.0.1", "127.0.0.1"),
    ("http://user:pw@127.0.0.1:8/", "user:pw@127.0.0.1", "127.0.0.1"),
    ("http://a%40b@127.0.0.1:8/", "a%40b@127.0.0.1", "127.0.0.1"),
    ("http://2130706433:8/", "2130706433", "2130706433"),
])
def test_the_judged_host_is_the_one_each_client_parses(url: str, twisted: str,
                                                       aiohttp: str) -> None:
    assert twisted_host(url) == twisted == agent_host(url)
    assert aiohttp_host(url) == aiohttp


def test_the_fragment_at_sign_is_refused_by_both_engines_first_check() -> None:
    """The reported bypass: the old hand-written split judged 1.1.1.1 here."""
    url = "http://127.0.0.1:18790#@1.1.1.1/x"
    with pytest.raises(ForbiddenAddress, match="127.0.0.1 is a loopback address"):
        asyncio.run(SsrfGuardMiddleware().process_request(Request(url)))
    message = asyncio.run(ssrf_check(AddressGuard())(url))
    assert message is not None and "127.0.0.1 is a loopback address (127.0.0.1)" in message


@pytest.mark.parametrize("name", sorted(trap_urls(1, "x:2")))
def test_every_trap_form_is_refused_by_both_first_checks(name: str, trap: Trap) -> None:
    url = Request(trap_urls(trap.port, f"{DECOY}:9")[name]).url  # as queued: made safe
    with pytest.raises(ForbiddenAddress):
        asyncio.run(SsrfGuardMiddleware(GUARD.allowed).process_request(Request(url)))
    assert asyncio.run(ssrf_check(GUARD)(url)) is not None


# --- step 2: the address connected to ------------------------------------------------------

def fetch(fetcher: AiohttpFetcher, url: str) -> FetchError | None:
    async def run() -> FetchError | None:
        try:
            await fetcher.fetch(FetchRequest(url), timeout_s=5.0, max_bytes=0)
        except FetchError as exc:
            return exc
        finally:
            await fetcher.close()
        return None

    return asyncio.run(run())


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(trap_urls(1, "x:2")))
def test_the_fast_engines_client_refuses_the_address_at_connect_time(name: str,
                                                                     trap: Trap) -> None:
    """Without the first check, aiohttp's own parse and DNS lookup lead to the trap, and the
    guard's socket factory refuses the address before anything is sent."""
    url = Request(trap_urls(trap.port, f"{DECOY}:9")[name]).url
    before = len(trap.catches())
    error = fetch(AiohttpFetcher(connections=2, guard=GUARD), url)
    assert error is not None
    assert len(trap.catches()) == before
    if error.error_type == "ForbiddenAddress":
        assert error.reason == "ssrf" and not error.retryable
        assert str(error).endswith("(refused at connect time)")


@pytest.mark.integration
def test_without_the_guard_the_fast_client_does_reach_the_trap(trap: Trap) -> None:
    """The control: the trap counts what arrives."""
    before = len(trap.catches())
    assert fetch(AiohttpFetcher(connections=2), f"http://127.0.0.1:{trap.port}/") is None
    assert len(trap.catches()) == before + 1


class Receiver:
    def __init__(self) -> None:
        self.addresses: list[str] = []
        self.complete = False

    def resolutionBegan(self, resolution: object) -> None:
        pass

    def addressResolved(self, address: IPv4Address | IPv6Address) -> None:
        self.addresses.append(address.host)

    def resolutionComplete(self) -> None:
        self.complete = True


class FixedResolver:
    """Stands in for getaddrinfo: the seam under the guarded resolver."""

    def __init__(self, answers: list[IPv4Address | IPv6Address]) -> None:
        self.answers = answers

    def resolveHostName(self, receiver: Receiver, host: str, port: int = 0,
                        address_types: object = None, semantics: str = "TCP") -> None:
        receiver.resolutionBegan(None)
        for answer in self.answers:
            receiver.addressResolved(answer)
        receiver.resolutionComplete()


def test_the_scrapy_engines_resolver_hands_twisted_only_allowed_addresses() -> None:
    resolver = GuardedNameResolver(reactor, GUARD)
    resolver.resolver = FixedResolver([
        IPv4Address("TCP", "93.184.215.14", 80), IPv4Address("TCP", "127.0.0.1", 80),
        IPv6Address("TCP", "::1", 80), IPv4Address("TCP", DECOY, 80),
        IPv4Address("TCP", "169.254.169.254", 80)])
    receiver = Receiver()
    resolver.resolveHostName(receiver, "Rebinding.Example", 80)
    assert receiver.addresses == ["93.184.215.14", DECOY]
    assert receiver.complete
    assert resolver.refusal("rebinding.example") == ("169.254.169.254",
                                                     "a cloud metadata address")


# --- property: what the first check allows, the client does not connect internally to -------

OCTETS = st.sampled_from(["127.0.0.1", "127.1", "2130706433", "0x7f000001", "0177.0.0.1",
                          "0x7f.0.0.1", "0.0.0.0", "[::1]", "[::ffff:127.0.0.1]",
                          "[::ffff:7f00:1]", "localhost", DECOY, "[::ffff:127.0.0.2]"])
TRICKS = st.sampled_from(["", "#@{decoy}/x", "?@{decoy}/x", "/p?u=x@{decoy}", "#{decoy}",
                          "\\@{decoy}/", "/%2F%2F{decoy}", ";@{decoy}", "/#\\@{decoy}"])
USERINFO = st.sampled_from(["", "user@", "user:pw@", "{decoy}@", "a@{decoy}@", "%40@"])


def build_url(userinfo: str, host: str, trick: str, port: int) -> str:
    decoy = f"{DECOY}:{port + 1}"
    return (f"http://{userinfo}{host}:{port}{trick}").replace("{decoy}", decoy)


def connects_internally(host: str) -> bool:
    """Whether a connection to ``host`` (as the client hands it to getaddrinfo) would reach an
    address the guard refuses."""
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return any(GUARD.reason(address) is not None for address in addresses)


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(userinfo=USERINFO, host=OCTETS, trick=TRICKS)
def test_a_url_the_first_checks_allow_never_makes_a_client_connect_internally(
        userinfo: str, host: str, trick: str) -> None:
    try:
        url = Request(build_url(userinfo, host, trick, 18790)).url
    except ValueError:
        return
    scrapy_allowed = True
    try:
        asyncio.run(SsrfGuardMiddleware(GUARD.allowed).process_request(Request(url)))
    except ForbiddenAddress:
        scrapy_allowed = False
    if scrapy_allowed:
        assert not connects_internally(agent_host(url)), url
    if asyncio.run(ssrf_check(GUARD)(url)) is None:
        assert not connects_internally(aiohttp_host(url)), url


def test_the_crawler_settings_install_the_guarded_resolver() -> None:
    from scrapy_cluster.crawler.common.resolution import scrapy_settings
    from scrapy_cluster.crawler.ssrf import RESOLVER_PATH, installed_resolver
    from scrapy_cluster.settings import load_settings

    settings = scrapy_settings(load_settings("crawler", environ={}))
    assert installed_resolver(settings) == RESOLVER_PATH


def test_a_replaced_resolver_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(settings_dict={"CRAWLER_ALLOW_PRIVATE_NETWORKS": False,
                                         "DNS_RESOLVER": "scrapy.resolver.CachingHostnameResolver"})
    with caplog.at_level("WARNING", logger="scrapy_cluster.crawler.ssrf"):
        SsrfGuardMiddleware.from_crawler(crawler)
    assert [r.getMessage() for r in caplog.records] == [
        "the SSRF guard checks only URLs, not the addresses connected to: the DNS resolver is "
        "scrapy.resolver.CachingHostnameResolver, not scrapy_cluster.crawler.ssrf."
        "GuardedNameResolver (leave TWISTED_DNS_RESOLVER and DNS_RESOLVER unset)"]
