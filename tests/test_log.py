"""Logging: JSON and human lines, file rollover, shared files, level-expression callbacks."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scrapy_cluster.errors import InvalidLevelExpressionError, SettingsError
from scrapy_cluster.log import LogCallbackHandler, configure_logging, configure_root_logging
from scrapy_cluster.settings import Settings, load_settings

LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


@pytest.fixture
def logger_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """A logger name private to the test; its handlers are closed afterwards."""
    name = f"test-log.{request.node.name}"
    yield name
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


def settings_for(logger_name: str, component: str = "kafka-monitor", **overrides: Any) -> Settings:
    prefix = "SC_" if component == "crawler" else ""
    return load_settings(component, environ={},
                         overrides={prefix + "LOGGER_NAME": logger_name, **overrides})


def file_settings(logger_name: str, log_dir: Path, **overrides: Any) -> Settings:
    return settings_for(logger_name, LOG_STDOUT=False, LOG_DIR=str(log_dir),
                        LOG_FILE="app.log", **overrides)


def output_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


# --- output format ----------------------------------------------------------------


def test_json_line_has_message_logger_level_and_extras(
        logger_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    logger = configure_logging(settings_for(logger_name, LOG_JSON=True))
    logger.warning("queue full", extra={"domain": "example.com", "sizes": [1, 2]})
    (line,) = output_lines(capsys)
    record = json.loads(line)
    record.pop("timestamp")
    assert record.pop("node") == f"{socket.gethostname()}:{os.getpid()}"
    assert record == {"message": "queue full", "logger": logger_name, "level": "WARNING",
                      "component": "kafka-monitor", "event": "queue full",
                      "domain": "example.com", "sizes": [1, 2]}


def test_json_line_writes_unserialisable_extras_as_text(
        logger_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    logger = configure_logging(settings_for(logger_name, LOG_JSON=True))
    logger.info("odd extras", extra={"ids": {7}, "when": datetime(2020, 1, 2, 3, 4, 5)})
    record = json.loads(output_lines(capsys)[0])
    assert (record["ids"], record["when"]) == ("{7}", "2020-01-02T03:04:05")


def test_json_line_survives_an_extra_nested_deeper_than_the_encoder_writes(
        logger_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # A crawl request's attrs may nest 1,000 levels (orjson reads 1,024, writes 254): logging
    # it must not raise RecursionError into the component that logs.
    deep: list[object] = []
    for _ in range(1000):
        deep = [deep]
    logger = configure_logging(settings_for(logger_name, LOG_JSON=True))
    logger.warning("request refused", extra={"request": {"attrs": deep}, "crawlid": "c1"})
    record = json.loads(output_lines(capsys)[0])
    assert (record["message"], record["crawlid"]) == ("request refused", "c1")
    assert isinstance(record["request"], str) and record["request"].startswith("{")


def test_json_timestamp_is_iso8601_utc(logger_name: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    logger = configure_logging(settings_for(logger_name, LOG_JSON=True))
    before = datetime.now(UTC)
    logger.info("tick")
    after = datetime.now(UTC)
    stamp = datetime.fromisoformat(json.loads(output_lines(capsys)[0])["timestamp"])
    assert stamp.utcoffset() == timedelta(0)
    assert before <= stamp <= after


def test_human_line_has_time_name_level_and_message(
        logger_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    logger = configure_logging(settings_for(logger_name))
    logger.error("crawler gone")
    (line,) = output_lines(capsys)
    stamp, rest = line[:23], line[24:]
    datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
    assert rest == f"[{logger_name}] ERROR: crawler gone"


def test_records_below_log_level_are_not_written(
        logger_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    logger = configure_logging(settings_for(logger_name, LOG_LEVEL="WARNING"))
    logger.info("dropped")
    logger.warning("kept")
    assert [line.split(": ", 1)[1] for line in output_lines(capsys)] == ["kept"]


def test_configuring_twice_writes_each_record_once(
        logger_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(settings_for(logger_name))
    logger = configure_logging(settings_for(logger_name, LOG_JSON=True))
    logger.info("once")
    lines = output_lines(capsys)
    assert len(logger.handlers) == 1
    assert [json.loads(line)["message"] for line in lines] == ["once"]


def test_reconfiguring_keeps_a_callback_handler(logger_name: str) -> None:
    logger = configure_logging(settings_for(logger_name))
    callbacks = LogCallbackHandler()
    logger.addHandler(callbacks)
    configure_logging(settings_for(logger_name))
    assert callbacks in logger.handlers and len(logger.handlers) == 2


def test_logger_does_not_propagate_to_root(logger_name: str) -> None:
    assert configure_logging(settings_for(logger_name)).propagate is False


def test_crawler_prefix_reads_the_sc_twins(logger_name: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    settings = settings_for(logger_name, "crawler", SC_LOG_JSON=True, SC_LOG_LEVEL="DEBUG",
                            LOG_LEVEL="CRITICAL")
    logger = configure_logging(settings, prefix="SC_")
    logger.debug("fetched")
    assert logger.name == logger_name
    assert json.loads(output_lines(capsys)[0])["level"] == "DEBUG"


def test_unknown_log_level_is_a_settings_error(logger_name: str) -> None:
    with pytest.raises(SettingsError, match="unknown log level 'LOUD'"):
        configure_logging(settings_for(logger_name, LOG_LEVEL="LOUD"))


# --- files ------------------------------------------------------------------------


def test_file_output_goes_to_log_dir_and_log_file(logger_name: str, tmp_path: Path) -> None:
    logger = configure_logging(file_settings(logger_name, tmp_path / "logs", LOG_JSON=True))
    logger.info("to disk", extra={"n": 1})
    lines = (tmp_path / "logs" / "app.log").read_text().splitlines()
    assert [(json.loads(line)["message"], json.loads(line)["n"]) for line in lines] == [
        ("to disk", 1)]


def test_file_rolls_over_once_it_reaches_log_max_bytes(logger_name: str, tmp_path: Path) -> None:
    logger = configure_logging(file_settings(logger_name, tmp_path, LOG_MAX_BYTES=1000,
                                             LOG_BACKUPS=10))
    for index in range(40):
        logger.info("line %03d %s", index, "x" * 60)
    line_bytes = len((tmp_path / "app.log").read_text().splitlines()[0]) + 1
    lines_per_file = -(-1000 // line_bytes)  # the write that reaches 1000 bytes is the last
    rolled = sorted(tmp_path.glob("app.log.*"))
    assert len(rolled) == (40 - 1) // lines_per_file
    assert {path.stat().st_size for path in rolled} == {lines_per_file * line_bytes}
    assert (tmp_path / "app.log").stat().st_size <= lines_per_file * line_bytes


def test_rollover_keeps_every_line_in_order(logger_name: str, tmp_path: Path) -> None:
    logger = configure_logging(file_settings(logger_name, tmp_path, LOG_MAX_BYTES=500,
                                             LOG_BACKUPS=50))
    for index in range(60):
        logger.info("seq %03d", index)
    files = sorted(tmp_path.glob("app.log.*"), key=lambda p: -int(p.suffix[1:]))
    lines = [line for path in [*files, tmp_path / "app.log"]
             for line in path.read_text().splitlines()]
    assert [line.rsplit(" ", 1)[1] for line in lines] == [f"{n:03d}" for n in range(60)]


def test_rollover_keeps_only_log_backups_files(logger_name: str, tmp_path: Path) -> None:
    logger = configure_logging(file_settings(logger_name, tmp_path, LOG_MAX_BYTES=200,
                                             LOG_BACKUPS=2))
    for index in range(100):
        logger.info("seq %03d", index)
    assert sorted(p.name for p in tmp_path.glob("app.log*")) == [
        "app.log", "app.log.1", "app.log.2"]


_WRITER = textwrap.dedent("""
    import sys
    from scrapy_cluster.log import configure_logging
    from scrapy_cluster.settings import load_settings
    log_dir, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    settings = load_settings("kafka-monitor", environ={}, overrides={
        "LOGGER_NAME": "writer", "LOG_STDOUT": False, "LOG_DIR": log_dir,
        "LOG_FILE": "shared.log", "LOG_JSON": True, "LOG_MAX_BYTES": 4096,
        "LOG_BACKUPS": 1000})
    logger = configure_logging(settings)
    for seq in range(count):
        logger.info("entry", extra={"writer": tag, "seq": seq})
""")


@pytest.mark.integration
def test_two_processes_sharing_a_rolling_file_lose_no_lines(tmp_path: Path) -> None:
    count = 2000
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), tag, str(count)])
               for tag in ("a", "b")]
    assert [writer.wait(120) for writer in writers] == [0, 0]
    records = [json.loads(line) for path in tmp_path.glob("shared.log*")
               for line in path.read_text().splitlines()]
    assert len(list(tmp_path.glob("shared.log.*"))) >= 2
    for tag in ("a", "b"):
        assert sorted(r["seq"] for r in records if r["writer"] == tag) == list(range(count))
    assert len(records) == 2 * count


# --- the root logger: every other logger of the process -------------------------------


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, put back as it was after the test (handlers, level, warnings)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    logging.captureWarnings(False)


def crawler_settings(**overrides: Any) -> Settings:
    return load_settings("crawler", environ={}, overrides=overrides)


def test_root_logging_with_log_json_writes_other_loggers_as_json_lines(
        root_logger: logging.Logger, logger_name: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert configure_root_logging(crawler_settings(SC_LOG_JSON=True), prefix="SC_") is True
    logging.getLogger(f"{logger_name}.library").warning("from %s", "a library")
    (line,) = output_lines(capsys)
    record = json.loads(line)
    assert {key: record[key] for key in ("message", "logger", "level", "component", "event")} == {
        "message": "from a library", "logger": f"{logger_name}.library", "level": "WARNING",
        "component": "crawler", "event": "from %s"}


def test_root_logging_without_log_json_leaves_the_root_logger_alone(
        root_logger: logging.Logger) -> None:
    handlers, level = list(root_logger.handlers), root_logger.level
    assert configure_root_logging(crawler_settings(), prefix="SC_") is False
    assert (root_logger.handlers, root_logger.level) == (handlers, level)


def test_root_logging_again_replaces_its_handler(
        root_logger: logging.Logger, logger_name: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    configure_root_logging(crawler_settings(SC_LOG_JSON=True), prefix="SC_")
    configure_root_logging(crawler_settings(SC_LOG_JSON=True), prefix="SC_")
    logging.getLogger(logger_name).warning("once")
    assert [json.loads(line)["message"] for line in output_lines(capsys)] == ["once"]


def test_root_handler_filters_a_library_logger_set_below_log_level(
        root_logger: logging.Logger, logger_name: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Scrapy sets its ``scrapy`` logger to DEBUG: SC_LOG_LEVEL still decides."""
    configure_root_logging(crawler_settings(SC_LOG_JSON=True, SC_LOG_LEVEL="INFO"), prefix="SC_")
    chatty = logging.getLogger(f"{logger_name}.chatty")
    chatty.setLevel(logging.DEBUG)
    chatty.debug("noise")
    chatty.info("news")
    assert [json.loads(line)["message"] for line in output_lines(capsys)] == ["news"]


def test_root_records_go_to_log_dir_and_log_file_without_log_stdout(
        root_logger: logging.Logger, logger_name: str, tmp_path: Path) -> None:
    configure_root_logging(crawler_settings(SC_LOG_JSON=True, SC_LOG_STDOUT=False,
                                            SC_LOG_DIR=str(tmp_path), SC_LOG_FILE="crawler.log"),
                           prefix="SC_")
    logging.getLogger(logger_name).warning("to disk")
    lines = (tmp_path / "crawler.log").read_text().splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["to disk"]


# --- callbacks --------------------------------------------------------------------


def fired_levels(logger_name: str, expression: str, logger_level: str = "DEBUG") -> list[str]:
    logger = logging.getLogger(logger_name)
    logger.setLevel(logger_level)
    logger.propagate = False
    handler = LogCallbackHandler()
    logger.addHandler(handler)
    fired: list[str] = []
    handler.add_callback(expression, lambda message, extras: fired.append(message))
    for level in LEVELS:
        logger.log(logging.getLevelNamesMapping()[level], level)
    return fired


@pytest.mark.parametrize(("expression", "expected"), [
    ("INFO", ["INFO"]),
    ("WARN", ["WARNING"]),
    ("<=INFO", ["DEBUG", "INFO"]),
    ("<INFO", ["DEBUG"]),
    (">DEBUG", ["INFO", "WARNING", "ERROR", "CRITICAL"]),
    (">=WARNING", ["WARNING", "ERROR", "CRITICAL"]),
    ("<=critical", LEVELS),
    ("*", LEVELS),
])
def test_level_expression_fires_for_exactly_its_levels(
        logger_name: str, expression: str, expected: list[str]) -> None:
    assert fired_levels(logger_name, expression) == expected


def test_callback_does_not_fire_for_records_below_the_logger_level(logger_name: str) -> None:
    assert fired_levels(logger_name, "*", logger_level="ERROR") == ["ERROR", "CRITICAL"]


def test_callback_receives_message_and_extras(logger_name: str) -> None:
    logger = logging.getLogger(logger_name)
    handler = LogCallbackHandler()
    logger.addHandler(handler)
    calls: list[tuple[str, dict[str, Any]]] = []
    handler.add_callback("ERROR", lambda message, extras: calls.append((message, extras)))
    logger.error("lost %d pages", 3, extra={"crawlid": "c1"})
    assert calls == [("lost 3 pages", {"crawlid": "c1"})]


@pytest.mark.parametrize(("extras", "fires"), [
    ({"key": "value", "other": 2}, True),
    ({"key": "value"}, True),
    ({"key": "different"}, False),
    ({"other": 2}, False),
    ({}, False),
])
def test_callback_fires_only_when_criteria_is_a_subset_of_extras(
        logger_name: str, extras: dict[str, Any], fires: bool) -> None:
    logger = logging.getLogger(logger_name)
    logger.setLevel("DEBUG")
    handler = LogCallbackHandler()
    logger.addHandler(handler)
    fired: list[str] = []
    handler.add_callback("*", lambda message, _: fired.append(message), {"key": "value"})
    logger.warning("event", extra=extras)
    assert fired == (["event"] if fires else [])


def test_failing_callback_does_not_stop_the_next_one(
        logger_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    logger = logging.getLogger(logger_name)
    handler = LogCallbackHandler()
    logger.addHandler(handler)
    fired: list[str] = []

    def broken(message: str, extras: dict[str, Any]) -> None:
        raise RuntimeError("callback bug")

    handler.add_callback("*", broken)
    handler.add_callback("*", lambda message, _: fired.append(message))
    logger.warning("still delivered")
    assert fired == ["still delivered"]
    assert "RuntimeError: callback bug" in capsys.readouterr().err


@pytest.mark.parametrize("expression", ["", "=>INFO", "LOUD", "<=", "**", "INFO,DEBUG"])
def test_bad_level_expression_is_rejected(expression: str) -> None:
    with pytest.raises(InvalidLevelExpressionError, match="bad level expression"):
        LogCallbackHandler().add_callback(expression, lambda message, extras: None)
