"""Fast paths for the two URL questions the frontier asks of every request.

``canonical_url(url)`` equals w3lib's ``canonicalize_url(url)`` and
``url_host(url)`` equals ``urlsplit(url).hostname`` for every input; both only
skip work for the common shape ``http(s)://host[:port][/path]`` where the host
is plain ASCII letters, digits, dots and hyphens and the path holds only
characters canonicalisation never changes (no ``%``, ``;``, ``?``, ``#``, no
dot segment). For such a URL the canonical form is the canonical form of its
origin (computed once by w3lib and cached: scheme and host lower-cased, port
normalised) followed by the path as written. Anything else goes to w3lib /
urllib unchanged. ``tests/test_frontier_fingerprint_equivalence.py`` compares
both functions with the libraries over a generated corpus of tricky URLs.
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import urlsplit

from w3lib.url import canonicalize_url

ORIGIN_CACHE_SIZE = 100_000
"""Distinct origins (scheme + host + port) whose canonical form is remembered."""

_PLAIN_URL = re.compile(
    r"((?:[Hh][Tt][Tt][Pp][Ss]?)://[A-Za-z0-9.\-]+(?::[0-9]*)?)"
    r"(/[A-Za-z0-9\-._~!$&'()*+,=:@/]*)?\Z")
"""Origin, then an optional path made of characters w3lib leaves exactly as they are."""

_PLAIN_HOST = re.compile(r"[Hh][Tt][Tt][Pp][Ss]?://([A-Za-z0-9.\-]+)(?::[0-9]*)?(?:[/?#]|\Z)")
"""The host of an http(s) URL whose authority is a plain ASCII host and optional port."""


@lru_cache(maxsize=ORIGIN_CACHE_SIZE)
def _canonical_root(origin: str) -> str | None:
    """``canonicalize_url(origin + "/")``, or None when w3lib refuses it (e.g. a bad port)."""
    try:
        root = canonicalize_url(origin + "/")
    except ValueError:
        return None
    return root if root.endswith("/") else None


def canonical_url(url: str) -> str:
    """``w3lib.url.canonicalize_url(url)``, without re-parsing URLs of the plain shape."""
    return plain_canonical_url(url) or canonicalize_url(url)


def plain_canonical_url(url: str) -> str | None:
    """The canonical form of a plain-shaped ``url`` from its cached origin; None otherwise."""
    match = _PLAIN_URL.match(url)
    if match is None:
        return None
    origin, path = match.group(1, 2)
    if path and "/." in path:
        return None
    root = _canonical_root(origin)
    if root is None:
        return None
    return root + path[1:] if path else root


def url_host(url: str) -> str | None:
    """``urlsplit(url).hostname``, read with one regex match for plain http(s) URLs."""
    match = _PLAIN_HOST.match(url)
    if match is None:
        return urlsplit(url).hostname
    return match.group(1).lower()
