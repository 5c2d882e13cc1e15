"""Helpers shared by the frontier tests: clocks, request builders, factories, and the
``frontier_factory`` fixture that runs one test body on both frontier clients.

A test module takes the fixture in with ``from tests.support.frontier import
frontier_factory as frontier_factory`` (the explicit alias keeps ruff from reading it as an
unused import); every test taking ``frontier_factory`` then runs twice, on ``Frontier``
(redis-py) and on ``AsyncFrontier`` (redis.asyncio, driven through ``BlockingFrontier``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from scrapy_cluster.frontier import AsyncFrontier, DispatchView, Frontier, codec
from scrapy_cluster.frontier.calls import FrontierCalls, FrontierPolicy
from scrapy_cluster.frontier.seen import SeenCache
from scrapy_cluster.settings import load_settings

START_MS = 1_700_000_000_000
FRONTIER_KINDS = ("sync", "asyncio")


class ManualClock:
    """A clock the test moves by hand (milliseconds)."""

    def __init__(self, start_ms: int = START_MS) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def settings(**overrides: Any) -> Any:
    base = {"QUEUE_WINDOW": 0, "QUEUE_HITS": 10, "QUEUE_MODERATED": False,
            "SCHEDULER_IP_ENABLED": True, "SCHEDULER_TYPE_ENABLED": True,
            "THROTTLE_SEND_ALLOWANCE_MS": 0}
    return load_settings("crawler", environ={}, settings_file=None,
                         overrides={**base, **overrides})


@functools.cache
def shared_domain_extractor() -> codec.DomainExtractor:
    """One domain extractor for every test frontier: a new one parses tldextract's suffix
    list on first use (about 0.1 s, most of a frontier test's time otherwise)."""
    return codec.DomainExtractor()


def frontier_parts(seen_cache: bool, overrides: dict[str, Any]) -> dict[str, Any]:
    """What ``from_settings`` gives a frontier (calls, seen cache) for these settings, with
    the shared domain extractor."""
    frontier_settings = settings(**overrides)
    return {"calls": FrontierCalls(FrontierPolicy.from_settings(frontier_settings),
                                   shared_domain_extractor()),
            "seen": SeenCache.from_settings(frontier_settings) if seen_cache else None}


def make_frontier(client: redis.Redis, clock: ManualClock | None = None, *,
                  seen_cache: bool = False, **overrides: Any) -> Frontier:
    """``Frontier.from_settings(settings(**overrides), client, ...)``, sharing the extractor."""
    return Frontier(client, clock=clock, **frontier_parts(seen_cache, overrides))


def req(url: str, *, crawlid: str = "c1", appid: str = "app", spiderid: str = "link",
        **fields: Any) -> dict[str, Any]:
    return {"url": url, "crawlid": crawlid, "appid": appid, "spiderid": spiderid, **fields}


def many(domain: str, count: int) -> list[dict[str, object]]:
    """``count`` requests of ``domain``: ``http://<domain>/0`` and on."""
    return [req(f"http://{domain}/{i}") for i in range(count)]


VIEW = DispatchView("link", "10.0.0.1")


def pop_urls(frontier: Frontier, n: int, view: DispatchView = VIEW) -> list[str]:
    return [leased.request["url"] for leased in frontier.pop(view, n).requests]


def drain(frontier: Frontier, view: DispatchView = VIEW) -> list[str]:
    urls: list[str] = []
    while True:
        batch = pop_urls(frontier, 100, view)
        if not batch:
            return urls
        urls.extend(batch)


class CountingConnection(redis.Connection):
    """A redis-py connection that counts the commands it sends (round trips)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


class AsyncCountingConnection(redis.asyncio.Connection):
    """``CountingConnection`` for redis.asyncio: counts on the same ``CountingConnection.sent``."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


def async_twin(client: redis.Redis) -> redis.asyncio.Redis:
    """A redis.asyncio client on ``client``'s server and database, counting its commands
    when ``client`` does (``CountingConnection``), with the one retry on a connection error
    the fast engine gives its client (``crawler/fast/app.py``)."""
    pool = client.connection_pool
    options = pool.connection_kwargs
    counting = issubclass(pool.connection_class, CountingConnection)
    return redis.asyncio.Redis.from_pool(redis.asyncio.ConnectionPool(
        connection_class=AsyncCountingConnection if counting else redis.asyncio.Connection,
        host=options["host"], port=options["port"], db=options.get("db", 0),
        username=options.get("username"), password=options.get("password"),
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError]))


class BlockingFrontier:
    """An ``AsyncFrontier`` driven from synchronous test code: each of its methods that is a
    coroutine runs to completion on ``loop``; every other attribute (read or written) is the
    wrapped frontier's. So one test body drives both clients."""

    def __init__(self, frontier: AsyncFrontier, loop: asyncio.AbstractEventLoop) -> None:
        object.__setattr__(self, "_async_frontier", frontier)
        object.__setattr__(self, "_loop", loop)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._async_frontier, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        @functools.wraps(attribute)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(attribute(*args, **kwargs))
        return blocking

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._async_frontier, name, value)


FrontierFactory = Callable[..., Frontier]


@pytest.fixture(params=FRONTIER_KINDS)
def frontier_factory(request: pytest.FixtureRequest) -> Iterator[FrontierFactory]:
    """``make_frontier`` for the client kind of this run: ``Frontier`` itself, or an
    ``AsyncFrontier`` on an asyncio twin of the given client behind ``BlockingFrontier``
    (typed ``Frontier``: the two have the same signatures, tests/test_frontier_twins.py)."""
    if request.param == "sync":
        yield make_frontier
        return
    loop = asyncio.new_event_loop()
    clients: list[redis.asyncio.Redis] = []

    def make_async_frontier(client: redis.Redis, clock: ManualClock | None = None, *,
                            seen_cache: bool = False, **overrides: Any) -> Frontier:
        clients.append(async_twin(client))
        frontier = AsyncFrontier(clients[-1], clock=clock, **frontier_parts(seen_cache, overrides))
        return cast(Frontier, BlockingFrontier(frontier, loop))

    try:
        yield make_async_frontier
    finally:
        for client in clients:
            loop.run_until_complete(client.aclose())
        loop.close()
