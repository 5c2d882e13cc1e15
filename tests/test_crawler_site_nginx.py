"""The generated site served by nginx (benchmarks): the same bytes as the Python server, hits counted."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapy_cluster.sitegen.site import GeneratedSite, SiteConfig
from tests.support.addresses import SITE_NGINX
from tests.support.nginx import NginxSite, find_nginx
from tests.support.services import free_port
from tests.support.starting import service_unavailable

pytestmark = pytest.mark.integration

HOST_A, HOST_B = SITE_NGINX.hosts(5, 6)


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


def test_nginx_access_log_gives_arrivals_per_host_without_robots(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    if find_nginx() is None:
        service_unavailable(RuntimeError("nginx is not installed"))
    site = GeneratedSite(SiteConfig(hosts=(HOST_A, HOST_B), pages_per_host=3),
                         free_port(HOST_A))
    workdir = Path(tmp_path_factory.mktemp("nginx-log"))
    workdir.chmod(0o755)
    log = workdir / "access.log"
    with NginxSite(site, workdir, binary=str(find_nginx()), status_port=free_port(),
                   access_log=log) as server:
        before = time.time()
        for host, path in ((HOST_A, "/robots.txt"), (HOST_A, "/p/0.html"),
                           (HOST_B, "/p/1.html"), (HOST_B, "/p/2.html")):
            _get(site.url(host, path))
    after = time.time()  # stopping nginx flushed its log
    arrivals = server.arrivals()
    assert {host: len(times) for host, times in arrivals.items()} == \
        {HOST_A: 1, HOST_B: 2}
    assert all(before - 0.01 <= t <= after for times in arrivals.values() for t in times)
