"""Resolving a page's relative hrefs without ``urljoin`` and ``safe_url_string``.

``link_rules.links_in_tree`` resolves an href as Scrapy's ``LinkExtractor`` does:
``urljoin(page_url, safe_url_string(urljoin(base_url, href), encoding=encoding))``. Most hrefs
of a site are relative (``/a/b.html``, ``c/``, ``../d/``, ``?page=2``, ``#top``) and made only
of characters that ``safe_url_string`` leaves as they are; for those the formula comes down to
joining the href's path, query and fragment with the base URL's, which ``PlainJoin`` does with
the base URL split once per page, the way ``urljoin`` joins them: RFC 3986 dot segments, plus
``urljoin``'s own rules (empty segments of a relative path dropped, a path ending in ``.`` or
``..`` ending in ``/``, an empty query or fragment dropped, a missing query taken from the base
when the href has no path).

Whatever could make the formula answer otherwise is left to it (``PlainJoin`` answers None):
an href with a scheme, a host, whitespace or control characters inside, a ``%`` that starts
no escape (w3lib means to quote those some day; an escape ``%XX`` is kept as written, in the
href and in the base URL), ``;`` in its path, ``\\``, non-ASCII, ``'`` in its
query, ``#`` in its fragment, or an empty href; and every href of a page whose base URL is not
a plain lower-case http(s) URL (a host of ``a-z0-9.-``, a port without leading zero, no user
info, ``;``, a bare ``%`` ...), whose page URL ``urljoin`` refuses, or whose encoding does not write
ASCII as ASCII (UTF-16 and UTF-32 quote every character of a query).
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from urllib.parse import urlsplit

from w3lib.html import HTML5_WHITESPACE

_PATH = r"A-Za-z0-9\-._~:@!$&'()*+,=/"
_QUERY = r"A-Za-z0-9\-._~:@!$&()*+,;=/?"
_FRAGMENT = r"A-Za-z0-9\-._~:@!$&'()*+,;=/?"
_ESCAPE = "%[0-9A-Fa-f]{2}"
"""A percent escape: ``safe_url_string`` keeps it as it is (hex case included)."""
_HREF = re.compile(rf"((?:[{_PATH}]|{_ESCAPE})*)(?:\?((?:[{_QUERY}]|{_ESCAPE})*))?"
                   rf"(?:#((?:[{_FRAGMENT}]|{_ESCAPE})*))?\Z")
_HREF_NO_ESCAPE = re.compile(rf"([{_PATH}]*)(?:\?([{_QUERY}]*))?(?:#([{_FRAGMENT}]*))?\Z")
"""``_HREF`` for an href without ``%``: the same groups, half the matching time."""
_BASE = re.compile(
    rf"(https?://[a-z0-9][a-z0-9.\-]*(?::([1-9][0-9]{{0,4}}))?)(/(?:[{_PATH}]|{_ESCAPE})*)?"
    rf"(?:\?((?:[{_QUERY}]|{_ESCAPE})*))?(?:#.*)?\Z")
_HOST = r"[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?)*"
_SAFE_URL = re.compile(
    rf"https?://{_HOST}(?::([1-9][0-9]{{0,4}}))?(?:/(?:[{_PATH}]|{_ESCAPE})*)?"
    rf"(?:\?(?:[{_QUERY}]|{_ESCAPE})+)?(?:#(?:[{_FRAGMENT}]|{_ESCAPE})+)?\Z")
_ASCII_IN_USE = string.ascii_letters + string.digits + "-._~:@!$&'()*+,;=/?"


@lru_cache(maxsize=64)
def _writes_ascii_as_ascii(encoding: str) -> bool:
    """True when ``encoding`` encodes the characters ``PlainJoin`` lets through to themselves,
    so that ``safe_url_string`` quotes none of them in a query or fragment."""
    try:
        return _ASCII_IN_USE.encode(encoding) == _ASCII_IN_USE.encode()
    except (LookupError, ValueError):
        return False


class PlainJoin:
    """The formula's answer for the plain relative hrefs of one page, None for any other."""

    __slots__ = ("_origin", "_path", "_query", "_base_parts", "_ancestors")

    def __init__(self, origin: str, path: str, query: str) -> None:
        self._origin = origin
        self._path = path
        self._query = query
        parts = path.split("/")
        if parts[-1]:
            del parts[-1]
        self._base_parts = parts
        directory = path[:path.rfind("/") + 1] or "/"
        self._ancestors: list[str] = []
        if "//" not in directory and "/." not in directory:
            self._ancestors.append(directory)
            while directory != "/":
                directory = directory[:directory.rfind("/", 0, -1) + 1]
                self._ancestors.append(directory)

    @classmethod
    def for_page(cls, base_url: str, page_url: str, encoding: str) -> PlainJoin | None:
        """The page's ``PlainJoin``, or None when no href of it may skip the formula."""
        found = _BASE.match(base_url)
        if found is None or (found[2] is not None and int(found[2]) > 65535) \
                or not _writes_ascii_as_ascii(encoding):
            return None
        try:
            urlsplit(page_url)
        except ValueError:
            return None
        return cls(found[1], found[3] or "", found[4] or "")

    def __call__(self, href: str) -> str | None:
        """The absolute URL of ``href``, or None when only the formula may say."""
        href = href.strip(HTML5_WHITESPACE)
        found = (_HREF if "%" in href else _HREF_NO_ESCAPE).match(href)
        if found is None or not href:
            return None
        path, query, fragment = found.groups()
        if not path:
            if not self._path:
                return None
            path, query = self._path, query or self._query
        elif path[0] == "/":
            if path[:2] == "//":
                return None
            if "/." in path:
                path = self._resolved(path.split("/"))
        elif ":" in path.partition("/")[0]:
            return None
        else:
            path = self._relative(path)
        url = self._origin + path
        if query:
            url = f"{url}?{query}"
        return f"{url}#{fragment}" if fragment else url

    def _relative(self, path: str) -> str:
        """The path of a relative ``path``: leading ``./`` and ``../`` taken off the base
        directory when the rest holds no dot or empty segment, else joined as ``urljoin``
        joins."""
        ancestors = self._ancestors
        if ancestors and "//" not in path:
            rest, up = path, 0
            while rest[:1] == ".":
                if rest[:3] == "../":
                    rest, up = rest[3:], up + 1
                elif rest[:2] == "./":
                    rest = rest[2:]
                else:
                    break
            if rest[:1] != "." and "/." not in rest:
                return ancestors[min(up, len(ancestors) - 1)] + rest
        segments = self._base_parts + path.split("/")
        segments[1:-1] = filter(None, segments[1:-1])
        return self._resolved(segments)

    @staticmethod
    def _resolved(segments: list[str]) -> str:
        """The path of ``segments`` with its dot segments removed, as ``urljoin`` removes them,
        starting with ``/`` as ``urlunsplit`` writes it after a host."""
        resolved: list[str] = []
        for segment in segments:
            if segment == "..":
                if resolved:
                    resolved.pop()
            elif segment != ".":
                resolved.append(segment)
        if segments[-1] in (".", ".."):
            resolved.append("")
        path = "/".join(resolved) or "/"
        return path if path[0] == "/" else "/" + path


def is_safe_url(url: str) -> bool:
    """True when ``safe_url_string(url, "utf-8")`` is ``url`` itself, judged without it: a
    lower-case http(s) URL whose host labels are plain ASCII (which IDNA keeps), with a port
    from 1 to 65535, and a path, query and fragment made of the characters and escapes
    ``safe_url_string`` keeps (an empty ``?`` or ``#`` excluded). False means "ask w3lib"."""
    found = _SAFE_URL.match(url)
    return found is not None and (found[1] is None or int(found[1]) <= 65535)

