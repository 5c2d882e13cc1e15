"""``scrapy-cluster config``: the operators' domain configuration (throttles, blacklist).

``push -f FILE`` validates a YAML document, stores it as the new version (it replaces the
whole configuration) and prints what changed; ``show`` prints the effective document and
its version; ``watch`` prints each new version as it arrives; ``sync`` (ZooKeeper backend)
mirrors the document into the Redis keys the crawlers read. DOMAIN_CONFIG_BACKEND picks
the backend. See docs/operations.md, "Controlling domains".
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from scrapy_cluster.cli.bus_cmd import _sigterm_as_interrupt
from scrapy_cluster.cli.context import CliContext, pass_cli_context
from scrapy_cluster.errors import ScrapyClusterError


@contextmanager
def _opened(cli: CliContext) -> Iterator[tuple[Any, Any]]:
    """The settings' store and Redis client, closed afterwards; errors as click messages."""
    from scrapy_cluster.domain_config import open_store
    from scrapy_cluster.redis_conn import RedisConfig

    settings = cli.settings()
    client = RedisConfig.from_settings(settings).sync_client()
    store = None
    try:
        store = open_store(settings, client)
        yield store, client
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if store is not None:
            store.close()
        client.close()


def _backend(settings: Any) -> str:
    from scrapy_cluster.domain_config import backend_name

    try:
        return backend_name(settings)
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group("config")
def config_group() -> None:
    """The cluster's domain configuration: per-domain throttles and the blacklist."""


@config_group.command("push")
@click.option("-f", "--file", "path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML document: blacklist: [domains], domains: {domain: {window, hits, scale, "
                   "moderated, recrawl}}")
@click.option("--dry-run", is_flag=True, help="Validate and show the changes, store nothing.")
@pass_cli_context
def push_command(cli: CliContext, path: str, dry_run: bool) -> None:
    """Validate FILE and make it the whole domain configuration."""
    from scrapy_cluster.domain_config import DomainDocument, frontier_domain
    from scrapy_cluster.errors import DomainConfigError

    try:
        document = DomainDocument.from_yaml(Path(path).read_text("utf-8"), frontier_domain())
    except DomainConfigError as exc:
        raise click.ClickException(f"{path}: {exc}") from exc
    with _opened(cli) as (store, _client):
        current = store.read()
        changes = current.document.diff(document)
        if dry_run or not changes:
            click.echo("\n".join(changes) or f"no changes; version {current.version}")
            return
        version = store.write(document, expected_version=current.version)
    click.echo("\n".join([*changes, f"version {version}"]))


@config_group.command("show")
@pass_cli_context
def show_command(cli: CliContext) -> None:
    """Print the effective document and its version."""
    with _opened(cli) as (store, _client):
        current = store.read()
    click.echo(f"# version {current.version}\n{current.document.to_yaml()}", nl=False)


@config_group.command("watch")
@click.option("--pointer", is_flag=True,
              help="ZooKeeper only: the node holds the path of the node with the document; "
                   "follow changes of both.")
@pass_cli_context
def watch_command(cli: CliContext, pointer: bool) -> None:
    """Print every new version of the document (with what changed) until Ctrl-C."""
    if pointer:
        _watch_pointer(cli)
        return
    show = _Printer()
    with _opened(cli) as (store, _client), _sigterm_as_interrupt():
        watch = store.watch(lambda versioned: show(f"version {versioned.version}",
                                                    versioned.document))
        _wait_for_interrupt()
        watch.close()


class _Printer:
    """Prints a heading and what changed since the document printed before."""

    def __init__(self) -> None:
        from scrapy_cluster.domain_config import DomainDocument

        self.previous = DomainDocument()

    def __call__(self, heading: str, document: Any) -> None:
        changes = self.previous.diff(document)
        self.previous = document
        click.echo("\n".join([heading, *changes]))


def _wait_for_interrupt() -> None:
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass


def _watch_pointer(cli: CliContext) -> None:
    from scrapy_cluster.domain_config import DomainDocument, frontier_domain
    from scrapy_cluster.domain_config.zookeeper_store import node_path
    from scrapy_cluster.domain_config.zookeeper_watcher import ZookeeperWatcher
    from scrapy_cluster.errors import DomainConfigError

    settings = cli.settings()
    if _backend(settings) != "zookeeper":
        raise click.ClickException("--pointer needs DOMAIN_CONFIG_BACKEND=zookeeper")
    show, normalize = _Printer(), frontier_domain()
    path = node_path(str(settings["ZOOKEEPER_ASSIGN_PATH"]), str(settings["ZOOKEEPER_ID"]))

    def on_config(text: str) -> None:
        try:
            show(f"config named by {path}", DomainDocument.from_yaml(text or "", normalize))
        except DomainConfigError as exc:
            click.echo(f"config named by {path} is invalid, ignored: {exc}")

    try:
        watcher = ZookeeperWatcher(str(settings["ZOOKEEPER_HOSTS"]), path, pointer=True,
                                   config_handler=on_config,
                                   error_handler=lambda message: click.echo(message, err=True))
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    with _sigterm_as_interrupt():
        _wait_for_interrupt()
    watcher.close()


@config_group.command("sync")
@pass_cli_context
def sync_command(cli: CliContext) -> None:
    """Mirror the ZooKeeper document into Redis until stopped (ZooKeeper backend only)."""
    from scrapy_cluster.domain_config.redis_store import RedisDomainConfigStore
    from scrapy_cluster.domain_config.sync import Mirror

    settings = cli.settings()
    if _backend(settings) != "zookeeper":
        raise click.ClickException("config sync is for DOMAIN_CONFIG_BACKEND=zookeeper; with "
                                   "redis the document is applied when it is written")
    with _opened(cli) as (store, client), _sigterm_as_interrupt():
        mirror = Mirror(store, RedisDomainConfigStore.from_settings(settings, client)).start()
        _wait_for_interrupt()
        mirror.close()


def register(group: click.Group) -> None:
    group.add_command(config_group)
