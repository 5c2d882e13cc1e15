"""``Frontier`` and ``AsyncFrontier`` cannot drift: ``sync.py`` is written from ``aio.py``
(``scrapy_cluster.frontier.unasync``) and the two classes have the same public methods with
the same signatures. Their behaviour is one suite run on both (the ``frontier_factory``
fixture of ``tests/support/frontier.py``)."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from scrapy_cluster.frontier import AsyncFrontier, Frontier, unasync

KIND_WORDS = ((re.compile(r"\bredis\.asyncio\.Redis\b"), "redis.Redis"),
              (re.compile(r"\bAsyncFrontier\b"), "Frontier"))
AWAITABLE = re.compile(r"^(?:Awaitable\[(.*)\]|Coroutine\[Any, Any, (.*)\])$")


def without_kind(annotation: Any) -> str:
    """An annotation as text, the asyncio names read as their redis-py twins and an
    ``Awaitable[T]`` or ``Coroutine[Any, Any, T]`` read as ``T``."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    for pattern, replacement in KIND_WORDS:
        text = pattern.sub(replacement, text)
    awaited = AWAITABLE.match(text)
    return next(group for group in awaited.groups() if group) if awaited else text


def public_methods(cls: type) -> dict[str, Any]:
    return {name: getattr(cls, name) for name in dir(cls)
            if not name.startswith("_") and callable(getattr(cls, name))}


def described(method: Any) -> tuple[object, ...]:
    signature = inspect.signature(method)
    return (tuple((p.name, p.kind, p.default, without_kind(p.annotation))
                  for p in signature.parameters.values()),
            without_kind(signature.return_annotation))


def signature_differences(sync_cls: type, async_cls: type) -> list[str]:
    """What tells the two clients apart, method by method (empty when they are twins)."""
    sync_methods, async_methods = public_methods(sync_cls), public_methods(async_cls)
    common = sync_methods.keys() & async_methods.keys()
    differences = [f"{name}: only on {cls.__name__}"
                   for methods, cls in ((sync_methods, sync_cls), (async_methods, async_cls))
                   for name in sorted(methods.keys() - common)]
    for name in sorted(common):
        sync_method, async_method = sync_methods[name], async_methods[name]
        if inspect.iscoroutinefunction(sync_method):
            differences.append(f"{name}: a coroutine on {sync_cls.__name__}")
        if described(sync_method) != described(async_method):
            differences.append(f"{name}: {described(sync_method)} != {described(async_method)}")
    return differences


def test_the_sync_frontier_is_the_one_written_from_the_asyncio_frontier() -> None:
    written = unasync.sync_source(unasync.SOURCE.read_text("utf-8"))
    assert unasync.TARGET.read_text("utf-8") == written, (
        "frontier/sync.py is edited by hand or stale: edit aio.py, then run "
        "python -m scrapy_cluster.frontier.unasync")


def test_the_two_clients_have_the_same_methods_and_signatures() -> None:
    assert signature_differences(Frontier, AsyncFrontier) == []
    assert set(public_methods(Frontier)) >= {
        "enqueue_many", "pop", "ack", "release", "release_held", "restamp", "late_slot", "reap",
        "wait_for_work", "crawl_info", "crawl_funnels", "app_counts", "backlog", "purge",
        "purge_detail", "touch_domain", "fingerprint", "take_completed", "confirm_completed",
        "crawl_funnels_and_statuses", "from_settings"}


def test_every_method_doing_io_is_a_coroutine_on_the_asyncio_client_only() -> None:
    plain = {name for name, method in public_methods(AsyncFrontier).items()
             if not inspect.iscoroutinefunction(method)}
    assert plain == {"fingerprint", "from_settings"}


class _WithExtraMethod(AsyncFrontier):
    async def forget(self, crawlid: str) -> int:
        return 0


class _WithExtraParameter(AsyncFrontier):
    async def reap(self, limit: int = 1000, *, spiderid: str | None = None) -> int:
        return 0


class _WithOtherDefault(AsyncFrontier):
    async def reap(self, limit: int = 10) -> int:
        return 0


class _WithOtherReturn(AsyncFrontier):
    async def purge(self, spiderid: str, appid: str, crawlid: str | None = None) -> bool:
        return False


@pytest.mark.parametrize(("drifted", "difference"), [
    (_WithExtraMethod, "forget: only on _WithExtraMethod"),
    (_WithExtraParameter, "reap: "),
    (_WithOtherDefault, "reap: "),
    (_WithOtherReturn, "purge: "),
])
def test_a_method_or_parameter_on_one_client_only_is_a_difference(
        drifted: type, difference: str) -> None:
    found = signature_differences(Frontier, drifted)
    assert len(found) == 1 and found[0].startswith(difference), found


def test_the_rewrite_refuses_asyncio_it_does_not_know() -> None:
    source = '"""Doc."""\nasync def f() -> None:\n    await asyncio.gather()\n'
    with pytest.raises(ValueError, match="asyncio left"):
        unasync.sync_source(source)


def test_the_rewrite_turns_the_asyncio_idioms_into_redis_py_ones() -> None:
    source = ('"""Doc."""\nimport asyncio\nimport time\n\nimport redis\nimport redis.asyncio\n\n\n'
              "class AsyncFrontier:\n    async def wait(self, client: redis.asyncio.Redis) -> int:\n"
              "        await asyncio.sleep(0.1)\n        return await client.llen('k')\n")
    assert unasync.sync_source(source) == unasync.SYNC_DOCSTRING + (
        "\nimport time\n\nimport redis\n\n\nclass Frontier:\n"
        "    def wait(self, client: redis.Redis) -> int:\n"
        "        time.sleep(0.1)\n        return client.llen('k')\n")
