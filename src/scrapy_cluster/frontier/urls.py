"""Fast paths for the two URL questions the frontier asks of every request.

``canonical_url(url)`` equals w3lib's ``canonicalize_url(url)`` and
``url_host(url)`` equals ``urlsplit(url).hostname`` for every input; both only
skip work for the common shape ``http(s)://host[:port][/path][?query][#fragment]`` where
the host is plain ASCII letters, digits, dots and hyphens and every part is written the way
canonicalisation would write it:

* the path holds only characters w3lib leaves as they are, and percent-escapes (upper-case
  hex) only of bytes it would escape again (``%C3%A9``, ``%20``, not ``%41``); no ``;``
  (path parameters) and no dot segment;
* the query is ``k=v`` pairs joined by ``&``, each with exactly one ``=``, of unreserved
  characters and ``+`` (and such escapes too, in a query of one pair); w3lib sorts the pairs
  by (key, value) after unquoting, ``+`` becoming a space: as both sort before every
  unreserved character, that is the order of the strings as written;
* the fragment, which canonicalisation drops, is printable ASCII without space or ``\\``.

For such a URL the canonical form is the canonical form of its origin (computed once by
w3lib and cached: scheme and host lower-cased, port normalised) followed by the path as
written and the sorted query. Anything else goes to w3lib / urllib unchanged.
``tests/test_frontier_fingerprint_equivalence.py`` compares both functions with the
libraries over a generated corpus of tricky URLs and a hypothesis property.
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
    r"(/[A-Za-z0-9\-._~!$&'()*+,=:@/%]*)?"
    r"(?:\?([A-Za-z0-9\-._~+%=&]*))?"
    r"(?:#[!-\[\]-~]*)?\Z")
"""Origin, an optional path, query and fragment, each of the characters the fast path
accepts (percent-escapes and query pairs are checked after the match)."""

_KEPT_PATH_ESCAPES = r"(?:[01][0-9A-F]|2[0235F]|3[BCEF]|5[CE]|60|7[BDF]|[89A-F][0-9A-F])"
"""Bytes whose upper-case escape w3lib writes back as it was in a path (it decodes and
re-quotes every escape: ``%41`` becomes ``A``, ``%c3`` becomes ``%C3``)."""
_KEPT_QUERY_ESCAPES = r"(?:[01][0-9A-F]|2[1-9A-CF]|3[A-F]|40|5[B-E]|60|7[B-DF]|[89A-F][0-9A-F])"
"""The same in a query key or value: every byte but the unreserved characters and space."""
_OTHER_PATH_ESCAPE = re.compile(rf"%(?!{_KEPT_PATH_ESCAPES})")
_OTHER_QUERY_ESCAPE = re.compile(rf"%(?!{_KEPT_QUERY_ESCAPES})")

_PLAIN_HOST = re.compile(r"([Hh][Tt][Tt][Pp][Ss]?://([A-Za-z0-9.\-]+)(?::[0-9]*)?)(?:[/?#]|\Z)")
"""The origin and host of an http(s) URL whose authority is a plain ASCII host and optional
port."""
ORIGIN_ENDS = ("/", "?", "#", "")
"""What may follow the origin ``plain_origin_host`` found (``""``: the end of the URL)."""


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
    origin, path, query = match.group(1, 2, 3)
    if path:
        if "/." in path or ("%" in path and _OTHER_PATH_ESCAPE.search(path)):
            return None
        path = path[1:]
    else:
        path = ""
    if query:
        query = _canonical_query(query)
        if query is None:
            return None
    root = _canonical_root(origin)
    if root is None:
        return None
    return f"{root}{path}?{query}" if query else root + path


def _canonical_query(query: str) -> str | None:
    """w3lib's form of a query of ``k=v`` pairs (see the module docstring); None for others."""
    if "&" not in query:
        if query.count("=") != 1 or ("%" in query and _OTHER_QUERY_ESCAPE.search(query)):
            return None
        return query
    if "%" in query:
        return None
    pairs = query.split("&")
    for pair in pairs:
        if pair.count("=") != 1:
            return None
    pairs.sort(key=_pair_order)
    return "&".join(pairs)


def _pair_order(pair: str) -> list[str]:
    return pair.split("=")


def url_host(url: str) -> str | None:
    """``urlsplit(url).hostname``, read with one regex match for plain http(s) URLs."""
    match = _PLAIN_HOST.match(url)
    if match is None:
        return urlsplit(url).hostname
    return match.group(2).lower()


def plain_origin_host(url: str) -> tuple[str, str] | None:
    """``(origin, url_host(url))`` of a plain http(s) URL (``http://Host:80`` of
    ``http://Host:80/a``), None for others. Every URL that starts with that origin followed
    by one of ``ORIGIN_ENDS`` has the same host."""
    match = _PLAIN_HOST.match(url)
    if match is None:
        return None
    return match.group(1), match.group(2).lower()
