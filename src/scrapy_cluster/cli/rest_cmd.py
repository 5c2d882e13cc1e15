"""``scrapy-cluster rest``: the Rest service (HTTP API, dashboard, /metrics) until stopped."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import click

from scrapy_cluster.cli.context import CliContext, pass_cli_context


@contextmanager
def open_rest_service(settings: Mapping[str, Any], logger: logging.Logger,
                      port: int | None = None) -> Iterator[Any]:
    """The composition root: the Kafka Monitor's schemas validate ``/feed``, the metrics
    exporter reads the cluster, the service runs until the caller stops it."""
    from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes
    from scrapy_cluster.rest.server import open_rest

    validator = build_validator(plugin_classes(settings), settings)
    schemas = [(schema.plugin, schema.definition) for schema in validator.schemas]
    with open_rest(settings, logger, check=validator.match, schemas=schemas,
                   metrics_factory=_metrics, port=port) as runner:
        yield runner


def _metrics(service: Any) -> Any:
    from scrapy_cluster.rest.metrics import RestMetrics

    return RestMetrics(service.settings, service.redis, frontier=service.frontier,
                       bus_lag=service.monitor_lag)


@click.command("rest")
@click.option("--port", type=int, help="FLASK_PORT (default 5343)")
@click.option("--host", help="REST_HOST (default 0.0.0.0)")
@pass_cli_context
def rest_command(cli: CliContext, port: int | None, host: str | None) -> None:
    """Serve the HTTP API (/, /feed, /poll), the dashboard (/ui) and /metrics until
    SIGINT/SIGTERM."""
    from scrapy_cluster.cli.serving import serve

    settings = cli.settings("rest", FLASK_PORT=port, REST_HOST=host)
    serve(settings, open_rest_service, "Rest service")


def register(group: click.Group) -> None:
    group.add_command(rest_command)
