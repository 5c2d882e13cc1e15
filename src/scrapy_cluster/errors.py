"""The project's exception hierarchy: every error we raise derives from ``ScrapyClusterError``."""

from __future__ import annotations


class ScrapyClusterError(Exception):
    """Base of every error raised by scrapy-cluster."""


class SettingsError(ScrapyClusterError):
    """A setting could not be read or parsed."""


class BusError(ScrapyClusterError):
    """The message bus failed (broker unreachable, delivery failed, ...)."""


class MessageTooLargeError(BusError):
    """A message exceeds the bus's configured maximum size; it was not sent."""


class BusUnavailableError(BusError):
    """The broker or Redis behind the bus cannot be reached."""


class FrontierError(ScrapyClusterError):
    """The distributed frontier refused or failed an operation."""


class InvalidRequestError(FrontierError):
    """A crawl request is malformed (missing url, bad priority, ...)."""


class DomainConfigError(ScrapyClusterError):
    """A domain configuration document is invalid; the message names the domain and field."""


class DomainConfigConflictError(DomainConfigError):
    """The domain configuration changed since it was read (compare-and-set lost)."""


class ValidationError(ScrapyClusterError):
    """An API message does not match any schema; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ServiceError(ScrapyClusterError):
    """An external process (redis-server, broker) could not be started or reached."""


class ZookeeperUnavailableError(ServiceError):
    """ZooKeeper did not answer within the connect timeout."""


class InvalidLevelExpressionError(ScrapyClusterError, ValueError):
    """A log callback's level expression is not '*', a level name, or a comparison with one."""


class EncodingError(ScrapyClusterError):
    """An item could not be encoded for, or decoded from, a Redis queue.

    ``raw`` holds the undecodable bytes (already removed from Redis on a pop),
    so the caller can keep or report them; it is None for encoding failures.
    """

    def __init__(self, message: str, *, raw: bytes | None) -> None:
        super().__init__(message)
        self.raw = raw


class CrawlerError(ScrapyClusterError):
    """The crawler could not handle a request or a response."""


class RequestSerializationError(CrawlerError):
    """A Scrapy request cannot travel through the frontier (callback not a spider method,
    meta not JSON-serialisable) or a stored request names a method the spider lacks."""


class NotConfigured(ScrapyClusterError):
    """A plugin is switched off by its settings; the plugin loader skips it."""


class PluginError(ScrapyClusterError):
    """A plugin could not be loaded (bad dotted path, missing or broken schema)."""


class JobError(ScrapyClusterError):
    """A Redis Monitor job that can never succeed (missing or wrong fields): dropped, not retried."""


class SchemaVersionError(ScrapyClusterError):
    """Redis holds a key layout version this code does not know (``scrapy-cluster migrate``)."""


class MigrationError(ScrapyClusterError):
    """``scrapy-cluster migrate`` cannot continue (the message says what to do)."""
