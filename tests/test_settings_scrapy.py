"""Scrapy's settings the project documents are settings like the project's own: taken from the
environment and ``--set``, listed with their source, and handed to both engines; a variable
that looks like a setting but is not read gets a warning naming it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from scrapy_cluster.cli import main
from scrapy_cluster.crawler.common.resolution import scrapy_settings
from scrapy_cluster.crawler.fast.policy import PagePolicy
from scrapy_cluster.settings import load_settings
from scrapy_cluster.settings.defaults import SPECS
from scrapy_cluster.settings.loader import unread_environment, warn_unread_environment

SCRAPY_SPECS = [spec for spec in SPECS if spec.section == "Scrapy (crawler)"]


def as_declared(value: object) -> object:
    """A Scrapy setting's value in the form it is declared (classes as dotted paths)."""
    if hasattr(value, "copy_to_dict"):
        return value.copy_to_dict()  # type: ignore[union-attr]
    if isinstance(value, list):
        return [item if isinstance(item, (str, int)) else
                f"{item.__module__}.{item.__qualname__}" for item in value]
    return value


def test_every_declared_default_is_what_the_crawler_runs_with() -> None:
    running = scrapy_settings(load_settings("crawler", environ={}))
    assert {spec.name: as_declared(running.get(spec.name)) for spec in SCRAPY_SPECS} == \
        {spec.name: spec.default for spec in SCRAPY_SPECS}


@pytest.mark.parametrize("name, raw, expected", [
    ("DOWNLOAD_MAXSIZE", "100000", 100000), ("DOWNLOAD_TIMEOUT", "7.5", 7.5),
    ("RETRY_TIMES", "0", 0), ("ROBOTSTXT_OBEY", "false", False),
    ("RETRY_HTTP_CODES", "[503]", [503]), ("USER_AGENT", "mybot/1.0", "mybot/1.0"),
])
def test_a_scrapy_setting_from_the_environment_reaches_scrapy(name: str, raw: str,
                                                             expected: object) -> None:
    settings = load_settings("crawler", environ={name: raw})
    assert settings.source(name) == "env"
    assert as_declared(scrapy_settings(settings).get(name)) == expected


def test_both_engines_read_the_environment_values() -> None:
    settings = load_settings("crawler", environ={"DOWNLOAD_MAXSIZE": "100000",
                                                 "DOWNLOAD_TIMEOUT": "4", "RETRY_TIMES": "5"})
    policy = PagePolicy.from_settings(settings)
    assert (policy.download_maxsize, policy.download_timeout_s, policy.retry_times) == \
        (100000, 4.0, 5)


def test_the_settings_command_lists_them_with_their_source() -> None:
    result = CliRunner().invoke(main, ["settings", "-c", "crawler", "--json"],
                                env={"DOWNLOAD_MAXSIZE": "100000"})
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows["DOWNLOAD_MAXSIZE"] == {"value": 100000, "source": "env"}
    assert rows["RETRY_TIMES"] == {"value": 2, "source": "default"}


def test_set_flag_sets_any_declared_setting_typed() -> None:
    result = CliRunner().invoke(main, ["-s", "RETRY_TIMES=5", "--set",
                                       'DEFAULT_REQUEST_HEADERS={"X-Team": "a"}',
                                       "settings", "-c", "crawler", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows["RETRY_TIMES"] == {"value": 5, "source": "command line"}
    assert rows["DEFAULT_REQUEST_HEADERS"]["value"]["X-Team"] == "a"
    assert rows["DEFAULT_REQUEST_HEADERS"]["value"]["Accept-Language"] == "en"


@pytest.mark.parametrize("assignment, message", [
    ("RETRY_TIME=5", "--set RETRY_TIME: unknown setting; did you mean RETRY_TIMES?"),
    ("RETRY_TIMES=many", "--set 'RETRY_TIMES=many': invalid literal for int()"),
    ("RETRY_TIMES", "--set 'RETRY_TIMES': expected NAME=VALUE"),
])
def test_set_flag_refuses_what_it_cannot_apply(assignment: str, message: str) -> None:
    result = CliRunner().invoke(main, ["-s", assignment, "settings"])
    assert result.exit_code == 2
    assert message in result.output


def test_variables_that_look_like_settings_but_are_not_read_are_named() -> None:
    env = {"KAFKA_HOST": "x", "CONCURRENT_REQUESTS": "3", "RANDOMIZE_DOWNLOAD_DELAY": "0",
           "DOWNLOAD_MAXSIZE": "1", "EDITOR": "vi", "HOME": "/root", "PATH": "/bin",
           "MY_APP_TOKEN": "t"}
    assert unread_environment(env, "crawler") == {
        "KAFKA_HOST": "not a setting; did you mean KAFKA_HOSTS?",
        "CONCURRENT_REQUESTS": "the crawler sets it from CRAWLER_CONCURRENCY",
        "RANDOMIZE_DOWNLOAD_DELAY": "a Scrapy setting the cluster does not take from the "
                                    "environment; set it in localsettings.py (SC_SETTINGS)"}
    assert unread_environment(env, "rest") == {
        "KAFKA_HOST": "not a setting; did you mean KAFKA_HOSTS?"}


def test_each_unread_variable_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    env = {"QUEUE_HIT": "3"}
    with caplog.at_level(logging.WARNING, logger="scrapy_cluster.settings.loader"):
        warn_unread_environment(env, "crawler")
        warn_unread_environment(env, "crawler")
    assert [record.getMessage() for record in caplog.records] == [
        "environment variable QUEUE_HIT is ignored: not a setting; did you mean QUEUE_HITS?"]


def test_a_derived_setting_in_a_settings_file_is_warned_about(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    local = tmp_path / "localsettings.py"
    local.write_text("CONCURRENT_REQUESTS = 64\n")
    with caplog.at_level(logging.WARNING, logger="scrapy_cluster.settings.loader"):
        load_settings("crawler", settings_file=local, environ={})
    assert [record.getMessage() for record in caplog.records] == [
        f"CONCURRENT_REQUESTS in {local} is ignored: the crawler sets it from "
        f"CRAWLER_CONCURRENCY"]


def test_cluster_settings_named_like_scrapy_ones_never_reach_scrapy() -> None:
    """LOG_STDOUT=true for the cluster means "log to stdout"; to Scrapy it would mean "turn
    stdout into a logger"."""
    settings = load_settings("crawler", environ={"LOG_STDOUT": "false", "LOG_FILE": "x.log",
                                                 "STATS_DUMP": "5"})
    scrapy = scrapy_settings(settings)
    assert (scrapy.getbool("LOG_STDOUT"), scrapy.get("LOG_FILE"), scrapy.getbool("STATS_DUMP")) \
        == (False, None, True)
