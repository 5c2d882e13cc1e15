"""``scrapy-cluster demo``: crawl a bundled local site on the embedded cluster and check it."""

from __future__ import annotations

import sys

import click

from scrapy_cluster.cli.context import CliContext, pass_cli_context


@click.command("demo")
@click.option("--crawlers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Crawler processes.")
@click.option("--timeout", "timeout_s", type=float, default=90.0, show_default=True,
              help="Give up after this many seconds.")
@click.option("--no-progress", is_flag=True, help="Do not draw the progress bar.")
@pass_cli_context
def demo_command(cli: CliContext, crawlers: int, timeout_s: float, no_progress: bool) -> None:
    """Crawl a local demo site on the embedded cluster; exit 0 only if the result is exact."""
    from scrapy_cluster.demo.run import DemoOptions, run_demo

    settings = cli.settings("kafka-monitor")
    options = DemoOptions(crawlers=crawlers, timeout_s=timeout_s,
                          show_progress=not no_progress and sys.stderr.isatty())
    sys.exit(run_demo(settings, options, click.echo))


def register(group: click.Group) -> None:
    group.add_command(demo_command)
