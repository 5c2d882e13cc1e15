"""``scrapy-cluster dump`` and ``scrapy-cluster list-topics``: look at the bus, on either backend.

``dump`` reads outside any consumer group, so it never takes messages away
from the cluster's components and never moves their positions.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

import click
import orjson

from scrapy_cluster.cli.context import CliContext, pass_cli_context
from scrapy_cluster.errors import BusError, BusUnavailableError, ScrapyClusterError

if TYPE_CHECKING:
    from scrapy_cluster.bus import Consumer, Message, MessageBus

_POLL_S = 0.5
_RETRY_PAUSE_S = 1.0


@contextmanager
def _open_bus(cli: CliContext) -> Iterator[MessageBus]:
    from scrapy_cluster.bus import create_bus

    try:
        bus = create_bus(cli.settings())
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        yield bus
    except BusError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        bus.close()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Let SIGTERM end ``dump`` the way Ctrl-C does (signals are the main thread's)."""
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def format_message(message: Message, *, pretty: bool) -> str:
    """The message as its JSON text (re-indented with ``pretty``); undecodable bytes shown as-is."""
    if message.value is None and message.error is not None:
        return message.raw.decode("utf-8", errors="replace")
    if pretty:
        return orjson.dumps(message.value, option=orjson.OPT_INDENT_2).decode()
    return message.raw.decode()


def _dump(reader: Consumer, *, pretty: bool, max_messages: int | None,
          idle_timeout_s: float | None) -> int:
    """Print messages until ``max_messages`` were shown or none came for ``idle_timeout_s``."""
    shown = 0
    last_message_at = time.monotonic()
    while max_messages is None or shown < max_messages:
        wanted = 100 if max_messages is None else min(100, max_messages - shown)
        try:
            batch = reader.poll(max_messages=wanted, timeout_s=_POLL_S)
        except BusUnavailableError as exc:
            click.echo(f"bus unavailable, retrying: {exc}", err=True)
            time.sleep(_RETRY_PAUSE_S)
            batch = []
        for message in batch:
            if message.error:
                click.echo(f"[{message.topic}] {message.error}", err=True)
            click.echo(format_message(message, pretty=pretty))
        shown += len(batch)
        if batch:
            last_message_at = time.monotonic()
        elif idle_timeout_s is not None and time.monotonic() - last_message_at >= idle_timeout_s:
            break
    return shown


@click.command("dump")
@click.option("-t", "--topic", "topic_names", multiple=True, required=True, metavar="TOPIC",
              help="Topic to dump (repeat for several).")
@click.option("-p", "--pretty", is_flag=True, help="Pretty-print each JSON message.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the oldest retained message instead of the end.")
@click.option("--max", "max_messages", type=click.IntRange(min=1), metavar="N",
              help="Stop after N messages.")
@click.option("--timeout", "idle_timeout_s", type=click.FloatRange(min=0), metavar="S",
              help="Stop after S seconds without a message (default: run until Ctrl-C).")
@pass_cli_context
def dump_command(cli: CliContext, topic_names: Sequence[str], pretty: bool,
                 from_beginning: bool, max_messages: int | None,
                 idle_timeout_s: float | None) -> None:
    """Print the messages of a topic as they arrive (kafkadump)."""
    with _open_bus(cli) as bus, _sigterm_as_interrupt():
        reader = bus.reader(list(topic_names), from_beginning=from_beginning)
        start = "the beginning" if from_beginning else "the end"
        click.echo(f"dumping {', '.join(topic_names)} from {start}; Ctrl-C to stop", err=True)
        try:
            _dump(reader, pretty=pretty, max_messages=max_messages,
                  idle_timeout_s=idle_timeout_s)
        except KeyboardInterrupt:
            pass
        finally:
            reader.close()


@click.command("list-topics")
@pass_cli_context
def list_topics_command(cli: CliContext) -> None:
    """List the bus's topics, one per line."""
    with _open_bus(cli) as bus:
        for name in bus.list_topics():
            click.echo(name)


def register(group: click.Group) -> None:
    group.add_command(dump_command)
    group.add_command(list_topics_command)
