"""The generated test site: deterministic graph, expected sets, and the special pages."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from scrapy_cluster.sitegen.site import LATIN1_BODY, GeneratedSite, SiteConfig, SiteServer
from tests.support.services import free_port


def _site() -> GeneratedSite:
    return GeneratedSite(SiteConfig(), port=8000)


def test_graph_is_the_same_for_the_same_seed() -> None:
    first, second = _site(), _site()
    url = first.url("127.0.0.2", "/p/0.html")
    assert first.graph_links(url) == second.graph_links(url)


def test_expected_urls_at_depth_zero_is_only_the_seed() -> None:
    site = _site()
    seed = site.url("127.0.0.2", "/p/0.html")
    assert site.expected_urls(seed, 0) == {seed}


def test_expected_urls_at_depth_one_adds_the_seed_links() -> None:
    site = _site()
    seed = site.url("127.0.0.2", "/p/0.html")
    assert site.expected_urls(seed, 1) == {seed, *site.graph_links(seed)}


def test_expected_urls_respects_allowed_domains() -> None:
    site = _site()
    seed = site.url("127.0.0.2", "/p/0.html")
    urls = site.expected_urls(seed, 3, allowed_domains=["127.0.0.2"])
    assert {url.split("/")[2].split(":")[0] for url in urls} == {"127.0.0.2"}


def test_expected_urls_deny_regex_wins_over_allow() -> None:
    site = _site()
    seed = site.url("127.0.0.2", "/p/0.html")
    urls = site.expected_urls(seed, 3, allow_regex=[r"/p/"], deny_regex=[r"/p/1\d*\.html"])
    assert not [url for url in urls - {seed} if "/p/1" in url]


def test_robots_txt_disallows_private_and_states_crawl_delay() -> None:
    site = GeneratedSite(SiteConfig(crawl_delay_s=2.5), port=8000)
    body = site.render("127.0.0.2", "/robots.txt").body.decode()
    assert body == "User-agent: *\nDisallow: /private/\nCrawl-delay: 2.5\n"


def test_latin1_page_is_not_valid_utf8() -> None:
    page = _site().render("127.0.0.2", "/special/latin1.html")
    with pytest.raises(UnicodeDecodeError):
        page.body.decode("utf-8")


@pytest.mark.integration
def test_server_serves_pages_and_counts_hits() -> None:
    port = free_port()
    with SiteServer(SiteConfig(), port) as server:
        url = server.site.url("127.0.0.3", "/special/latin1.html")
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert answer.read() == LATIN1_BODY
        assert server.hits_snapshot()[url] == 1


@pytest.mark.integration
def test_server_answers_500_for_the_error_page() -> None:
    port = free_port()
    with SiteServer(SiteConfig(), port) as server:
        url = server.site.url("127.0.0.2", "/special/error500.html")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(url, timeout=5)
        caught.value.close()  # the error holds the answer's socket open
        assert caught.value.code == 500
