"""Fixtures of the crawl contract suite: every test runs once per crawler engine.

``engine`` is ``"scrapy"`` (``scrapy-cluster crawler --spider link``) or ``"fast"``
(``... --engine fast``); ``make_rig`` builds a ``CrawlRig`` of that engine on the session's
redis-server (flushed around each test) and the Redis Streams bus, and stops its crawlers
after the test; ``make_site`` serves a ``ContractSite`` for the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.contract_crawl import ENGINES, CrawlRig
from tests.support.contract_site import ContractSite


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_rig(tmp_path: Path, redis_client: redis.Redis, redis_url: str,
             engine: str) -> Iterator[Callable[..., CrawlRig]]:
    """``make_rig(**CrawlRig keyword arguments)``: crawlers of this test's engine."""
    rigs: list[CrawlRig] = []

    def make(**kwargs: Any) -> CrawlRig:
        kwargs.setdefault("prefix", f"contract{uuid.uuid4().hex[:8]}")
        rig = CrawlRig(tmp_path / f"rig-{len(rigs)}", kwargs.pop("redis_url", redis_url),
                       engine, **kwargs)
        rigs.append(rig)
        return rig

    try:
        yield make
    finally:
        for rig in rigs:
            rig.close()


@pytest.fixture
def make_site() -> Iterator[Callable[..., ContractSite]]:
    """``make_site(hosts)``: a started ``ContractSite``, stopped after the test."""
    sites: list[ContractSite] = []

    def make(hosts: tuple[str, ...]) -> ContractSite:
        site = ContractSite(hosts).start()
        sites.append(site)
        return site

    try:
        yield make
    finally:
        for site in sites:
            site.stop()
