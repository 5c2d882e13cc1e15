"""The Kafka Monitor plugin contract: one JSON Schema plus the code for requests that match it.

A plugin is a class named in the ``PLUGINS`` setting (``{'dotted.path.Class': rank}``).
The monitor validates every request against the plugins' schemas, lowest rank
first, fills the schema's defaults into the request, and hands it to the first
plugin whose schema accepts it. See "Writing a plugin" in ``docs/api.md``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import orjson
import redis

from scrapy_cluster.api import SCHEMA_DIR
from scrapy_cluster.errors import PluginError
from scrapy_cluster.outage import is_redis_outage

PluginT = TypeVar("PluginT", bound="BaseHandler")
Failures = dict[int, str]
"""Index (in the batch handed to a plugin) of each request that failed, and why."""


class EnqueueOutcome(Protocol):
    """What the frontier reports for one ``enqueue_many`` call."""

    queued: int
    duplicates: int
    blacklisted: int
    invalid: list[tuple[int, str]]


class CrawlFrontier(Protocol):
    """The part of ``scrapy_cluster.frontier.Frontier`` the Kafka Monitor uses."""

    def enqueue_many(self, requests: Sequence[dict[str, Any]], *,
                     dedupe: bool = False) -> EnqueueOutcome: ...


class BaseHandler:
    """A Kafka Monitor plugin.

    Subclasses set ``schema`` (a file name looked up beside the plugin's module,
    then in ``api/schemas/``; or an absolute path) and implement
    ``handle(message)``. ``message`` is always valid against the schema, with the
    schema's defaults filled in. Plugins get ``self.logger`` (the monitor's
    logger), ``self.redis`` (a synchronous client) and ``self.frontier``.
    ``setup(settings)`` may raise ``NotConfigured`` to switch the plugin off.
    ``check_request(message)`` may refuse what the schema cannot express.

    A request may be handed over more than once (the bus delivers at least once,
    and a batch is retried after a Redis outage), so ``handle`` should be
    idempotent.
    """

    schema: ClassVar[str] = ""

    def __init__(self, *, logger: logging.Logger, redis_client: redis.Redis,
                 frontier: CrawlFrontier | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.logger = logger
        self.redis = redis_client
        self.frontier = frontier
        self.clock = clock

    @classmethod
    def from_settings(cls: type[PluginT], settings: Mapping[str, Any], *,
                      logger: logging.Logger, redis_client: redis.Redis,
                      frontier: CrawlFrontier | None = None,
                      clock: Callable[[], float] | None = None) -> PluginT:
        """Build the plugin and run its ``setup(settings)``."""
        plugin = cls(logger=logger, redis_client=redis_client, frontier=frontier, clock=clock)
        plugin.setup(settings)
        return plugin

    @property
    def name(self) -> str:
        """The plugin's name in stats keys (``stats:kafka-monitor:<name>:<window>``)."""
        return type(self).__name__

    @classmethod
    def schema_path(cls) -> Path:
        """Where ``schema`` points: absolute, beside the plugin's module, or a built-in schema."""
        if not cls.schema:
            raise PluginError(f"{cls.__module__}.{cls.__qualname__} declares no schema")
        declared = Path(cls.schema)
        if declared.is_absolute():
            return declared
        beside = Path(inspect.getfile(cls)).resolve().parent / declared
        return beside if beside.is_file() else SCHEMA_DIR / declared

    @classmethod
    def load_schema(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The plugin's JSON Schema; subclasses may adjust it from settings."""
        path = cls.schema_path()
        try:
            loaded = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise PluginError(f"cannot read schema {path} of {cls.__qualname__}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise PluginError(f"schema {path} of {cls.__qualname__} is not a JSON object")
        return loaded

    @classmethod
    def check_request(cls, message: dict[str, Any]) -> str | None:
        """What a JSON Schema cannot say: a reason to refuse a request the schema accepted
        (defaults filled in), or None. Runs wherever requests are validated (the Kafka Monitor,
        the Rest service, ``feed``), so it must do no I/O. The default accepts everything."""
        return None

    def setup(self, settings: Mapping[str, Any]) -> None:
        """Read settings and prepare connections; raise ``NotConfigured`` to be skipped."""

    def handle(self, message: dict[str, Any]) -> None:
        """Process one valid request."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement handle()")

    def handle_batch(self, messages: Sequence[dict[str, Any]], pipe: Any) -> Failures:
        """Process valid requests; queue Redis writes on ``pipe`` where possible.

        The monitor executes ``pipe`` (with its stats) after every plugin of the
        batch ran, and retries the whole batch if Redis is unreachable. The
        default calls ``handle`` once per request and reports the requests that
        raised; a Redis outage propagates so the batch is retried.
        """
        failures: Failures = {}
        for index, message in enumerate(messages):
            try:
                self.handle(message)
            except Exception as exc:
                if is_redis_outage(exc):
                    raise
                failures[index] = f"{type(exc).__name__}: {exc}"
        return failures


class PipelinedHandler(BaseHandler):
    """A plugin whose real work is ``handle_batch``; ``handle`` runs a batch of one."""

    def handle(self, message: dict[str, Any]) -> None:
        """Handle one request with its own pipeline. Round trips: 1 plus the plugin's own."""
        pipe = self.redis.pipeline(transaction=False)
        failures = self.handle_batch([message], pipe)
        pipe.execute()
        if failures:
            raise PluginError(failures[0])

    def handle_batch(self, messages: Sequence[dict[str, Any]], pipe: Any) -> Failures:
        raise NotImplementedError(f"{type(self).__qualname__} must implement handle_batch()")
