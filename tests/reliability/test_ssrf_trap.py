"""The SSRF guard judged by what reaches an internal service (docs/security.md, claim 8).

A trap listens on 127.0.0.1 and ::1; real crawler processes of both engines run with the guard
on, allowed to reach one decoy site on 127.0.0.2 (``CRAWLER_ALLOWED_PRIVATE_NETWORKS``). Each
crawl is seeded with every URL form that names the trap (``trap_urls``: ``#@`` and ``?@``
tricks, userinfo, backslashes, percent-encoded, decimal, octal and hex IPv4, IPv6 forms, a DNS
name that resolves to loopback) and with a page of the decoy site redirecting to each of
them. The trap must see no connection at all, and every form must come out as one
``ForbiddenAddress`` error item (nothing lost, nothing fetched).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_cluster.crawler import settings as crawler_settings
from tests.support.contract_crawl import ENGINES, CrawlRig
from tests.support.contract_site import ContractSite, Reply
from tests.support.trap import Trap, running_trap, trap_urls

DECOY_HOST = "127.0.0.2"
GUARD_ON = {"CRAWLER_ALLOW_PRIVATE_NETWORKS": "false",
            "CRAWLER_ALLOWED_PRIVATE_NETWORKS": json.dumps([f"{DECOY_HOST}/32"])}
# a backslash before the '@' is a path separator to Scrapy's Request (and to browsers): the
# request goes to 127.0.0.1 only when the backslash comes after the trap's port
TWISTED_CANNOT_CONNECT = ("userinfo", "userinfo-decoy", "double-at", "percent-encoded-host",
                          "dns-localhost-dot-upper")
REDIRECT_BODY = b"<html><body>moved</body></html>"


@pytest.fixture
def trap() -> Iterator[Trap]:
    with running_trap() as started:
        yield started


@pytest.fixture
def decoy() -> Iterator[ContractSite]:
    site = ContractSite((DECOY_HOST,)).start()
    try:
        yield site
    finally:
        site.stop()


@pytest.fixture
def rigs(tmp_path: Path, redis_url: str) -> Iterator[list[CrawlRig]]:
    made: list[CrawlRig] = []
    try:
        yield made
    finally:
        for rig in made:
            rig.close()


def guarded_rig(rigs: list[CrawlRig], tmp_path: Path, redis_url: str, engine: str,
                **scrapy_settings: Any) -> CrawlRig:
    rig = CrawlRig(tmp_path / f"rig-{engine}-{len(rigs)}", redis_url, engine,
                   prefix=f"ssrf{uuid.uuid4().hex[:8]}", env=GUARD_ON,
                   scrapy_settings=scrapy_settings)
    rigs.append(rig)
    rig.start()
    return rig


def seed_every_form(rig: CrawlRig, trap: Trap, decoy: ContractSite) -> tuple[str, int]:
    """One crawl: every trap form as a seed and as a redirect target of a decoy page."""
    forms = trap_urls(trap.port, f"{DECOY_HOST}:{decoy.port}")
    redirects = [decoy.add(DECOY_HOST, f"/r/{name}", Reply(
        302, headers=(("Location", url),), body=REDIRECT_BODY)) for name, url in forms.items()]
    crawlid = rig.feed([*forms.values(), *redirects])
    return crawlid, len(forms)


def ssrf_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in items if (item.get("error") or {}).get("reason") == "ssrf"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_no_url_form_or_redirect_reaches_an_internal_service(
        engine: str, trap: Trap, decoy: ContractSite, rigs: list[CrawlRig], tmp_path: Path,
        redis_url: str, redis_client: redis.Redis) -> None:
    rig = guarded_rig(rigs, tmp_path, redis_url, engine)
    crawlid, forms = seed_every_form(rig, trap, decoy)
    items = rig.collect(crawlid)
    assert trap.catches() == []
    refused = ssrf_items(items)
    # every form once as a seed and once behind a redirect; the redirect pages gave no item
    assert len(refused) == 2 * forms, sorted((i["url"], (i.get("error") or {}).get("message", "")[:90], i.get("status_code")) for i in items)
    assert len(items) == 2 * forms
    assert all(item["error"]["type"] == "ForbiddenAddress" for item in refused)
    assert decoy.hits() == {decoy.url(DECOY_HOST, path): 1 for path in
                            (f"/r/{name}" for name in trap_urls(trap.port, "x:1"))}


@pytest.mark.slow
def test_the_scrapy_engine_refuses_at_connect_time_without_the_first_check(
        trap: Trap, decoy: ContractSite, rigs: list[CrawlRig], tmp_path: Path,
        redis_url: str, redis_client: redis.Redis) -> None:
    """With the middleware (step 1) switched off, the guarded name resolver alone keeps every
    form away from the trap: the address judged is the one Twisted connects to."""
    rig = guarded_rig(rigs, tmp_path, redis_url, "scrapy", DOWNLOADER_MIDDLEWARES={
        **crawler_settings.DOWNLOADER_MIDDLEWARES,
        "scrapy_cluster.crawler.ssrf.SsrfGuardMiddleware": None})
    crawlid, forms = seed_every_form(rig, trap, decoy)
    items = rig.collect(crawlid)
    assert trap.catches() == []
    refused = ssrf_items(items)
    assert len(items) == 2 * forms
    assert all(item["status_code"] is None and item["error"] for item in items)
    connect_time = [item for item in refused
                    if item["error"]["message"].endswith("(refused at connect time)")]
    # the forms Twisted cannot connect to at all (userinfo left in the host, a percent-encoded
    # host, a trailing dot its resolver does not take) fail without the guard's help
    assert len(connect_time) == 2 * (forms - len(TWISTED_CANNOT_CONNECT))
