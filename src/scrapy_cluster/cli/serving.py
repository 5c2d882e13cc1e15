"""Running a long-lived component from the command line until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import click

from scrapy_cluster.errors import ScrapyClusterError


def serve(settings: Mapping[str, Any],
          opener: Callable[[Mapping[str, Any], logging.Logger], AbstractContextManager[Any]],
          title: str) -> None:
    """Configure logging, open the component and run it until a signal; the work in hand is
    finished first. Errors of ours become a clean ``click`` error."""
    from scrapy_cluster.log import configure_logging, configure_root_logging

    logger = configure_logging(settings)
    configure_root_logging(settings)  # with LOG_JSON, the modules and libraries write JSON too
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        with opener(settings, logger) as component:
            component.run(stop.is_set)
    except ScrapyClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    logger.info("%s stopped", title)
