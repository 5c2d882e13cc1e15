"""Watch a ZooKeeper node (or a node naming another node) and hear about every change.

The interface of Scrapy Cluster 1.2's ``scutils.zookeeper_watcher.ZookeeperWatcher``, built on
kazoo's ``DataWatch`` and connection-state listener:

- **single mode**: the watched node's content is the configuration;
- **pointer mode** (``pointer=True``): the watched node's content is the path of the node
  holding the configuration; a change of either is followed.

Kazoo reconnects by itself (after a dropped connection, a server restart or a lost session)
and ``DataWatch`` then re-reads its node and re-registers its watch; the handlers hear about
content that changed meanwhile. Kazoo's threads never run our handlers: they only put a call
on a ``CallbackThread``, so a slow handler never stalls the ZooKeeper session and the state
listener never blocks (kazoo's rule).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from types import TracebackType
from typing import TypeVar

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, ZnodeStat

from scrapy_cluster.domain_config.zookeeper_client import (
    CONNECT_TIMEOUT_S,
    CallbackThread,
    NodeWatch,
    kazoo_client,
    start_client,
)
from scrapy_cluster.errors import ZookeeperUnavailableError

PING_TIMEOUT_S = 5.0
_WAIT_SLICE_S = 0.5

logger = logging.getLogger("scrapy_cluster.domain_config")

Value = TypeVar("Value")


class ZookeeperWatcher:
    """Watches ``filepath`` (see the module docstring) on its own ZooKeeper connection.

    Handlers run on the watcher's own thread, one at a time, never after ``close()``:

    - ``config_handler(contents)``: the configuration text, at start and whenever it changes;
    - ``valid_handler(valid)``: when validity changes; valid = connected and the configuration
      node (in pointer mode: the pointer, non-empty, and the node it names) readable;
    - ``error_handler(message)``: a missing node, an empty pointer, a lost connection, ...

    ``ensure`` creates missing nodes (empty). With ``valid_init`` the constructor connects
    within ``connect_timeout_s`` (else ``ZookeeperUnavailableError``) and returns once the
    current content has been handled; without it, it connects in the background.
    """

    def __init__(self, hosts: str, filepath: str,
                 valid_handler: Callable[[bool], None] | None = None,
                 config_handler: Callable[[str], None] | None = None,
                 error_handler: Callable[[str], None] | None = None,
                 pointer: bool = False, ensure: bool = False, valid_init: bool = True,
                 *, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.hosts, self.filepath = hosts, filepath
        self.pointer, self.ensure = pointer, ensure
        self._valid_handler, self._config_handler = valid_handler, config_handler
        self._error_handler = error_handler
        self._lock = threading.Lock()  # guards what the polling methods read
        self._connected = self._valid = self._closed = False
        self._pointer_contents: str | None = None
        self._contents: str | None = None
        self._delivered: str | None = None
        self._watch: NodeWatch | None = None
        self._target: NodeWatch | None = None
        self._client = kazoo_client(hosts)
        self._client.add_listener(self._on_state)
        self._callbacks = CallbackThread(f"zookeeper-watcher {filepath}")
        if valid_init:
            self._start_now(connect_timeout_s)
        else:
            live = self._client.start_async()
            self._callbacks.submit(partial(self._setup_when_connected, live))

    def is_valid(self) -> bool:
        """Whether the watched configuration is currently readable (for polling)."""
        with self._lock:
            return self._valid

    def get_file_contents(self, pointer: bool = False) -> str | None:
        """The configuration text (with ``pointer``: the pointer node's text, the path it
        names); None while that node is missing or not yet read."""
        with self._lock:
            return self._pointer_contents if pointer else self._contents

    def ping(self) -> bool:
        """One round trip to ZooKeeper: True if it answered within ``PING_TIMEOUT_S``."""
        try:
            self._client.exists_async("/").get(timeout=PING_TIMEOUT_S)
        except (KazooException, KazooTimeoutError):
            return False
        return True

    def close(self) -> None:
        """Stop watching and disconnect; idempotent; no handler runs afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for watch in (self._watch, self._target):
            if watch is not None:
                watch.close()
        try:
            self._client.stop()
        finally:
            self._client.close()
            self._callbacks.close()

    def __enter__(self) -> ZookeeperWatcher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def _start_now(self, connect_timeout_s: float) -> None:
        try:
            start_client(self._client, self.hosts, connect_timeout_s)
        except ZookeeperUnavailableError:
            self._callbacks.close()
            raise
        self._callbacks.submit(self._setup)
        self._callbacks.wait_idle(connect_timeout_s)

    def _setup_when_connected(self, live: threading.Event) -> None:
        while not live.wait(_WAIT_SLICE_S):
            if self._closed:
                return
        self._setup()

    def _setup(self) -> None:
        if self._closed:
            return
        if self.ensure:
            self._ensure(self.filepath)
        on_data = self._on_pointer if self.pointer else partial(self._on_config, self.filepath)
        self._watch = NodeWatch(self._client, self.filepath, on_data, self._callbacks)

    def _on_state(self, state: KazooState) -> None:
        """Kazoo's connection listener: runs on kazoo's connection thread, so only hands over."""
        self._callbacks.submit(partial(self._on_connection, state))

    def _on_connection(self, state: KazooState) -> None:
        with self._lock:
            self._connected = state == KazooState.CONNECTED
        if state == KazooState.SUSPENDED:
            self._error(f"connection to ZooKeeper at {self.hosts} lost; reconnecting")
        elif state == KazooState.LOST:
            self._error(f"ZooKeeper session at {self.hosts} lost; reconnecting")
        self._update_validity()

    def _on_pointer(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        text = self._decode(self.filepath, data)
        target = (text or "").strip()
        with self._lock:
            self._pointer_contents = text
        if self._target is not None and self._target.path == target:
            return
        if self._target is not None:
            self._target.close()
            self._target = None
        if not target.startswith("/"):
            self._error(f"pointer node {self.filepath} does not name a node: {text!r}")
            self._set_contents(None)
            return
        if self.ensure:
            self._ensure(target)
        self._target = NodeWatch(self._client, target, partial(self._on_config, target),
                                 self._callbacks)

    def _on_config(self, path: str, data: bytes | None, stat: ZnodeStat | None) -> None:
        text = self._decode(path, data)
        if data is None:
            self._error(f"node {path} does not exist")
        self._set_contents(text)
        if text is not None and text != self._delivered:
            self._delivered = text
            self._handle(self._config_handler, text)

    def _set_contents(self, text: str | None) -> None:
        with self._lock:
            self._contents = text
        self._update_validity()

    def _update_validity(self) -> None:
        with self._lock:
            valid = self._connected and self._contents is not None
            changed, self._valid = valid != self._valid, valid
        if changed:
            self._handle(self._valid_handler, valid)

    def _decode(self, path: str, data: bytes | None) -> str | None:
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._error(f"node {path} is not UTF-8 text: {exc}")
            return None

    def _ensure(self, path: str) -> None:
        try:
            self._client.ensure_path(path)
        except KazooException as exc:
            self._error(f"cannot create node {path}: {exc!r}")

    def _error(self, message: str) -> None:
        if not self._closed:
            logger.warning("%s", message)
            self._handle(self._error_handler, message)

    def _handle(self, handler: Callable[[Value], None] | None, value: Value) -> None:
        if handler is not None and not self._closed:
            handler(value)
