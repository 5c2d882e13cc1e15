"""Producing ``/feed`` requests with group commit.

HTTP handlers hand their request to ``FeedSender.send`` and await it. One thread owns the bus
producer: it takes every request waiting at that moment, produces them all, then waits for the
bus to confirm them with ONE ``flush`` (within KAFKA_FEED_TIMEOUT) and resolves each
handler's future. Under load many requests share a flush, so confirmed delivery costs about
one broker round trip per batch, not per request, and no handler answers before its request is
on the bus.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any

from scrapy_cluster.errors import BusError

MAX_BATCH = 1000


@dataclass
class _Pending:
    topic: str
    value: Any
    key: str | None
    future: asyncio.Future[None]


class FeedSender(threading.Thread):
    """The one producer thread of a Rest process (see module docstring)."""

    def __init__(self, producer: Any, *, timeout_s: float, logger: logging.Logger) -> None:
        super().__init__(name="rest-feed", daemon=True)
        self.producer = producer
        self.timeout_s = timeout_s
        self.logger = logger
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()

    async def send(self, topic: str, value: Any, key: str | None = None) -> None:
        """Produce ``value`` and wait until the bus confirms it; raises ``BusError`` (nothing
        confirmed, the request may or may not arrive later) or ``MessageTooLargeError``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put(_Pending(topic, value, key, future))
        await future

    def stop(self) -> None:
        self._queue.put(None)

    def run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._send(batch)
                    return
                batch.append(item)
            self._send(batch)

    def _send(self, batch: list[_Pending]) -> None:
        produced: list[_Pending] = []
        for item in batch:
            try:
                self.producer.produce(item.topic, item.value, key=item.key)
                produced.append(item)
            except Exception as exc:  # too large, or the buffer is full while the bus is away
                _settle(item.future, exc)
        if not produced:
            return
        try:
            self.producer.flush(self.timeout_s)
        except BusError as exc:
            self.logger.warning("feed not confirmed by the bus: %s", exc,
                                extra={"error": str(exc), "requests": len(produced)})
            _settle_all(produced, exc)
            return
        except Exception as exc:  # never leave a handler waiting
            self.logger.exception("feed flush failed")
            _settle_all(produced, exc)
            return
        _settle_all(produced, None)


def _apply(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    future.get_loop().call_soon_threadsafe(_apply, future, error)


def _settle_all(items: list[_Pending], error: BaseException | None) -> None:
    """One hand-over to each event loop for the whole batch (not one per request)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for item in items:
        by_loop.setdefault(item.future.get_loop(), []).append(item.future)
    for loop, futures in by_loop.items():
        loop.call_soon_threadsafe(_apply_many, futures, error)


def _apply_many(futures: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for future in futures:
        _apply(future, error)
