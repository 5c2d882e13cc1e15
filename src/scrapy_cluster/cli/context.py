"""State shared by every subcommand: the global flags and how to turn them into settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from scrapy_cluster.errors import SettingsError
from scrapy_cluster.settings import Settings, load_settings


@dataclass
class CliContext:
    settings_file: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def settings(self, component: str | None = None, **extra: Any) -> Settings:
        """Effective settings for ``component``; flags given to the command win."""
        overrides = {**self.overrides, **{k: v for k, v in extra.items() if v is not None}}
        try:
            return load_settings(component, settings_file=self.settings_file,
                                 overrides=overrides)
        except SettingsError as exc:
            raise click.ClickException(str(exc)) from exc


pass_cli_context = click.make_pass_decorator(CliContext, ensure=True)
