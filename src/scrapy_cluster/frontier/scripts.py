"""The frontier's Lua scripts, registered on a sync or asyncio Redis client.

Each script lives in its own file under ``scrapy_cluster/lua/`` with a
KEYS/ARGV header; the frontier ones are prefixed with ``frontier_lib.lua``.
redis-py's registered scripts run by EVALSHA and reload on NOSCRIPT, so a
restarted Redis needs nothing from us.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

LIBRARY = "frontier_lib.lua"
FRONTIER_SCRIPTS = {
    "enqueue": "frontier_enqueue.lua",
    "pop": "frontier_pop.lua",
    "ack": "frontier_ack.lua",
    "release": "frontier_release.lua",
    "reap": "frontier_reap.lua",
    "info": "frontier_info.lua",
    "purge": "frontier_purge.lua",
    "touch": "domain_config_touch.lua",
    "restamp": "frontier_restamp.lua",
    "late_slot": "frontier_late_slot.lua",
    "backlog": "frontier_backlog.lua",
    "complete": "frontier_complete.lua",
    "complete_done": "frontier_complete_done.lua",
}


@cache
def lua_source(filename: str) -> str:
    """Text of ``scrapy_cluster/lua/<filename>`` (read once per process, on first use)."""
    return resources.files("scrapy_cluster").joinpath("lua", filename).read_text("utf-8")


def frontier_source(name: str) -> str:
    """The library followed by the named frontier script."""
    return lua_source(LIBRARY) + "\n" + lua_source(FRONTIER_SCRIPTS[name])


class FrontierScripts:
    """Named scripts bound to one client (``redis.Redis`` or ``redis.asyncio.Redis``).

    Calling ``scripts.pop(keys=[...], args=[...])`` is one EVALSHA round trip
    (plus one SCRIPT LOAD after a Redis restart); with an asyncio client it
    returns an awaitable.
    """

    def __init__(self, client: Any) -> None:
        for name in FRONTIER_SCRIPTS:
            setattr(self, name, client.register_script(frontier_source(name)))

    enqueue: Any
    pop: Any
    ack: Any
    release: Any
    reap: Any
    info: Any
    purge: Any
    touch: Any
    restamp: Any
    late_slot: Any
    backlog: Any
    complete: Any
    complete_done: Any
