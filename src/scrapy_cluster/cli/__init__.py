"""The ``scrapy-cluster`` command: one entry point, one thin subcommand per job.

Each subcommand module builds its clients from settings, wires them, runs,
and closes them on SIGINT/SIGTERM. Register a new subcommand by adding its
module to ``_SUBCOMMAND_MODULES``.
"""

from __future__ import annotations

import importlib

import click

from scrapy_cluster import __version__
from scrapy_cluster.cli.context import CliContext
from scrapy_cluster.cli.help import OneScreenGroup
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.settings.loader import parse_flag

_SUBCOMMAND_MODULES = (
    "scrapy_cluster.cli.settings_cmd",
    "scrapy_cluster.cli.bus_cmd",
    "scrapy_cluster.cli.kafka_monitor_cmd",
    "scrapy_cluster.cli.redis_monitor_cmd",
    "scrapy_cluster.cli.rest_cmd",
    "scrapy_cluster.cli.crawler_cmd",
    "scrapy_cluster.cli.up_cmd",
    "scrapy_cluster.cli.demo_cmd",
    "scrapy_cluster.cli.config_cmd",
    "scrapy_cluster.cli.migrate_cmd",
)


@click.group(cls=OneScreenGroup, context_settings={"help_option_names": ["-h", "--help"],
                                                    "max_content_width": 110})
@click.version_option(__version__, prog_name="scrapy-cluster")
@click.option("--settings", "settings_file", metavar="FILE", envvar="SC_SETTINGS",
              help="localsettings.py to load (default: $SC_SETTINGS or ./localsettings.py).")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                                               case_sensitive=False), help="LOG_LEVEL")
@click.option("--log-json/--no-log-json", default=None, help="LOG_JSON")
@click.option("--redis-url", metavar="URL", help="REDIS_URL")
@click.option("--bus", "bus_backend", type=click.Choice(["kafka", "redis"]), help="BUS_BACKEND")
@click.option("--kafka-hosts", metavar="HOSTS", help="KAFKA_HOSTS")
@click.option("--set", "-s", "assignments", metavar="NAME=VALUE", multiple=True,
              help="Any setting, typed as in the environment (repeatable).")
@click.pass_context
def main(ctx: click.Context, settings_file: str | None, log_level: str | None,
         log_json: bool | None, redis_url: str | None, bus_backend: str | None,
         kafka_hosts: str | None, assignments: tuple[str, ...]) -> None:
    """A distributed, on-demand web-crawling cluster."""
    try:
        assigned = dict(parse_flag(assignment) for assignment in assignments)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from exc
    flags = {"LOG_LEVEL": log_level.upper() if log_level else None, "LOG_JSON": log_json,
             "REDIS_URL": redis_url, "BUS_BACKEND": bus_backend, "KAFKA_HOSTS": kafka_hosts}
    if log_level:
        flags["SC_LOG_LEVEL"] = log_level.upper()
    if log_json is not None:
        flags["SC_LOG_JSON"] = log_json
    ctx.obj = CliContext(settings_file=settings_file, overrides={
        **assigned, **{k: v for k, v in flags.items() if v is not None}})


for _module in _SUBCOMMAND_MODULES:
    importlib.import_module(_module).register(main)
