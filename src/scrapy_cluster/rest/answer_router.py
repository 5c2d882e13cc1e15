"""Matching answers on the outbound topic to the HTTP requests waiting for them.

One reader per process (``AnswerListener``, a thread) reads ``<prefix>.outbound_firehose``
outside any consumer group, so every Rest instance sees every answer. A ``/feed`` request with
a ``uuid`` registers a waiter *before* its request is produced, so an answer can never arrive
unnoticed; the listener resolves the waiter's future on its event loop (no polling). An answer
nobody here is waiting for (its request timed out into a ``poll_id``, or it went through
another instance) is written to ``rest:poll:<uuid>`` with a TTL of REST_POLL_TTL, so any
instance can answer ``/poll``. Round trips: one pipelined SET batch per batch of unclaimed
answers; none for an awaited one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import redis

from scrapy_cluster import keys
from scrapy_cluster.errors import BusError

READ_BATCH = 500
POLL_TIMEOUT_S = 0.5
RETRY_S = 1.0


class AnswerRouter:
    """Waiters by uuid; thread-safe hand-over from the listener thread to the event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[asyncio.Future[Any]]] = {}

    def register(self, uuid: str) -> asyncio.Future[Any]:
        """A future resolved with the answer to ``uuid``; call from the event loop."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiting.setdefault(uuid, []).append(future)
        return future

    def forget(self, uuid: str, future: asyncio.Future[Any]) -> bool:
        """Stop waiting; False when the listener already took the waiter (the answer is on
        its way to ``future`` and must still be awaited)."""
        with self._lock:
            futures = self._waiting.get(uuid)
            if not futures or future not in futures:
                return False
            futures.remove(future)
            if not futures:
                del self._waiting[uuid]
            return True

    def deliver(self, uuid: str, answer: Any) -> bool:
        """Resolve every waiter of ``uuid``; False when nobody waits. Any thread."""
        with self._lock:
            futures = self._waiting.pop(uuid, None)
        if not futures:
            return False
        for future in futures:
            future.get_loop().call_soon_threadsafe(_resolve, future, answer)
        return True

    @property
    def waiting(self) -> int:
        with self._lock:
            return sum(len(futures) for futures in self._waiting.values())


def _resolve(future: asyncio.Future[Any], answer: Any) -> None:
    if not future.done():
        future.set_result(answer)


class AnswerListener(threading.Thread):
    """Reads the outbound topic and hands each answer to its waiter or to ``rest:poll``."""

    def __init__(self, *, open_reader: Callable[[], Any], router: AnswerRouter,
                 redis_client: redis.Redis, poll_ttl_s: int, logger: logging.Logger) -> None:
        super().__init__(name="rest-answers", daemon=True)
        self.open_reader = open_reader
        self.router = router
        self.redis = redis_client
        self.poll_ttl_s = max(1, int(poll_ttl_s))
        self.logger = logger
        self.ready = threading.Event()
        self._halt = threading.Event()
        self._unclaimed: dict[str, bytes] = {}

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        reader = None
        outage_logged = False
        while not self._halt.is_set():
            try:
                if reader is None:
                    reader = self.open_reader()
                    self.ready.set()
                    if outage_logged:
                        self.logger.info("answer reader connected again")
                    outage_logged = False
                self.handle(reader.poll(READ_BATCH, POLL_TIMEOUT_S))
                self._store_unclaimed()
            except (BusError, redis.RedisError, OSError) as exc:
                if not outage_logged:
                    self.logger.warning("answer reader unavailable, retrying: %s", exc,
                                        extra={"error": str(exc)})
                    outage_logged = True
                self._halt.wait(RETRY_S)
        if reader is not None:
            reader.close()

    def handle(self, messages: Sequence[Any]) -> None:
        """Deliver each answer (a JSON object with a ``uuid``); others are ignored."""
        for message in messages:
            answer = message.value
            if not isinstance(answer, dict) or not isinstance(answer.get("uuid"), str):
                continue
            uuid = answer["uuid"]
            if not self.router.deliver(uuid, answer):
                self._unclaimed[uuid] = orjson.dumps(answer)

    def _store_unclaimed(self) -> None:
        """One pipelined round trip for the batch; kept for the next try on an outage."""
        if not self._unclaimed:
            return
        pipe = self.redis.pipeline(transaction=False)
        for uuid, raw in self._unclaimed.items():
            pipe.set(keys.rest_poll(uuid), raw, ex=self.poll_ttl_s)
        pipe.execute()
        self._unclaimed.clear()

