"""Loading a ``PLUGINS`` setting: dotted paths ordered by rank, Scrapy style.

``PLUGINS = {'dotted.path.Class': rank}``; lower ranks come first and a rank of
``None`` switches a plugin off (useful because dict settings merge with the
defaults). Shared by the Kafka Monitor and the Redis Monitor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from scrapy.utils.misc import load_object

from scrapy_cluster.errors import PluginError

T = TypeVar("T")


def ranked_classes(settings: Mapping[str, Any], base: type[T]) -> list[type[T]]:
    """The enabled plugin classes, lowest rank first (ties by dotted path).

    Raises ``PluginError`` naming the entry when a rank is not a number or a
    path does not load to a subclass of ``base``.
    """
    configured = settings.get("PLUGINS") or {}
    if not isinstance(configured, Mapping):
        raise PluginError(f"PLUGINS must be a dict of 'dotted.path.Class': rank, "
                          f"not {type(configured).__name__}")
    enabled = sorted((_rank(path, rank), path) for path, rank in configured.items()
                     if rank is not None)
    return [_load_class(path, base) for _, path in enabled]


def _rank(path: str, rank: Any) -> float:
    if isinstance(rank, bool) or not isinstance(rank, (int, float)):
        raise PluginError(f"PLUGINS[{path!r}] must be a number or None, not {rank!r}")
    return float(rank)


def _load_class(path: str, base: type[T]) -> type[T]:
    try:
        loaded = load_object(path)
    except (ImportError, NameError, AttributeError, ValueError) as exc:
        raise PluginError(f"cannot load plugin {path!r}: {exc}") from exc
    if not (isinstance(loaded, type) and issubclass(loaded, base)):
        raise PluginError(f"plugin {path!r} is not a {base.__name__} subclass")
    return loaded
