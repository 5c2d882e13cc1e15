"""A trap for the SSRF tests: one port on 127.0.0.1 and on ::1 that counts every connection.

An SSRF guard is judged by what reaches the internal service, not by what the guard says:
``Trap().start()`` listens on the same free port on both loopback addresses, records every
accepted connection (which address, and the first bytes it sent) and answers a page saying
it was reached, so a bypass would also come out on the crawled topic.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.services import free_port

PAGE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 29\r\n"
        b"Connection: close\r\n\r\n<html>trap was reached</html>")


@dataclass(frozen=True)
class Catch:
    """One connection the trap accepted: the address it came to and its first bytes."""

    listener: str
    first_bytes: bytes


class Trap:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._catches: list[Catch] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._stopping = threading.Event()

    def start(self) -> Trap:
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            listener = socket.socket(family, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listener.bind((host, self.port))
            listener.listen(64)
            listener.settimeout(0.2)
            self._sockets.append(listener)
            threading.Thread(target=self._accept, args=(listener, host), daemon=True,
                             name=f"trap-{host}").start()
        return self

    def _accept(self, listener: socket.socket, host: str) -> None:
        while not self._stopping.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with connection:
                connection.settimeout(2.0)
                try:
                    first = connection.recv(4096)
                    connection.sendall(PAGE)
                except OSError:
                    first = b""
            with self._lock:
                self._catches.append(Catch(host, first))

    def catches(self) -> list[Catch]:
        with self._lock:
            return list(self._catches)

    def stop(self) -> None:
        self._stopping.set()
        for listener in self._sockets:
            listener.close()


@contextmanager
def running_trap() -> Iterator[Trap]:
    """A started trap, stopped afterwards (the tests' fixture)."""
    trap = Trap().start()
    try:
        yield trap
    finally:
        trap.stop()


def trap_urls(port: int, decoy: str) -> dict[str, str]:
    """URL forms whose HTTP client would connect to the trap on ``port`` (127.0.0.1 or ::1),
    by name. ``decoy`` is an allowed ``host:port`` placed where a hand-written URL splitter
    would take it for the host."""
    return {
        "plain": f"http://127.0.0.1:{port}/plain",
        "fragment-at": f"http://127.0.0.1:{port}#@{decoy}/x",
        "fragment-at-ipv6": f"http://[::1]:{port}#@{decoy}/x",
        "query-at": f"http://127.0.0.1:{port}?@{decoy}/x",
        "path-query-at": f"http://127.0.0.1:{port}/p?u=http://x@{decoy}/x",
        "backslash-at": f"http://127.0.0.1:{port}\\@{decoy}/x",
        "userinfo": f"http://user:pass@127.0.0.1:{port}/u",
        "userinfo-decoy": f"http://{decoy}@127.0.0.1:{port}/u",
        "double-at": f"http://a@{decoy}@127.0.0.1:{port}/u",
        "percent-encoded-host": f"http://%31%32%37.0.0.1:{port}/pe",
        "decimal": f"http://2130706433:{port}/d",
        "hex": f"http://0x7f000001:{port}/h",
        "hex-dotted": f"http://0x7f.0x0.0x0.0x1:{port}/hd",
        "octal": f"http://0177.0.0.1:{port}/o",
        "short": f"http://127.1:{port}/s",
        "unspecified": f"http://0.0.0.0:{port}/z",
        "ipv6": f"http://[::1]:{port}/6",
        "ipv6-long": f"http://[0:0:0:0:0:0:0:1]:{port}/6l",
        "ipv4-mapped": f"http://[::ffff:127.0.0.1]:{port}/m",
        "ipv4-mapped-hex": f"http://[::ffff:7f00:1]:{port}/mh",
        "dns-localhost": f"http://localhost:{port}/n",
        "dns-localhost-dot-upper": f"http://LOCALHOST.:{port}/nd",
    }
