"""``scrapy-cluster migrate``: import an original 1.2/1.3 deployment's Redis state, and upgrade
our own key layout. The logic is in ``scrapy_cluster.migration``; this only wires it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from scrapy_cluster.cli.context import CliContext, pass_cli_context
from scrapy_cluster.errors import ScrapyClusterError

if TYPE_CHECKING:
    import redis

    from scrapy_cluster.domain_config import DomainDocument
    from scrapy_cluster.migration.dupefilters import SeenUrls
    from scrapy_cluster.migration.queues import ApiValidator
    from scrapy_cluster.settings import Settings


@click.command("migrate")
@click.option("--from", "source_url", required=True, metavar="URL",
              help="Redis of the original deployment (redis://host:port/db).")
@click.option("--to", "target_url", metavar="URL",
              help="Redis to write our layout to (default: the --from Redis, in place).")
@click.option("--dry-run", is_flag=True, help="Read and check everything, write nothing.")
@click.option("--seen-urls", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="URLs the original crawls already fetched (one per line, or JSON lines "
                   "with url and crawlid): they are not fetched again.")
@click.option("--domain-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The original's domain throttle/blacklist YAML, merged into ours.")
@click.option("--zookeeper", "zookeeper_hosts", metavar="HOSTS",
              help="Read that YAML from the original's ZooKeeper node instead "
                   "(ZOOKEEPER_ASSIGN_PATH + ZOOKEEPER_ID).")
@click.option("--batch-size", type=click.IntRange(min=1), help="MIGRATE_BATCH_SIZE")
@pass_cli_context
def migrate(cli: CliContext, source_url: str, target_url: str | None, dry_run: bool,
            seen_urls: Path | None, domain_config: Path | None, zookeeper_hosts: str | None,
            batch_size: int | None) -> None:
    """Import an original Scrapy Cluster 1.2/1.3 Redis; stamp/upgrade our key layout.

    Safe to run again: a finished run is a no-op, an interrupted one resumes. Stop the
    original cluster first (docs/migration.md)."""
    if domain_config and zookeeper_hosts:
        raise click.UsageError("give --domain-config or --zookeeper, not both")
    settings = cli.settings("kafka-monitor", MIGRATE_BATCH_SIZE=batch_size)
    try:
        summary = _run(settings, source_url, target_url, dry_run, seen_urls, domain_config,
                       zookeeper_hosts)
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    for line in summary.lines():
        click.echo(line)


def _run(settings: Settings, source_url: str, target_url: str | None, dry_run: bool,
         seen_urls: Path | None, domain_config: Path | None,
         zookeeper_hosts: str | None) -> Any:
    from scrapy_cluster.frontier.calls import FrontierCalls, FrontierPolicy
    from scrapy_cluster.frontier.codec import DomainExtractor
    from scrapy_cluster.migration.runner import Migration, MigrationOptions, MigrationParts

    same = target_url is None or target_url == source_url
    options = MigrationOptions(dry_run=dry_run, batch_size=int(settings["MIGRATE_BATCH_SIZE"]),
                               pause_s=float(settings["MIGRATE_BATCH_PAUSE_S"]),
                               dupefilter_ttl_ms=int(float(settings["DUPEFILTER_TIMEOUT"]) * 1000))
    with ExitStack() as stack:
        source = stack.enter_context(_client(settings, source_url))
        target = source if same else stack.enter_context(_client(settings, str(target_url)))
        document = _legacy_document(settings, domain_config, zookeeper_hosts)
        store = None
        if document is not None:
            from scrapy_cluster.domain_config import open_store

            store = open_store(settings, target)
            stack.callback(store.close)
        parts = MigrationParts(
            calls=FrontierCalls(FrontierPolicy.from_settings(settings), DomainExtractor()),
            validate=_crawl_validator(settings), seen=_seen_urls(seen_urls),
            domain_document=document, domain_store=store)
        migration = Migration(source, target, parts, same=same, source_name=_name(source),
                              options=options)
        bars = stack.enter_context(_progress_bars())
        return migration.run(bars)


@contextmanager
def _client(settings: Settings, url: str) -> Iterator[redis.Redis]:
    from scrapy_cluster.redis_conn import RedisConfig

    config = RedisConfig(url=url, socket_timeout_s=float(settings["REDIS_SOCKET_TIMEOUT"]))
    client = config.sync_client()
    try:
        yield client
    finally:
        client.close()


def _name(client: redis.Redis) -> str:
    """``host:port/db`` of a client (no password), naming the source in the journal."""
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host', kwargs.get('path', '?'))}:{kwargs.get('port', '')}/" \
           f"{kwargs.get('db', 0)}"


@contextmanager
def _progress_bars() -> Iterator[Any]:
    from tqdm import tqdm

    bars: list[Any] = []

    def open_bar(total: int) -> Any:
        bar = tqdm(total=total, unit="req", desc="queues", leave=False)
        bars.append(bar)
        return bar.update

    try:
        yield open_bar
    finally:
        for bar in bars:
            bar.close()


def _crawl_validator(settings: Settings) -> ApiValidator:
    """Our crawl schema (the Kafka Monitor's crawl plugins) as a function returning why a
    request's crawl-API fields are refused, or None."""
    from scrapy_cluster.api.validation import Accepted
    from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes
    from scrapy_cluster.kafka_monitor.plugins import ScraperHandler

    classes = plugin_classes(settings)
    crawl_plugins = {cls.__name__ for cls in classes if issubclass(cls, ScraperHandler)}
    validator = build_validator(classes, settings)

    def validate(fields: dict[str, Any]) -> str | None:
        result = validator.match(fields)
        if isinstance(result, Accepted):
            return None if result.plugin in crawl_plugins else \
                f"matches the {result.plugin} schema, not a crawl request"
        return result.reason

    return validate


def _seen_urls(path: Path | None) -> SeenUrls | None:
    if path is None:
        return None
    from scrapy_cluster.migration.dupefilters import SeenUrls

    with path.open("rb") as lines:
        seen, errors = SeenUrls.parse(lines)
    for error in errors[:10]:
        click.echo(f"--seen-urls {path}: {error} (line ignored)", err=True)
    return seen


def _legacy_document(settings: Settings, path: Path | None,
                     zookeeper_hosts: str | None) -> DomainDocument | None:
    from scrapy_cluster.domain_config import DomainDocument, frontier_domain

    if path is not None:
        return DomainDocument.from_yaml(path.read_text("utf-8"), frontier_domain())
    if zookeeper_hosts is None:
        return None
    from scrapy_cluster.domain_config.zookeeper_store import ZookeeperDomainConfigStore

    store = ZookeeperDomainConfigStore.from_settings(
        {**settings, "ZOOKEEPER_HOSTS": zookeeper_hosts}, frontier_domain())
    try:
        return store.read().document
    finally:
        store.close()


def register(group: click.Group) -> None:
    group.add_command(migrate)
