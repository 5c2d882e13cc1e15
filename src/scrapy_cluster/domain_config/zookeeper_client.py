"""kazoo plumbing shared by the ZooKeeper watcher and store: clients that reconnect by
themselves, a thread that runs handlers off kazoo's threads, and a node watch.

Kazoo's threads never run our handlers: they only put a call on a ``CallbackThread``, so a slow
handler never stalls the ZooKeeper session and the state listener never blocks (kazoo's rule).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from functools import partial

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch
from kazoo.retry import KazooRetry

from scrapy_cluster.errors import ZookeeperUnavailableError

# Longer than one connection attempt (kazoo waits up to the 10 s session timeout for the
# server's answer), so a just-started server that stalls a first attempt fails no start.
CONNECT_TIMEOUT_S = 15.0
RECONNECT_MAX_DELAY_S = 5.0
CLOSE_TIMEOUT_S = 10.0

logger = logging.getLogger("scrapy_cluster.domain_config")

NodeCallback = Callable[[bytes | None, ZnodeStat | None], None]


def kazoo_client(hosts: str, *, reconnect_max_delay_s: float = RECONNECT_MAX_DELAY_S) -> KazooClient:
    """A client, not started, that retries a lost connection forever, at most
    ``reconnect_max_delay_s`` apart (kazoo's default backoff grows to an hour)."""
    retry = KazooRetry(max_tries=-1, max_delay=reconnect_max_delay_s)
    return KazooClient(hosts=hosts, connection_retry=retry)


def start_client(client: KazooClient, hosts: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Connect within ``timeout_s`` or raise ``ZookeeperUnavailableError`` (client stopped)."""
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError as exc:
        raise ZookeeperUnavailableError(
            f"ZooKeeper at {hosts} not reachable within {timeout_s:g} s") from exc


class CallbackThread:
    """Runs submitted calls one at a time, in submission order, on one daemon thread.

    ``submit`` never blocks, so kazoo's threads may call it. A call that raises is logged
    with its traceback and the next call runs.
    """

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], None]) -> None:
        self._calls.put(call)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is queued, including calls queued by the calls that ran;
        False if that did not happen within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            done, idle = threading.Event(), list[bool]()
            self.submit(partial(self._mark, done, idle))
            if not done.wait(max(0.0, deadline - time.monotonic())):
                return False
            if idle[0]:
                return True

    def _mark(self, done: threading.Event, idle: list[bool]) -> None:
        idle.append(self._calls.empty())
        done.set()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Run what is queued, then stop (no join when called from a callback)."""
        self._calls.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                call()
            except Exception:
                logger.exception("ZooKeeper watch handler failed")


class NodeWatch:
    """A kazoo ``DataWatch`` on ``path`` whose readings are passed to ``callback(data, stat)``
    on ``callbacks`` (``(None, None)`` while the node does not exist).

    First with the node as it is now, then whenever its mzxid changed, including changes
    made while disconnected (kazoo re-reads the node after each reconnection). The
    constructor reads the node, so it blocks until the client is connected. After
    ``close()`` nothing is delivered; kazoo drops its watch at the node's next event.
    """

    def __init__(self, client: KazooClient, path: str, callback: NodeCallback,
                 callbacks: CallbackThread) -> None:
        self.path = path
        self._callback = callback
        self._callbacks = callbacks
        self._closed = False
        DataWatch(client, path, self._on_data)

    def close(self) -> None:
        self._closed = True

    def _on_data(self, data: bytes | None, stat: ZnodeStat | None, event: object = None) -> bool:
        """On a kazoo thread: only hand over. Returning False ends kazoo's DataWatch."""
        if self._closed:
            return False
        self._callbacks.submit(partial(self._deliver, data, stat))
        return True

    def _deliver(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        if not self._closed:
            self._callback(data, stat)
