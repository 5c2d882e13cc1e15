"""``scrapy-cluster kafka-monitor run|feed`` and the ``scrapy-cluster feed`` alias."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from tqdm import tqdm

from scrapy_cluster.cli.context import CliContext, pass_cli_context, require_cluster
from scrapy_cluster.errors import BusError, BusUnavailableError, ScrapyClusterError, ValidationError

if TYPE_CHECKING:
    from scrapy_cluster.api.validation import RequestValidator
    from scrapy_cluster.kafka_monitor.feed import Feeder
    from scrapy_cluster.settings import Settings

EXIT_BUS_FAILURE = 1
EXIT_INVALID = 2


@click.group("kafka-monitor")
def kafka_monitor_group() -> None:
    """The JSON API gateway: validate requests and hand them to plugins."""


@kafka_monitor_group.command("run")
@pass_cli_context
def run_command(cli: CliContext) -> None:
    """Consume KAFKA_INCOMING_TOPIC in group KAFKA_GROUP until SIGINT/SIGTERM."""
    from scrapy_cluster.cli.serving import serve
    from scrapy_cluster.kafka_monitor.app import open_monitor

    serve(cli.settings("kafka-monitor"), open_monitor, "Kafka Monitor")


@click.command("feed")
@click.argument("request", required=False)
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Feed every line of a JSON-lines file.")
@pass_cli_context
def feed_command(cli: CliContext, request: str | None, path: Path | None) -> None:
    """Validate and send one JSON request (or a JSON-lines --file) to the incoming topic."""
    if (request is None) == (path is None):
        raise click.UsageError("give either one JSON request or --file, not both or neither")
    from scrapy_cluster.kafka_monitor.feed import parse_request
    from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes

    settings = cli.settings("kafka-monitor")
    try:
        validator = build_validator(plugin_classes(settings), settings)
        plugin, message = parse_request(validator, request) if request is not None else ("", {})
    except ValidationError as exc:
        click.echo(f"invalid request: {exc.reason}", err=True)
        sys.exit(EXIT_INVALID)
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    require_cluster(settings)
    with _feeder(settings, validator) as feeder:
        if path is None:
            _send_one(feeder, plugin, message)
        else:
            _feed_file(feeder, path)
    if path is None:
        from scrapy_cluster.stats.coverage import feed_warning

        warning = feed_warning(settings, message)
        if warning is not None:
            click.echo(f"warning: {warning}", err=True)


@contextmanager
def _feeder(settings: Settings, validator: RequestValidator) -> Iterator[Feeder]:
    from scrapy_cluster.bus import create_bus
    from scrapy_cluster.kafka_monitor.feed import Feeder

    bus = create_bus(settings)
    producer = bus.producer()
    confirmed = False
    try:
        yield Feeder.from_settings(settings, producer, validator)
        confirmed = True
    finally:
        if confirmed:  # after a failure, closing would only wait for the bus once more
            try:
                producer.close()
            except BusError:
                pass  # what was undelivered has already been reported
        bus.close()


def _send_one(feeder: Feeder, plugin: str, message: dict[str, Any]) -> None:
    try:
        feeder.send(message)
    except BusUnavailableError as exc:
        click.echo(f"not sent: {feeder.topic} did not confirm it within {feeder.timeout_s:g}s "
                   f"({exc}); feed it again once the bus is reachable", err=True)
        sys.exit(EXIT_BUS_FAILURE)
    except BusError as exc:
        click.echo(f"not sent: {exc}", err=True)
        sys.exit(EXIT_BUS_FAILURE)
    click.echo(f"sent to {feeder.topic} ({plugin})")


def _feed_file(feeder: Feeder, path: Path) -> None:
    with path.open("rb") as counting:
        total = sum(1 for _ in counting)
    with path.open("rb") as lines, tqdm(total=total, unit="req", desc="feed") as bar:
        summary = feeder.feed_lines(lines, progress=bar.update)
    for error in summary.errors:
        click.echo(error, err=True)
    click.echo(f"sent {summary.sent}, failed {summary.failed}, invalid {summary.invalid}")
    if summary.failed:
        sys.exit(EXIT_BUS_FAILURE)
    if summary.invalid:
        sys.exit(EXIT_INVALID)


def register(group: click.Group) -> None:
    kafka_monitor_group.add_command(feed_command)
    group.add_command(kafka_monitor_group)
    group.add_command(feed_command, "feed")
