"""The harness of the sitemap crawl tests (``tests/test_sitemap_crawl.py``,
``tests/test_sitemap_kill.py``): the sitemap fixture site on Debian's nginx (logging each
request), a private redis-server, the Kafka Monitor and the Redis Monitor in threads, a
``FastCluster`` whose crawlers the test starts, and a ``Watch`` over the topics."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cluster import FastCluster
from tests.support.nginx import find_nginx
from tests.support.recrawl_rig import PREFIX, Watch, monitors
from tests.support.revisit_site import RevisitNginx
from tests.support.services import RedisServer, free_port
from tests.support.sitemap_site import SitemapSite, SitemapSiteConfig
from tests.support.starting import service_unavailable, started


@dataclass
class SitemapServices:
    site: SitemapSite
    nginx: RevisitNginx
    cluster: FastCluster
    watch: Watch


@contextmanager
def sitemap_services(workdir: Path, config: SitemapSiteConfig,
                     monitor_settings: dict[str, Any]) -> Iterator[SitemapServices]:
    """Everything running for one sitemap crawl (module docstring); all stopped after."""
    binary = find_nginx()
    if binary is None:
        service_unavailable(RuntimeError("nginx is not installed (apt-get install nginx-light)"))
    workdir.chmod(0o755)
    site = SitemapSite(config, free_port(config.hosts[0]))
    server = started(RedisServer(workdir / "redis"))
    with ExitStack() as stack:
        stack.callback(server.stop)
        nginx = stack.enter_context(RevisitNginx(
            site, workdir / "nginx", binary=str(binary), status_port=free_port(),
            access_log=workdir / "access.log"))
        settings = stack.enter_context(monitors(server.url, workdir / "data", monitor_settings))
        cluster = FastCluster(workdir, server.url, {"BUS_BACKEND": "redis",
                                                    "KAFKA_TOPIC_PREFIX": PREFIX}, site)
        stack.callback(cluster.close)
        watch = Watch(settings)
        stack.callback(watch.close)
        yield SitemapServices(site, nginx, cluster, watch)
