"""Layered settings (defaults < localsettings.py < environment < command line)."""

from __future__ import annotations

from scrapy_cluster.settings.defaults import COMPONENT_DEFAULTS, DEFAULTS, SPECS, SettingSpec
from scrapy_cluster.settings.loader import Settings, load_settings, parse_env_value
from scrapy_cluster.settings.masking import mask_secrets

__all__ = [
    "COMPONENT_DEFAULTS", "DEFAULTS", "SPECS", "SettingSpec", "Settings",
    "load_settings", "mask_secrets", "parse_env_value",
]
