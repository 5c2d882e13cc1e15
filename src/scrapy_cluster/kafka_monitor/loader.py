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

from scrapy_cluster.api.validation import RequestValidator
from scrapy_cluster.errors import NotConfigured
from scrapy_cluster.kafka_monitor.plugins.base import BaseHandler, CrawlFrontier
from scrapy_cluster.plugins import ranked_classes


def plugin_classes(settings: Mapping[str, Any]) -> list[type[BaseHandler]]:
    """The enabled plugin classes, lowest rank first (ties by dotted path)."""
    return ranked_classes(settings, BaseHandler)


def build_validator(classes: list[type[BaseHandler]],
                    settings: Mapping[str, Any]) -> RequestValidator:
    """Compile every class's schema once, in rank order, with the checks of the classes that
    have their own ``check_request``."""
    return RequestValidator.from_definitions(
        [(cls.__name__, cls.load_schema(settings)) for cls in classes],
        {cls.__name__: cls.check_request for cls in classes
         if cls.check_request.__func__ is not BaseHandler.check_request.__func__})  # type: ignore[attr-defined]


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
