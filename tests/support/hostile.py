"""Hostile pages for the generated site, under ``/hostile/`` (linked from nowhere): give
``SiteConfig(streamed=HostilePages(sizes))`` to a ``SiteServer``.

Large bodies are generated on the fly and streamed in chunks; none is built whole in memory.
The gzip bomb is compressed once per process and cached (about 1 MB for 1 GiB of zeros).

=================================  ============================================================
``/hostile/gzip-bomb.html``        ``Content-Encoding: gzip``; ~1 MB inflating to ``bomb_bytes``
``/hostile/endless.html``          headers, then one byte every ``endless_interval_s``, forever
``/hostile/many-links.html``       ``many_links`` distinct relative links on one page
``/hostile/redirect-loop-a.html``  302 to ``redirect-loop-b.html``, which 302s back here
``/hostile/redirect-loopback.html``  302 to ``http://127.0.0.1:<port>/hostile/admin.html``
``/hostile/redirect-metadata.html``  302 to ``http://169.254.169.254/latest/meta-data/``
``/hostile/bad-utf8.html``         declares ``charset=utf-8``; holds invalid UTF-8 sequences
``/hostile/bogus-charset.html``    declares a charset that does not exist (header and meta)
``/hostile/mixed-encoding.html``   header says UTF-8, ``<meta>`` says latin-1, body has both
``/hostile/large.html``            ``large_body_bytes`` of HTML with a ``Content-Length``
``/hostile/large-chunked.html``    the same, chunked (no ``Content-Length``)
=================================  ============================================================
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from scrapy_cluster.sitegen.site import Streamed

HTML = "text/html; charset=utf-8"
CHUNK_BYTES = 64 * 1024
LINKS_PER_CHUNK = 1000
METADATA_URL = "http://169.254.169.254/latest/meta-data/"
LOOPBACK_PATH = "/hostile/admin.html"
BAD_UTF8_BODY = (b'<html><head><title>bad utf-8</title></head><body><p>ok \xc3\xa9 then '
                 b'\xff\xfe lone, \xc3 truncated, \xc0\xaf overlong, \xed\xa0\x80 surrogate</p>'
                 b'<a href="/p/0.html">caf\xe9</a></body></html>')
BOGUS_CHARSET = "x-no-such-charset-42"
BOGUS_CHARSET_BODY = (b'<html><head><meta charset="x-no-such-charset-42"><title>bogus</title>'
                      b'</head><body><p>caf\xc3\xa9 caf\xe9</p><a href="/p/0.html">home</a>'
                      b'</body></html>')
MIXED_ENCODING_BODY = (b'<html><head><meta http-equiv="Content-Type" content="text/html; '
                       b'charset=iso-8859-1"><title>mixed</title></head><body>'
                       b'<p>utf-8: caf\xc3\xa9 cr\xc3\xa8me</p><p>latin-1: caf\xe9 cr\xe8me</p>'
                       b'<a href="/p/caf\xc3\xa9.html">utf-8 href</a>'
                       b'<a href="/p/cr\xe8me.html">latin-1 href</a></body></html>')
HOSTILE_PATHS = (
    "/hostile/gzip-bomb.html", "/hostile/endless.html", "/hostile/many-links.html",
    "/hostile/redirect-loop-a.html", "/hostile/redirect-loopback.html",
    "/hostile/redirect-metadata.html", "/hostile/bad-utf8.html", "/hostile/bogus-charset.html",
    "/hostile/mixed-encoding.html", "/hostile/large.html", "/hostile/large-chunked.html",
)


@dataclass(frozen=True)
class HostileSizes:
    bomb_bytes: int = 1 << 30
    endless_interval_s: float = 1.0
    many_links: int = 100_000
    large_body_bytes: int = 50_000_000


@dataclass(frozen=True)
class HostilePages:
    """The ``/hostile/`` pages, as the generated site's ``SiteConfig.streamed``."""

    sizes: HostileSizes = HostileSizes()

    def __call__(self, base_url: str, path: str) -> Streamed | None:
        if not path.startswith("/hostile/"):
            return None
        return render_hostile(self.sizes, base_url, path)


_BOMB_LOCK = threading.Lock()


def gzip_bomb(inflated_bytes: int) -> bytes:
    """One gzip member that inflates to ``inflated_bytes`` zero bytes, computed once per
    process (1 GiB: ~1 MB, a few seconds of CPU; call it before a test with short timeouts)."""
    with _BOMB_LOCK:
        return _compressed_zeros(inflated_bytes)


@cache
def _compressed_zeros(inflated_bytes: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block, parts, left = bytes(1 << 20), [], inflated_bytes
    while left > 0:
        parts.append(compressor.compress(block[:min(left, len(block))]))
        left -= len(block)
    parts.append(compressor.flush())
    return b"".join(parts)


def render_hostile(sizes: HostileSizes, base_url: str, path: str) -> Streamed | None:
    """The answer for a ``/hostile/`` path (``base_url`` = ``http://host:port``), or None."""
    fixed = _fixed_pages(base_url).get(path)
    if fixed is not None:
        status, content_type, body, headers = fixed
        return Streamed(status, content_type, iter([body]), len(body), headers)
    if path == "/hostile/gzip-bomb.html":
        body = gzip_bomb(sizes.bomb_bytes)
        return Streamed(200, HTML, iter([body]), len(body), (("Content-Encoding", "gzip"),))
    if path == "/hostile/endless.html":
        return Streamed(200, HTML, _endless(sizes.endless_interval_s))
    if path == "/hostile/many-links.html":
        return Streamed(200, HTML, _many_links(sizes.many_links))
    if path in ("/hostile/large.html", "/hostile/large-chunked.html"):
        length = sizes.large_body_bytes if path == "/hostile/large.html" else None
        return Streamed(200, HTML, _large_body(sizes.large_body_bytes), length)
    return None


def _fixed_pages(base_url: str) -> dict[str, tuple[int, str, bytes, tuple[tuple[str, str], ...]]]:
    def redirect(target: str) -> tuple[int, str, bytes, tuple[tuple[str, str], ...]]:
        return 302, HTML, b"<html><body>moved</body></html>", (("Location", target),)

    loopback = "http://127.0.0.1:" + base_url.rsplit(":", 1)[1] + LOOPBACK_PATH
    return {
        "/hostile/redirect-loop-a.html": redirect(base_url + "/hostile/redirect-loop-b.html"),
        "/hostile/redirect-loop-b.html": redirect(base_url + "/hostile/redirect-loop-a.html"),
        "/hostile/redirect-loopback.html": redirect(loopback),
        "/hostile/redirect-metadata.html": redirect(METADATA_URL),
        "/hostile/bad-utf8.html": (200, HTML, BAD_UTF8_BODY, ()),
        "/hostile/bogus-charset.html": (200, f"text/html; charset={BOGUS_CHARSET}",
                                        BOGUS_CHARSET_BODY, ()),
        "/hostile/mixed-encoding.html": (200, HTML, MIXED_ENCODING_BODY, ()),
    }


def _endless(interval_s: float) -> Iterator[bytes]:
    yield b"<html><body>"
    while True:
        time.sleep(interval_s)
        yield b"."


def _many_links(count: int) -> Iterator[bytes]:
    yield b"<html><head><title>many links</title></head><body>\n"
    for start in range(0, count, LINKS_PER_CHUNK):
        yield "".join(f'<a href="/hostile/links/{n}.html">link {n}</a>\n'
                      for n in range(start, min(count, start + LINKS_PER_CHUNK))).encode()
    yield b"</body></html>"


def _large_body(size: int) -> Iterator[bytes]:
    """Exactly ``size`` bytes of HTML, in ``CHUNK_BYTES`` chunks (one chunk object reused)."""
    head, tail = b"<html><body>", b"</body></html>"
    filler = (b"<p>" + b"x" * 92 + b"</p>\n") * (CHUNK_BYTES // 100)
    yield head
    left = size - len(head) - len(tail)
    while left > 0:
        part = filler if left >= len(filler) else filler[:left]
        left -= len(part)
        yield part
    yield tail
