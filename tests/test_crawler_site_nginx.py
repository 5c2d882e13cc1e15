"""The generated site served by nginx (benchmarks): the same bytes as the Python server, hits counted."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapy_cluster.testing.nginx import NginxSite, find_nginx
from scrapy_cluster.testing.site import GeneratedSite, SiteConfig
from tests.support.services import free_port
from tests.support.starting import service_unavailable

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxSite]:
    if find_nginx() is None:
        service_unavailable(RuntimeError("nginx is not installed (apt-get install nginx; "
                                         "make test installs it when run as root)"))
    site = GeneratedSite(SiteConfig(pages_per_host=5, links_per_page=4), free_port("127.0.0.2"))
    workdir = tmp_path_factory.mktemp("nginx")
    workdir.chmod(0o755)
    with NginxSite(site, Path(workdir), binary=str(find_nginx()), status_port=free_port()) as server:
        yield server


def _get(url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.headers["Content-Type"], answer.read()


def test_nginx_serves_graph_pages_byte_for_byte(nginx: NginxSite) -> None:
    for host in nginx.site.config.hosts:
        path = "/p/3.html"
        assert _get(nginx.site.url(host, path)) == \
            ("text/html; charset=utf-8", nginx.site.render(host, path).body)


def test_nginx_serves_robots_txt(nginx: NginxSite) -> None:
    assert _get(nginx.site.url("127.0.0.3", "/robots.txt"))[1] == \
        nginx.site.render("127.0.0.3", "/robots.txt").body


def test_nginx_hits_count_site_requests_but_not_status_reads(nginx: NginxSite) -> None:
    before = nginx.hits()
    for number in range(3):
        _get(nginx.site.url("127.0.0.2", f"/p/{number}.html"))
    assert nginx.hits() - before == 3
