"""The embedded Redis server keeps data across restarts; the supervisor restarts and stops children,
writes each child's output to its log file and shows a person only events and errors; the
progress reader counts the crawlers' pages and errors and the frontier's backlog."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.embedded import (
    ChildSpec,
    ComponentLogs,
    Console,
    EmbeddedRedis,
    ErrorEcho,
    Supervisor,
)
from scrapy_cluster.embedded.progress import ProgressLoop, ProgressPolicy, progress_text
from scrapy_cluster.frontier.sync import Frontier
from scrapy_cluster.settings import load_settings
from scrapy_cluster.stats.progress import ProgressRate, ProgressReader, ProgressReading
from scrapy_cluster.stats.windowed import WindowedStats

pytestmark = pytest.mark.integration

TICKER = [sys.executable, "-c",
          "import time, os\nprint('hello from', os.getpid(), flush=True)\n"
          "while True: time.sleep(0.05)"]
EVENT = re.compile(r"^\d\d:\d\d:\d\d  (\S+)\s+(.*)$")
CRASHING = [sys.executable, "-c",
            "import logging, sys\n"
            "logging.basicConfig(format='%(asctime)s [%(name)s] %(levelname)s: %(message)s')\n"
            "print('starting up', flush=True)\n"
            "logging.getLogger('worker').error('cannot reach the database')\n"
            "def load():\n    raise ValueError('bad config line 3')\n"
            "load()"]


def events(lines: list[str]) -> list[tuple[str, str]]:
    """``(verb, text)`` of each terminal event line."""
    return [(m.group(1), m.group(2)) for m in map(EVENT.match, lines) if m]


def wait_until(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_embedded_redis_keeps_data_and_port_across_restart(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "data")
    url = server.start()
    client = redis.Redis.from_url(url)
    client.rpush("backlog", "a", "b")
    client.close()
    server.stop()
    again = EmbeddedRedis(tmp_path / "data")
    assert again.start() == url
    client = redis.Redis.from_url(url)
    assert client.lrange("backlog", 0, -1) == [b"a", b"b"]
    assert client.info("server")["redis_version"].startswith("6.2")
    client.close()
    again.stop()


def test_verbose_console_prefixes_child_output(tmp_path: Path) -> None:
    lines: list[str] = []
    supervisor = Supervisor([ChildSpec("ticker", TICKER)], output=Console(lines.append,
                                                                         verbose=True))
    supervisor.start()
    try:
        assert wait_until(lambda: any(line.startswith("[ticker] hello from") for line in lines))
    finally:
        supervisor.stop()


def test_quiet_console_shows_events_and_writes_child_output_to_its_file(tmp_path: Path) -> None:
    lines: list[str] = []
    logs = ComponentLogs(tmp_path / "logs")
    supervisor = Supervisor([ChildSpec("ticker", TICKER)], output=Console(lines.append, logs=logs))
    supervisor.start()
    pid = supervisor.pids()["ticker"]
    try:
        assert wait_until(lambda: "hello from" in logs.path("ticker").read_text())
    finally:
        supervisor.stop()
        logs.close()
    assert events(lines) == [("started", f"ticker (pid {pid})"),
                             ("stopped", f"ticker (exit code {-signal.SIGTERM})")]
    assert len(events(lines)) == len(lines)
    text = logs.path("ticker").read_text()
    assert f"up: started ticker (pid {pid})" in text.splitlines()[0]
    assert f"hello from {pid}" in text


def test_a_crashing_child_shows_its_error_and_its_traceback_in_one_line_each(
        tmp_path: Path) -> None:
    lines: list[str] = []
    logs = ComponentLogs(tmp_path / "logs")
    supervisor = Supervisor([ChildSpec("worker", CRASHING)], output=Console(lines.append,
                                                                          logs=logs),
                            backoff_initial_s=60)
    supervisor.start()

    def restarted() -> bool:
        supervisor.check_once()
        return supervisor.restarts()["worker"] == 1

    try:
        assert wait_until(restarted)
    finally:
        supervisor.stop()
        logs.close()
    shown = events(lines)
    assert [verb for verb, _ in shown] == ["started", "error", "error", "restart"]
    assert shown[1][1].startswith("[worker] ") and shown[1][1].endswith(
        "[worker] ERROR: cannot reach the database")
    assert shown[2][1] == "[worker] Traceback: ValueError: bad config line 3"
    assert shown[3][1].startswith("worker exited with code 1 (ValueError: bad config line 3); "
                                  "restarting in 30.0s")
    text = logs.path("worker").read_text()
    assert "starting up" in text and "line 6, in load" in text
    assert not any("starting up" in line for line in lines)


def test_a_restarted_child_appends_to_its_log_file(tmp_path: Path) -> None:
    logs = ComponentLogs(tmp_path / "logs")
    supervisor = Supervisor([ChildSpec("a", TICKER)], output=Console(lambda _: None, logs=logs),
                            backoff_initial_s=0.1)
    supervisor.start()
    runner = threading.Thread(target=supervisor.run, daemon=True)
    runner.start()
    first_pid = supervisor.pids()["a"]
    try:
        assert wait_until(lambda: "hello from" in logs.path("a").read_text())
        os.kill(first_pid, signal.SIGKILL)
        assert wait_until(lambda: supervisor.pids().get("a") not in (None, first_pid))
        second_pid = supervisor.pids()["a"]
        assert wait_until(lambda: f"hello from {second_pid}" in logs.path("a").read_text())
    finally:
        supervisor.stop()
        runner.join(5)
        logs.close()
    text = logs.path("a").read_text()
    assert text.index(f"hello from {first_pid}") < text.index("a exited with code -9") \
        < text.index(f"hello from {second_pid}")


def test_component_logs_roll_over_at_their_size_cap(tmp_path: Path) -> None:
    logs = ComponentLogs(tmp_path, max_bytes=1000, backups=2)
    for i in range(100):
        logs.write("crawler-1", f"line {i:03d} " + "x" * 40)
    logs.close()
    files = sorted(path.name for path in tmp_path.iterdir())
    assert files == ["crawler-1.log", "crawler-1.log.1", "crawler-1.log.2"]
    assert all(path.stat().st_size <= 1000 for path in tmp_path.iterdir())
    assert logs.path("crawler-1").read_text().splitlines()[-1].startswith("line 099 ")


def test_error_echo_picks_errors_and_the_last_line_of_tracebacks() -> None:
    echo = ErrorEcho()
    output = [
        "2024-05-01 18:02:17 [scrapy.core.engine] INFO: Spider opened",
        "2024-05-01 18:02:17 [scrapy.core.scraper] ERROR: Spider error processing <GET x>",
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in <module>',
        "--- <exception caught here> ---",
        '  File "b.py", line 2, in f',
        "KeyError: 'x'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "c.py", line 3, in g',
        "RuntimeError: wrapped",
        '{"message": "lost", "level": "CRITICAL", "logger": "rest-service"}',
        "ERROR:    Exception in ASGI application",
        "Error: spider 'nosuch': expected link, wandering or package.module:Class",
        "2024-05-01 18:02:18 [sc-crawler] WARNING: public IP lookup failed",
        "an INFO line mentioning ERRORS is not an error",
    ]
    picked = [shown for line in output if (shown := echo.pick("c", line)) is not None]
    assert picked == [output[1], "Traceback: KeyError: 'x'", "Traceback: RuntimeError: wrapped",
                      output[13], output[14], output[15]]


def test_error_echo_caps_the_lines_of_one_component_per_window() -> None:
    now = [0.0]
    echo = ErrorEcho(per_window=2, window_s=10, clock=lambda: now[0])
    first = [echo.pick("crawler-1", f"x ERROR: failure {i}") for i in range(5)]
    other = echo.pick("crawler-2", "x ERROR: elsewhere")
    now[0] = 10.0
    later = echo.pick("crawler-1", "x ERROR: failure 5")
    assert first == ["x ERROR: failure 0", "x ERROR: failure 1",
                     "more errors of crawler-1 in the next 10s are only in its log", None, None]
    assert (other, later) == ("x ERROR: elsewhere", "x ERROR: failure 5")


def test_supervisor_restarts_a_killed_child(tmp_path: Path) -> None:
    lines: list[str] = []
    supervisor = Supervisor([ChildSpec("a", TICKER), ChildSpec("b", TICKER)],
                            output=Console(lines.append), backoff_initial_s=0.1)
    supervisor.start()
    runner = threading.Thread(target=supervisor.run, daemon=True)
    runner.start()
    try:
        first_pid = supervisor.pids()["a"]
        os.kill(first_pid, signal.SIGKILL)
        assert wait_until(lambda: supervisor.pids().get("a") not in (None, first_pid))
        assert supervisor.restarts() == {"a": 1, "b": 0}
        assert any("a exited with code -9" in line for line in lines)
    finally:
        supervisor.stop()
        runner.join(5)


def test_supervisor_stop_terminates_every_child() -> None:
    stubborn = [sys.executable, "-c",
                "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "print('ready', flush=True)\nwhile True: time.sleep(0.05)"]
    lines: list[str] = []
    supervisor = Supervisor([ChildSpec("polite", TICKER), ChildSpec("stubborn", stubborn)],
                            output=Console(lines.append, verbose=True))
    supervisor.start()
    assert wait_until(lambda: "[stubborn] ready" in lines)
    codes = supervisor.stop(timeout_s=1.0)
    assert codes == {"polite": -signal.SIGTERM, "stubborn": -signal.SIGKILL}
    assert supervisor.pids() == {}
    assert [event for event in events(lines) if event[0] in ("killed", "stopped")] == [
        ("stopped", f"polite (exit code {-signal.SIGTERM})"),
        ("killed", "stubborn did not stop in 1s"),
        ("stopped", f"stubborn (exit code {-signal.SIGKILL})")]


def test_commands_next_to_a_running_cluster_find_its_redis(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy_cluster.settings import load_settings
    from scrapy_cluster.settings.running_cluster import clear_running_cluster, write_running_cluster

    monkeypatch.setenv("SC_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("BUS_BACKEND", raising=False)
    monkeypatch.chdir(tmp_path)
    write_running_cluster(tmp_path, {"REDIS_URL": "redis://127.0.0.1:7/0", "BUS_BACKEND": "redis"})
    settings = load_settings()
    assert settings["REDIS_URL"] == "redis://127.0.0.1:7/0"
    assert settings.source("BUS_BACKEND") == f"running cluster ({tmp_path})"
    assert load_settings(overrides={"REDIS_URL": "redis://other:1/0"})["REDIS_URL"] == \
        "redis://other:1/0"
    clear_running_cluster(tmp_path)
    assert load_settings()["REDIS_URL"] is None


def test_a_dead_cluster_file_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy_cluster.settings.running_cluster import CLUSTER_FILE, read_running_cluster

    (tmp_path / CLUSTER_FILE).write_text('{"pid": 999999999, "settings": {"REDIS_URL": "x"}}')
    assert read_running_cluster(tmp_path) == {}


def test_progress_reader_sums_pages_errors_and_backlog_over_crawlers(
        redis_client: redis.Redis) -> None:
    from scrapy_cluster.crawler.common.response_stats import ResponseStats
    from scrapy_cluster.crawler.common.telemetry import FetchTelemetry

    settings = load_settings(environ={}, overrides={"STATUS_RESPONSE_CODES": [200, 404, 403,
                                                                              504, 0]})
    telemetry = FetchTelemetry.from_settings(settings, redis_client)
    seen = {"node-a": [200, 200, 200, 404, 403, 500], "node-b": [200, 200, 504, 0]}
    for host, statuses in seen.items():
        stats = ResponseStats.from_settings(settings, redis_client, hostname=host,
                                            spiderid="link", writers=[telemetry])
        for status in statuses:
            stats.record("a.com", status)
        if 0 in statuses:
            telemetry.failure("a.com", "http://a.com/x", ConnectionRefusedError())
        stats.flush()
    Frontier.from_settings(settings, redis_client).enqueue_many(
        [{"url": f"http://b.com/{i}", "appid": "app", "crawlid": "c1", "spiderid": "link"}
         for i in range(3)])
    reading = ProgressReader.from_settings(settings, redis_client).read()
    # 500 is not a tracked status; 0 is a failed download, counted once as an error
    assert (reading.pages, reading.errors, reading.backlog) == (8, 3, 3)


def test_progress_reader_reads_an_empty_cluster_as_zeros(redis_client: redis.Redis) -> None:
    reading = ProgressReader.from_settings(load_settings(environ={}), redis_client).read()
    assert (reading.pages, reading.errors, reading.backlog) == (0, 0, 0)
    assert not redis_client.exists(keys.crawler_stats_sources())


def test_progress_rate_is_pages_per_second_over_its_window() -> None:
    rate = ProgressRate(window_s=10)
    readings = [ProgressReading(at_s, pages, 0, 0) for at_s, pages in
                [(0, 0), (5, 0), (10, 100), (15, 100)]]
    assert [rate.add(reading) for reading in readings] == [None, 0.0, 10.0, 10.0]


def test_progress_text_is_one_short_line() -> None:
    reading = ProgressReading(0.0, pages=12_345, errors=3, backlog=1_204)
    assert progress_text(reading, 41.25, (2, 2)) == \
        "12,345 pages (41.2/s)  backlog 1,204  errors 3  crawlers 2/2"
    assert progress_text(reading, None, (1, 2)).startswith("12,345 pages (-/s)  ")


class Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def event(self, verb: str, text: str, *, component: str | None = None) -> None:
        self.lines.append((verb, text))


def test_progress_loop_prints_a_line_only_when_it_changed(redis_client: redis.Redis) -> None:
    output = Events()
    loop = ProgressLoop(ProgressReader.from_settings(load_settings(environ={}), redis_client),
                        output, ProgressPolicy(interval_s=5), crawlers=lambda: (1, 1))
    for _ in range(3):
        loop.report_once()
    assert output.lines == [("progress", "0 pages (-/s)  backlog 0  errors 0  crawlers 1/1"),
                            ("progress", "0 pages (0.0/s)  backlog 0  errors 0  crawlers 1/1")]


def test_progress_loop_says_once_that_redis_does_not_answer() -> None:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from tests.support.services import free_port

    output = Events()
    client = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    loop = ProgressLoop(ProgressReader.from_settings(load_settings(environ={}), client), output,
                        ProgressPolicy(interval_s=5), crawlers=lambda: (0, 1))
    loop.report_once()
    loop.report_once()
    client.close()
    assert [(verb, text.split(":")[0]) for verb, text in output.lines] == [
        ("progress", "unavailable")]


def test_windowed_stats_names_are_what_the_progress_reader_lists(
        redis_client: redis.Redis) -> None:
    """The reader finds a crawler's statuses through the names index, not by scanning."""
    prefix = keys.stats_key("crawler", "node-a", "link")
    WindowedStats(redis_client, key_prefix=prefix, windows_s=[900]).increment("200", amount=4)
    redis_client.sadd(keys.crawler_stats_sources(), "node-a:link")
    reading = ProgressReader.from_settings(load_settings(environ={}), redis_client).read()
    assert reading.pages == 4


def test_embedded_redis_takes_its_port_again_while_old_connections_wait_in_time_wait(
        tmp_path: Path) -> None:
    """A client connected when the server stops leaves the server's side in TIME_WAIT; the
    next start must still get the remembered port (clients left running reconnect there)."""
    server = EmbeddedRedis(tmp_path / "data")
    url = server.start()
    client = redis.Redis.from_url(url)
    client.ping()
    server.stop()
    again = EmbeddedRedis(tmp_path / "data")
    try:
        assert again.start() == url
        assert client.ping()
    finally:
        client.close()
        again.stop()


def test_a_child_exiting_with_an_error_code_has_its_last_line_in_the_restart_event() -> None:
    lines: list[str] = []
    bind_failure = [sys.executable, "-c",
                    "import sys\nprint('[Errno 98] error while attempting to bind on address "
                    "(\\'127.0.0.1\\', 5343): address already in use', flush=True)\nsys.exit(3)"]
    supervisor = Supervisor([ChildSpec("rest", bind_failure)], output=Console(lines.append),
                            backoff_initial_s=60)
    supervisor.start()

    def restarted() -> bool:
        supervisor.check_once()
        return supervisor.restarts()["rest"] == 1

    try:
        assert wait_until(restarted)
    finally:
        supervisor.stop()
    [restart] = [text for verb, text in events(lines) if verb == "restart"]
    assert restart.startswith("rest exited with code 3 ([Errno 98] error while attempting to "
                              "bind on address ('127.0.0.1', 5343): address already in use); "
                              "restarting in 30.0s")


def test_up_upgrades_the_layout_an_older_release_left_in_its_own_redis(tmp_path: Path) -> None:
    from contextlib import ExitStack

    from scrapy_cluster.cli import up_cmd
    from scrapy_cluster.layout import SCHEMA_VERSION

    server = EmbeddedRedis(tmp_path / "data")
    url = server.start()
    client = redis.Redis.from_url(url)
    client.set(keys.schema_version(), 1)
    client.close()
    server.stop()
    settings = load_settings("crawler", environ={}, settings_file=None,
                             overrides={"REDIS_URL": "", "SC_DATA_DIR": str(tmp_path / "data")})
    with ExitStack() as stack:
        assert up_cmd._redis(stack, settings, tmp_path / "data") == url
        client = redis.Redis.from_url(url)
        assert client.get(keys.schema_version()) == str(SCHEMA_VERSION).encode()
        client.close()
