"""``scrapy-cluster redis-monitor``: answer info / stop / stats / domain requests until stopped."""

from __future__ import annotations

import click

from scrapy_cluster.cli.context import CliContext, pass_cli_context


@click.command("redis-monitor")
@pass_cli_context
def redis_monitor_command(cli: CliContext) -> None:
    """Serve the Redis Monitor's jobs, expire crawls and run the circuit breaker until
    SIGINT/SIGTERM (the batch in hand is answered first)."""
    from scrapy_cluster.cli.serving import serve
    from scrapy_cluster.redis_monitor.app import open_monitor

    serve(cli.settings("redis-monitor"), open_monitor, "Redis Monitor")


def register(group: click.Group) -> None:
    group.add_command(redis_monitor_command)
