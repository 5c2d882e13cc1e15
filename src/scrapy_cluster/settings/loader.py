"""Layered settings: defaults < localsettings.py < environment < command line.

Every value remembers where it came from, so ``scrapy-cluster settings`` can
say why a value is what it is.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import runpy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from scrapy_cluster.errors import SettingsError
from scrapy_cluster.settings.defaults import COMPONENT_DEFAULTS, DEFAULTS
from scrapy_cluster.settings.running_cluster import RUNNING_CLUSTER_SOURCE, read_running_cluster

logger = logging.getLogger(__name__)

SETTINGS_ENV_VAR = "SC_SETTINGS"
DEFAULT_LOCAL_FILE = "localsettings.py"

SOURCE_DEFAULT = "default"
SOURCE_COMPONENT = "default ({component})"
SOURCE_ENV = "env"
SOURCE_CLI = "command line"

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f", ""}


class Settings(Mapping[str, Any]):
    """An immutable mapping of setting name to value, with the source of each."""

    def __init__(self, values: Mapping[str, Any], sources: Mapping[str, str],
                 *, component: str | None = None, local_file: Path | None = None) -> None:
        self._values = dict(values)
        self._sources = dict(sources)
        self.component = component
        self.local_file = local_file

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def source(self, name: str) -> str:
        """Where the effective value of ``name`` came from."""
        return self._sources[name]

    def with_overrides(self, overrides: Mapping[str, Any], source: str = SOURCE_CLI) -> Settings:
        """A copy with ``overrides`` applied on top (dicts merge one level deep)."""
        values, sources = dict(self._values), dict(self._sources)
        for name, value in overrides.items():
            values[name] = _merge(values.get(name), value)
            sources[name] = source
        return Settings(values, sources, component=self.component, local_file=self.local_file)

    def copy_to_dict(self) -> dict[str, Any]:
        return dict(self._values)


def load_settings(
    component: str | None = None,
    *,
    settings_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the effective settings for ``component``.

    Precedence, lowest first: built-in defaults, the component's own
    defaults, ``localsettings.py`` (``settings_file``, else ``$SC_SETTINGS``,
    else ``./localsettings.py`` when present), environment variables of the
    same name (parsed by the default's type), then ``overrides`` (command-line
    flags). A dict setting merges one level deep at every layer. When
    ``environ`` is None (the real process environment), a live
    ``scrapy-cluster up`` in SC_DATA_DIR contributes its REDIS_URL and
    BUS_BACKEND just above the defaults.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = dict(DEFAULTS)
    sources = {name: SOURCE_DEFAULT for name in values}
    for name, value in COMPONENT_DEFAULTS.get(component or "", {}).items():
        values[name] = value
        sources[name] = SOURCE_COMPONENT.format(component=component)

    if environ is None:
        _apply_running_cluster(values, sources, env)

    local_file = _locate_local_file(settings_file, env)
    if local_file is not None:
        for name, value in _read_local_file(local_file).items():
            values[name] = _merge(values.get(name), value)
            sources[name] = str(local_file)

    for name in list(values):
        raw = env.get(name)
        if raw is not None:
            values[name] = _merge(values[name], parse_env_value(name, raw, values[name]))
            sources[name] = SOURCE_ENV
    if environ is None:
        warn_unread_environment(env, component)

    settings = Settings(values, sources, component=component, local_file=local_file)
    return settings.with_overrides(overrides) if overrides else settings


def _apply_running_cluster(values: dict[str, Any], sources: dict[str, str],
                           env: Mapping[str, str]) -> None:
    """Layer the settings of a live ``scrapy-cluster up`` in SC_DATA_DIR (``running_cluster.py``)."""
    data_dir = Path(env.get("SC_DATA_DIR") or DEFAULTS["SC_DATA_DIR"])
    for name, raw in read_running_cluster(data_dir).items():
        if name in values:
            values[name] = parse_env_value(name, raw, values[name])
            sources[name] = f"{RUNNING_CLUSTER_SOURCE} ({data_dir})"


def parse_env_value(name: str, raw: str, current: Any) -> Any:
    """Parse an environment string by the type of the setting's current value."""
    try:
        if isinstance(current, bool):
            lowered = raw.strip().lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            raise ValueError(f"expected a boolean, got {raw!r}")
        if isinstance(current, int):
            return int(raw)
        if isinstance(current, float):
            return float(raw)
        if isinstance(current, (list, dict)):
            parsed = orjson.loads(raw)
            if not isinstance(parsed, type(current)):
                raise ValueError(f"expected a JSON {type(current).__name__}")
            return parsed
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise SettingsError(f"environment variable {name}={raw!r}: {exc}") from exc
    return raw


def _merge(current: Any, new: Any) -> Any:
    if isinstance(current, dict) and isinstance(new, dict):
        return {**current, **new}
    return new


def _locate_local_file(explicit: str | os.PathLike[str] | None,
                       env: Mapping[str, str]) -> Path | None:
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise SettingsError(f"settings file not found: {path}")
        return path
    from_env = env.get(SETTINGS_ENV_VAR)
    if from_env:
        path = Path(from_env)
        if not path.is_file():
            raise SettingsError(f"{SETTINGS_ENV_VAR} points at a missing file: {path}")
        return path
    candidate = Path(DEFAULT_LOCAL_FILE)
    return candidate if candidate.is_file() else None


def _read_local_file(path: Path) -> dict[str, Any]:
    try:
        namespace = runpy.run_path(str(path))
    except Exception as exc:
        raise SettingsError(f"cannot load settings file {path}: {exc}") from exc
    found = {name: value for name, value in namespace.items()
             if name.isupper() and not name.startswith("_")}
    for name in found:
        if name not in DEFAULTS:
            _warn_unknown(name, path)
    return found


SETTING_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
NOT_SETTINGS = frozenset({"EDITOR"})
"""Scrapy setting names that are also ordinary environment variables."""
DERIVED_SCRAPY_SETTINGS = {"CONCURRENT_REQUESTS": "CRAWLER_CONCURRENCY",
                           "CONCURRENT_REQUESTS_PER_DOMAIN": "CRAWLER_PER_DOMAIN_CONCURRENCY"}
"""Scrapy settings the crawler sets from a cluster setting, whatever was given."""
_warned: set[str] = set()


def unread_environment(env: Mapping[str, str], component: str | None) -> dict[str, str]:
    """Environment variables that look like settings but are not read: a name close to a
    declared setting (a typo), or, for the crawler, a Scrapy setting the cluster does not
    declare. Name -> what to say about it."""
    scrapy_names: frozenset[str] = frozenset()
    if component == "crawler":
        from scrapy.settings import default_settings

        scrapy_names = frozenset(name for name in vars(default_settings) if name.isupper())
    found: dict[str, str] = {}
    for name in env:
        if name in DEFAULTS or name in NOT_SETTINGS or not SETTING_NAME.fullmatch(name):
            continue
        close = difflib.get_close_matches(name, DEFAULTS.keys(), n=1, cutoff=0.9)
        if close:
            found[name] = f"not a setting; did you mean {close[0]}?"
        elif name in DERIVED_SCRAPY_SETTINGS and component == "crawler":
            found[name] = f"the crawler sets it from {DERIVED_SCRAPY_SETTINGS[name]}"
        elif name in scrapy_names:
            found[name] = ("a Scrapy setting the cluster does not take from the environment; "
                           "set it in localsettings.py (SC_SETTINGS)")
    return found


def warn_unread_environment(env: Mapping[str, str], component: str | None) -> None:
    """One warning per process for each variable ``unread_environment`` finds."""
    for name, why in unread_environment(env, component).items():
        if name not in _warned:
            _warned.add(name)
            logger.warning("environment variable %s is ignored: %s", name, why,
                           extra={"setting": name, "event": "setting_ignored"})


def parse_flag(assignment: str) -> tuple[str, Any]:
    """``NAME=VALUE`` of ``--set``: a declared setting, its value parsed by the type of its
    default as an environment variable is. ``SettingsError`` for anything else."""
    name, equals, raw = assignment.partition("=")
    name = name.strip()
    if not equals or not name:
        raise SettingsError(f"--set {assignment!r}: expected NAME=VALUE")
    if name not in DEFAULTS:
        close = difflib.get_close_matches(name, DEFAULTS.keys(), n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise SettingsError(f"--set {name}: unknown setting{hint} (scrapy-cluster settings "
                            f"lists them)")
    try:
        return name, parse_env_value(name, raw, DEFAULTS[name])
    except SettingsError as exc:
        raise SettingsError(f"--set {assignment!r}: {exc.__cause__}") from exc


def _warn_unknown(name: str, path: Path) -> None:
    if name in DERIVED_SCRAPY_SETTINGS:
        logger.warning("%s in %s is ignored: the crawler sets it from %s", name, path,
                       DERIVED_SCRAPY_SETTINGS[name],
                       extra={"setting": name, "event": "setting_ignored"})
        return
    close = difflib.get_close_matches(name, DEFAULTS.keys(), n=1, cutoff=0.8)
    if close and close[0] != name:
        logger.warning("unknown setting %s in %s; did you mean %s?", name, path, close[0],
                       extra={"setting": name, "suggestion": close[0]})
