"""``scrapy-cluster crawler``: run one crawler process (several cooperate through Redis)."""

from __future__ import annotations

import click

from scrapy_cluster.cli.context import CliContext, pass_cli_context
from scrapy_cluster.errors import SchemaVersionError, SettingsError


@click.command("crawler")
@click.option("--spider", metavar="NAME", help="link, wandering or package.module:Class "
              "(CRAWLER_SPIDER).")
@click.option("--settings", "settings_file", metavar="FILE",
              help="localsettings.py for this crawler (wins over the global --settings).")
@click.option("--concurrency", type=click.IntRange(min=1), metavar="N",
              help="Requests downloaded at once (CRAWLER_CONCURRENCY).")
@click.option("--engine", type=click.Choice(["scrapy", "fast"]),
              help="scrapy (any spider) or fast (asyncio; the link and wandering spiders) "
              "(CRAWLER_ENGINE).")
@pass_cli_context
def crawler(cli: CliContext, spider: str | None, settings_file: str | None,
            concurrency: int | None, engine: str | None) -> None:
    """Run a crawler: Scrapy spiders on the shared frontier, results to the bus."""
    from scrapy_cluster.crawler.runner import run_crawler

    if settings_file:
        cli = CliContext(settings_file=settings_file, overrides=cli.overrides)
    settings = cli.settings("crawler", CRAWLER_SPIDER=spider, CRAWLER_CONCURRENCY=concurrency,
                            CRAWLER_ENGINE=engine)
    try:
        run_crawler(settings)
    except (SettingsError, SchemaVersionError) as exc:
        raise click.ClickException(str(exc)) from exc


def register(group: click.Group) -> None:
    group.add_command(crawler)
