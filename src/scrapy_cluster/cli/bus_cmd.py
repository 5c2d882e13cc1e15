"""``scrapy-cluster dump`` and ``scrapy-cluster list-topics``: look at the bus, on either backend.

``dump`` reads outside any consumer group, so it never takes messages away
from the cluster's components and never moves their positions. A ``dump`` that found its
cluster through a running ``up`` (SC_DATA_DIR/cluster.json) follows it: when the bus stops
answering it reads cluster.json again and, if ``up`` was restarted on another address, goes on
reading there (from the end). With no cluster found and none configured both commands stop at
once with one line (exit 2).
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

from scrapy_cluster.cli.context import CliContext, pass_cli_context, require_cluster
from scrapy_cluster.errors import BusError, BusUnavailableError, ScrapyClusterError
from scrapy_cluster.settings.running_cluster import RUNNING_CLUSTER_SOURCE

if TYPE_CHECKING:
    from scrapy_cluster.bus import Message, MessageBus
    from scrapy_cluster.settings import Settings

_POLL_S = 0.5
_RETRY_PAUSE_S = 1.0
_FOLLOWED = ("REDIS_URL", "BUS_BACKEND", "KAFKA_HOSTS")


@contextmanager
def _open_bus(cli: CliContext) -> Iterator[MessageBus]:
    from scrapy_cluster.bus import create_bus

    settings = cli.settings()
    require_cluster(settings)
    try:
        bus = create_bus(settings)
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        yield bus
    except BusError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        bus.close()


class ClusterReader:
    """``dump``'s reader; when its settings came from a running ``up`` it follows that ``up``
    across restarts (see the module docstring). ``poll`` raises BusUnavailableError while the
    bus is away and no other address was found."""

    def __init__(self, cli: CliContext, topic_names: Sequence[str], *,
                 from_beginning: bool) -> None:
        from scrapy_cluster.bus import create_bus

        self._cli = cli
        self._topic_names = list(topic_names)
        self.settings = cli.settings()
        require_cluster(self.settings)
        self.bus = create_bus(self.settings)
        try:
            self.reader = self.bus.reader(self._topic_names, from_beginning=from_beginning)
        except BaseException:
            self.bus.close()
            raise

    def poll(self, max_messages: int, timeout_s: float) -> list[Message]:
        try:
            return self.reader.poll(max_messages=max_messages, timeout_s=timeout_s)
        except BusUnavailableError:
            if not self._follow():
                raise
            return []

    def _follow(self) -> bool:
        """Reopen on the address a restarted ``up`` now has; False when there is none."""
        from scrapy_cluster.bus import create_bus

        if not self.settings.source("REDIS_URL").startswith(RUNNING_CLUSTER_SOURCE):
            return False
        fresh = self._cli.settings()
        if not _moved(self.settings, fresh):
            return False
        bus = create_bus(fresh)
        try:
            reader = bus.reader(self._topic_names, from_beginning=False)
        except BusError:
            bus.close()
            return False
        self.close()
        self.settings, self.bus, self.reader = fresh, bus, reader
        click.echo(f"the cluster moved to {_address(fresh)}; reading there from the end",
                   err=True)
        return True

    def close(self) -> None:
        self.reader.close()
        self.bus.close()


def _moved(current: Settings, fresh: Settings) -> bool:
    """True when ``fresh`` names a running ``up`` at another address than ``current``."""
    return fresh.source("REDIS_URL").startswith(RUNNING_CLUSTER_SOURCE) and any(
        current[name] != fresh[name] for name in _FOLLOWED)


def _address(settings: Settings) -> str:
    from scrapy_cluster.settings.masking import mask_url

    if settings["BUS_BACKEND"] == "kafka":
        return f"Kafka {settings['KAFKA_HOSTS']}"
    return mask_url(str(settings["REDIS_URL"]))


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


def _dump(reader: ClusterReader, *, pretty: bool, max_messages: int | None,
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
    try:
        reader = ClusterReader(cli, topic_names, from_beginning=from_beginning)
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    with _sigterm_as_interrupt():
        start = "the beginning" if from_beginning else "the end"
        click.echo(f"dumping {', '.join(topic_names)} from {start}; Ctrl-C to stop", err=True)
        try:
            _dump(reader, pretty=pretty, max_messages=max_messages,
                  idle_timeout_s=idle_timeout_s)
        except KeyboardInterrupt:
            pass
        except BusError as exc:
            raise click.ClickException(str(exc)) from exc
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
