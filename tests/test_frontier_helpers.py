"""Helpers shared by the frontier tests (no tests here): clocks, request builders, factories."""

from __future__ import annotations

from typing import Any

import redis

from scrapy_cluster.frontier import DispatchView, Frontier
from scrapy_cluster.settings import load_settings

START_MS = 1_700_000_000_000


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


def make_frontier(client: redis.Redis, clock: ManualClock | None = None,
                  **overrides: Any) -> Frontier:
    return Frontier.from_settings(settings(**overrides), client, clock=clock)


def req(url: str, *, crawlid: str = "c1", appid: str = "app", spiderid: str = "link",
        **fields: Any) -> dict[str, Any]:
    return {"url": url, "crawlid": crawlid, "appid": appid, "spiderid": spiderid, **fields}


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
