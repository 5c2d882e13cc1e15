"""A TCP proxy on a loopback port that a test can cut: every connection closed and new ones
refused (nothing listens) until it is restored, as a network partition looks to a client.

``TcpProxy(target_host, target_port).start()`` forwards ``127.0.0.1:<port>`` to the target,
two threads per connection; ``cut()`` / ``restore()`` (or ``pause(down_s)``) partition it;
``stop()`` ends it. The port stays the same across a cut, so clients reconnect to it.
"""

from __future__ import annotations

import socket
import threading
import time

from tests.support.services import free_port

CHUNK_BYTES = 65536


class TcpProxy:
    """Forwards ``host:port`` to ``target_host:target_port`` until cut or stopped."""

    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1",
                 port: int | None = None) -> None:
        self.target = (target_host, target_port)
        self.host, self.port = host, port or free_port(host)
        self.cuts = 0
        self.connections_closed_by_cuts = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None

    def start(self) -> TcpProxy:
        """Listen (again) on the proxy's port."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(128)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="tcp-proxy-accept",
                         daemon=True).start()
        return self

    def cut(self) -> int:
        """Close every open connection and stop listening; returns how many were closed."""
        with self._lock:
            listener, self._listener = self._listener, None
            open_sockets, self._sockets = self._sockets, set()
        if listener is not None:
            listener.close()
        for sock in open_sockets:
            _close(sock)
        closed = len(open_sockets) // 2
        self.cuts += 1
        self.connections_closed_by_cuts += closed
        return closed

    def restore(self) -> None:
        """Accept connections again (on the same port)."""
        self.start()

    def pause(self, down_s: float) -> int:
        """``cut()``, wait ``down_s``, ``restore()``; returns the connections closed."""
        closed = self.cut()
        time.sleep(down_s)
        self.restore()
        return closed

    def stop(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by cut() or stop()
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:  # cut while connecting
                    _close(client)
                    _close(upstream)
                    continue
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), name="tcp-proxy-pump",
                                 daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(CHUNK_BYTES):
                sink.sendall(chunk)
        except OSError:
            pass
        with self._lock:
            self._sockets.discard(source)
            self._sockets.discard(sink)
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
