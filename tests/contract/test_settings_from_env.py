"""Scrapy settings given the way containers and supervisord give them (environment variables)
apply to both engines, judged from the items: a page over ``DOWNLOAD_MAXSIZE`` is refused, one
under it is crawled (before, the variable was ignored without a word)."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.addresses import SETTINGS_FROM_ENV
from tests.support.contract_crawl import CrawlRig
from tests.support.contract_site import ContractSite, Reply

HOST = SETTINGS_FROM_ENV.host(121)
LIMIT_BYTES = 100_000


def test_download_maxsize_from_the_environment_refuses_a_larger_page(
        make_rig: Callable[..., CrawlRig], make_site: Callable[..., ContractSite]) -> None:
    site = make_site((HOST,))
    large = site.add(HOST, "/large.html", Reply(body=b"<html>" + b"x" * 300_000 + b"</html>"))
    small = site.add(HOST, "/small.html", Reply(body=b"<html>" + b"x" * 50_000 + b"</html>"))
    rig = make_rig(env={"DOWNLOAD_MAXSIZE": str(LIMIT_BYTES), "RETRY_TIMES": "0"})
    rig.start()
    items = {item["url"]: item for item in rig.collect(rig.feed([large, small]))}
    assert items[small]["status_code"] == 200 and items[small].get("error") is None
    assert items[large]["status_code"] is None
    assert items[large]["error"]["reason"] == "too_large"
    assert f"({LIMIT_BYTES})" in items[large]["error"]["message"]
    assert site.hits()[large] == 1, rig.logs()  # RETRY_TIMES=0 from the environment too
