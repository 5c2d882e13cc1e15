"""Settings precedence, parsing, merging, masking and the misspelling warning."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from scrapy_cluster.cli import main
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.settings import DEFAULTS, load_settings, mask_secrets


def write_local(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "localsettings.py"
    path.write_text(body)
    return path


def test_defaults_follow_the_seed() -> None:
    settings = load_settings(environ={})
    assert settings["QUEUE_HITS"] == 10
    assert settings["QUEUE_WINDOW"] == 60
    assert settings["KAFKA_TOPIC_PREFIX"] == "demo"
    assert settings["STATS_TIMES"][0] == "SECONDS_15_MINUTE"
    assert settings.source("QUEUE_HITS") == "default"


def test_component_defaults_win_over_common_defaults() -> None:
    assert load_settings("kafka-monitor", environ={})["SLEEP_TIME"] == 0.01
    assert load_settings("redis-monitor", environ={})["SLEEP_TIME"] == 0.1
    assert load_settings("rest", environ={})["KAFKA_CONSUMER_AUTO_OFFSET_RESET"] == "latest"
    assert load_settings("kafka-monitor", environ={})["LOGGER_NAME"] == "kafka-monitor"


def test_precedence_default_file_env_cli(tmp_path: Path) -> None:
    local = write_local(tmp_path, "QUEUE_HITS = 20\nQUEUE_WINDOW = 30\nLOG_LEVEL = 'DEBUG'\n")
    env = {"QUEUE_WINDOW": "45", "LOG_LEVEL": "WARNING"}
    settings = load_settings(settings_file=local, environ=env, overrides={"LOG_LEVEL": "ERROR"})
    assert (settings["QUEUE_HITS"], settings.source("QUEUE_HITS")) == (20, str(local))
    assert (settings["QUEUE_WINDOW"], settings.source("QUEUE_WINDOW")) == (45, "env")
    assert (settings["LOG_LEVEL"], settings.source("LOG_LEVEL")) == ("ERROR", "command line")


def test_settings_file_from_env_var(tmp_path: Path) -> None:
    local = write_local(tmp_path, "QUEUE_HITS = 3\n")
    assert load_settings(environ={"SC_SETTINGS": str(local)})["QUEUE_HITS"] == 3


def test_dict_setting_merges_one_level(tmp_path: Path) -> None:
    local = write_local(tmp_path, "PLUGINS = {'my.plugin.Handler': 50}\n"
                                  "KAFKA_CONFIG = {'security.protocol': 'SSL'}\n")
    settings = load_settings("kafka-monitor", settings_file=local, environ={
        "KAFKA_CONFIG": json.dumps({"client.id": "x"})})
    assert settings["PLUGINS"]["my.plugin.Handler"] == 50
    assert settings["PLUGINS"]["scrapy_cluster.kafka_monitor.plugins.ScraperHandler"] == 100
    assert settings["KAFKA_CONFIG"] == {"security.protocol": "SSL", "client.id": "x"}


@pytest.mark.parametrize(("name", "raw", "expected"), [
    ("QUEUE_MODERATED", "false", False), ("QUEUE_MODERATED", "1", True),
    ("QUEUE_HITS", "42", 42), ("SLEEP_TIME", "0.5", 0.5),
    ("STATUS_RESPONSE_CODES", "[200, 500]", [200, 500]), ("KAFKA_HOSTS", "h:1", "h:1"),
])
def test_env_values_parse_by_default_type(name: str, raw: str, expected: object) -> None:
    assert load_settings(environ={name: raw})[name] == expected


def test_bad_env_value_is_a_clear_error() -> None:
    with pytest.raises(SettingsError, match="QUEUE_HITS='many'"):
        load_settings(environ={"QUEUE_HITS": "many"})


def test_missing_settings_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="settings file not found"):
        load_settings(settings_file=tmp_path / "nope.py", environ={})


def test_misspelled_setting_warns_with_closest_name(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    local = write_local(tmp_path, "QUEUE_HITTS = 5\nMY_PLUGIN_OPTION = 1\n")
    with caplog.at_level(logging.WARNING):
        settings = load_settings(settings_file=local, environ={})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"unknown setting QUEUE_HITTS in {local}; did you mean QUEUE_HITS?"]
    assert settings["MY_PLUGIN_OPTION"] == 1


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("REDIS_URL", "redis://:s3cret@host:6379/0", "redis://:****@host:6379/0"),
    ("REDIS_URL", "rediss://user:s3cret@host/1", "rediss://user:****@host/1"),
    ("REDIS_URL", "redis://host:6379/0", "redis://host:6379/0"),
    ("REDIS_PASSWORD", "s3cret", "****"),
    ("MY_API_SECRET", "abc", "****"),
    ("KAFKA_CONFIG", {"sasl.password": "pw", "sasl.username": "u"},
     {"sasl.password": "****", "sasl.username": "u"}),
])
def test_secrets_are_masked(name: str, value: object, expected: object) -> None:
    assert mask_secrets(name, value) == expected


def test_settings_command_masks_and_names_source(tmp_path: Path) -> None:
    local = write_local(tmp_path, "KAFKA_CONFIG = {'sasl.password': 'hunter2'}\n")
    result = CliRunner().invoke(main, ["--settings", str(local), "--redis-url",
                                       "redis://:topsecret@h:1/0", "settings", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows["REDIS_URL"] == {"value": "redis://:****@h:1/0", "source": "command line"}
    assert rows["KAFKA_CONFIG"] == {"value": {"sasl.password": "****"}, "source": str(local)}
    assert "hunter2" not in result.output and "topsecret" not in result.output
    assert set(rows) >= set(DEFAULTS)


def test_settings_command_single_name() -> None:
    result = CliRunner().invoke(main, ["settings", "QUEUE_HITS"], env={"QUEUE_HITS": "7"})
    assert result.exit_code == 0
    assert result.output.strip() == "QUEUE_HITS = 7    (env)"


def test_settings_command_unknown_name_is_an_error() -> None:
    result = CliRunner().invoke(main, ["settings", "NOPE"])
    assert result.exit_code != 0
    assert "unknown setting: NOPE" in result.output


def test_docs_settings_md_is_generated_from_defaults() -> None:
    from scrapy_cluster.cli.settings_cmd import render_markdown
    docs = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
    assert docs.read_text() == render_markdown() + "\n", \
        "docs/settings.md is stale: run scrapy-cluster settings --markdown > docs/settings.md"


def test_top_level_help_lists_every_subcommand_with_options() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "settings [NAME] [-c/--component CHOICE] [--json] [--markdown]" in result.output
