"""Loading the ``PLUGINS`` setting: dotted paths ordered by rank, Scrapy style.

``PLUGINS = {'dotted.path.Class': rank}``; lower ranks are validated first and
a rank of ``None`` switches a plugin off (useful because dict settings merge
with the defaults). A plugin whose ``setup`` raises ``NotConfigured`` is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import redis
from scrapy.utils.misc import load_object

from scrapy_cluster.errors import NotConfigured, PluginError
from scrapy_cluster.kafka_monitor.plugins.base import BaseHandler, CrawlFrontier
from scrapy_cluster.kafka_monitor.validation import RequestValidator


def plugin_classes(settings: Mapping[str, Any]) -> list[type[BaseHandler]]:
    """The enabled plugin classes, lowest rank first (ties by dotted path)."""
    configured = settings.get("PLUGINS") or {}
    if not isinstance(configured, Mapping):
        raise PluginError(f"PLUGINS must be a dict of 'dotted.path.Class': rank, "
                          f"not {type(configured).__name__}")
    enabled = sorted((_rank(path, rank), path) for path, rank in configured.items()
                     if rank is not None)
    return [_load_class(path) for _, path in enabled]


def _rank(path: str, rank: Any) -> float:
    if isinstance(rank, bool) or not isinstance(rank, (int, float)):
        raise PluginError(f"PLUGINS[{path!r}] must be a number or None, not {rank!r}")
    return float(rank)


def _load_class(path: str) -> type[BaseHandler]:
    try:
        loaded = load_object(path)
    except (ImportError, NameError, AttributeError, ValueError) as exc:
        raise PluginError(f"cannot load plugin {path!r}: {exc}") from exc
    if not (isinstance(loaded, type) and issubclass(loaded, BaseHandler)):
        raise PluginError(f"plugin {path!r} is not a BaseHandler subclass")
    return loaded


def build_validator(classes: list[type[BaseHandler]],
                    settings: Mapping[str, Any]) -> RequestValidator:
    """Compile every class's schema once, in rank order."""
    return RequestValidator.from_definitions(
        [(cls.__name__, cls.load_schema(settings)) for cls in classes])


def build_plugins(classes: list[type[BaseHandler]], settings: Mapping[str, Any], *,
                  logger: logging.Logger, redis_client: redis.Redis,
                  frontier: CrawlFrontier | None,
                  clock: Callable[[], float] | None = None) -> list[BaseHandler]:
    """Instantiate and set up each class; those raising ``NotConfigured`` are left out."""
    plugins: list[BaseHandler] = []
    for cls in classes:
        try:
            plugins.append(cls.from_settings(settings, logger=logger, redis_client=redis_client,
                                             frontier=frontier, clock=clock))
        except NotConfigured as exc:
            logger.info("plugin %s not configured, skipped: %s", cls.__name__, exc,
                        extra={"plugin": cls.__name__})
    return plugins
