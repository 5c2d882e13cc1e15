"""State shared by every subcommand: the global flags and how to turn them into settings.

Bad settings end a command with one line (``Error: ...``), never a traceback: a setting that
does not parse, a REDIS_URL that is not a Redis URL. Commands that talk to a running cluster
(``feed``, ``dump``, ``list-topics``) call ``require_cluster`` first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from scrapy_cluster.errors import SettingsError
from scrapy_cluster.redis_conn import validate_redis_url
from scrapy_cluster.settings import Settings, load_settings

EXIT_NO_CLUSTER = 2
CLUSTER_SETTINGS = ("REDIS_URL", "BUS_BACKEND", "KAFKA_HOSTS")


class NoClusterError(click.ClickException):
    """No ``scrapy-cluster up`` runs in SC_DATA_DIR and no cluster is configured."""

    exit_code = EXIT_NO_CLUSTER


@dataclass
class CliContext:
    settings_file: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def settings(self, component: str | None = None, **extra: Any) -> Settings:
        """Effective settings for ``component``; flags given to the command win."""
        overrides = {**self.overrides, **{k: v for k, v in extra.items() if v is not None}}
        try:
            settings = load_settings(component, settings_file=self.settings_file,
                                     overrides=overrides)
            if settings["REDIS_URL"]:
                validate_redis_url(str(settings["REDIS_URL"]))
        except SettingsError as exc:
            raise click.ClickException(str(exc)) from exc
        return settings


def cluster_configured(settings: Settings) -> bool:
    """True when a running ``up`` was found in SC_DATA_DIR (see ``settings/running_cluster.py``) or
    REDIS_URL, BUS_BACKEND or KAFKA_HOSTS was set anywhere (file, environment, flag)."""
    return any(not settings.source(name).startswith("default") for name in CLUSTER_SETTINGS)


def require_cluster(settings: Settings) -> None:
    """Stop with one line and exit code 2 when there is no cluster to talk to, instead of
    waiting for a Kafka broker on localhost:9092 that nobody started."""
    if not cluster_configured(settings):
        raise NoClusterError(
            f"no running cluster found here (SC_DATA_DIR {settings['SC_DATA_DIR']}); start "
            "`scrapy-cluster up` or set REDIS_URL / BUS_BACKEND")


pass_cli_context = click.make_pass_decorator(CliContext, ensure=True)
