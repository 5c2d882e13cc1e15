"""Sitemaps: a streaming parser and the host rules (issue 27). Engine-neutral and pure: no
Scrapy, no Twisted, no I/O besides the bytes it is given.

**Parser.** ``SitemapParser`` is fed a sitemap's body as byte chunks, as the HTTP client
decoded it by its Content-Encoding, and returns the entries each chunk completes
(``feed(chunk)``, then ``close()``); ``parse_sitemap(chunks, ...)`` wraps it for an iterable of
chunks and yields the entries one at a time. Either way ``result`` (a ``SitemapResult``) holds
the counts and, once parsing stopped early, the reason. The whole document is never held:

- gzip is recognised by its magic number (``1f 8b``) only, never by a header or a file name,
  and inflated once, at most ``STEP`` bytes at a time and never past ``max_bytes + 1`` bytes in
  all, so a gzip bomb stops at the cap (a body the client already decoded has no magic, so
  nothing is decoded twice; a gzip inside the gzip is not inflated again);
- XML goes through lxml's ``XMLPullParser`` (entities not resolved, no DTD loaded, no network,
  no huge trees) in slices of ``STEP`` bytes; after each slice, every finished element on the
  tree's open path is removed, so the tree holds the open elements and the current entry only.
  An entry (or the junk outside entries) holding more than ``max_open_nodes`` elements stops
  the parse;
- text sitemaps are split into lines as they arrive, a line longer than ``max_loc_chars`` is
  dropped without being buffered further.

Formats, told from the first bytes after inflation (and ``text/plain`` or a ``.txt`` URL as a
hint for a text sitemap not starting with a URL): sitemaps.org ``urlset`` (entries ``url``,
kind ``"url"``) and ``sitemapindex`` (entries ``sitemap``, kind ``"sitemap"``), matched by local
name whatever their namespace (missing, misspelt, or an undeclared prefix, as real sites
have); plain text (one URL per line, UTF-8; blank lines skipped, a line not starting with
``http://`` or ``https://`` counted as ``not_http``); RSS 2.0 and 1.0 (``item/link``,
``item/pubDate``); Atom (``entry/link/@href`` with ``rel`` absent or ``alternate``,
``entry/updated``, else ``entry/published``). ``lastmod`` becomes epoch seconds: W3C datetimes
(``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, with a time, fractions, ``Z`` or an offset; no zone
means UTC) or, for RSS, RFC 822 dates; an unreadable one is None.

Refused entries are counted by reason in ``result.refused`` and not yielded: ``empty`` (no
``loc``), ``too_long`` (over ``max_loc_chars``, 2,048 as sitemaps.org says), ``relative`` (a
sitemap's locations are absolute: nothing is joined), ``not_http`` (another scheme),
``not_utf8`` (a text line that is not UTF-8).

Stops (``result.stop``; None when the document was read to its end), each after yielding the
entries that came before it: ``empty`` (no bytes), ``unknown_format`` (neither XML of a known
root nor text), ``gzip`` (corrupt or truncated gzip), ``dtd`` (a ``<!DOCTYPE``: refused before
lxml sees a byte, so no entity is ever expanded or fetched), ``malformed`` (not well-formed
XML; ``result.detail`` has lxml's message), ``too_large`` (more than ``max_bytes`` of
document, counted after inflation), ``too_many_urls`` (an entry past the first
``max_entries``), ``entry_too_large`` (see above).

**Host rules.** ``allowed(loc, sitemap_url, ...)`` says whether a sitemap may list a URL (or a
child sitemap): on the sitemap's own origin (scheme, host, port) under the sitemap's directory
(a sitemap at ``/a/sitemap.xml`` covers ``/a/...``, one at the root covers the host), or on a
host whose robots.txt announced this sitemap (cross-submission, the whole host); ``relaxed``
allows any http(s) URL.
"""

from __future__ import annotations

import posixpath
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import lru_cache
from typing import Any, Literal, NamedTuple
from urllib.parse import SplitResult, urlsplit

from lxml import etree

EntryKind = Literal["url", "sitemap"]
StopReason = Literal["empty", "unknown_format", "gzip", "dtd", "malformed", "too_large",
                     "too_many_urls", "entry_too_large"]
STEP = 64 * 1024
"""Bytes inflated, or fed to the XML parser, at a time."""
PROLOG_MAX = 64 * 1024
"""Bytes the XML declaration, comments and processing instructions before the root may take."""
GZIP_MAGIC = b"\x1f\x8b"
_WHITESPACE = b" \t\r\n"
_HTTP_STARTS = ("https://", "http://")
_UTF8_BOM = b"\xef\xbb\xbf"
_TEXT_STARTS = (b"http://", b"https://")
_ROOT_NAME = re.compile(rb"[^\s/>]+")
_PERCENT_DOT = re.compile(r"%2e", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SitemapLimits:
    """Per-file limits; the defaults are sitemaps.org's."""

    max_entries: int = 50_000
    max_bytes: int = 50 * 1024 * 1024
    """Document bytes, counted after inflation."""
    max_loc_chars: int = 2_048
    max_open_nodes: int = 10_000
    """Elements the XML tree may hold between two slices (the open path and the current entry)."""


DEFAULT_LIMITS = SitemapLimits()


class SitemapEntry(NamedTuple):
    """A page (``url``) or, from a sitemap index, a child sitemap (``sitemap``); ``lastmod``
    in epoch seconds."""

    kind: EntryKind
    loc: str
    lastmod: float | None = None


@dataclass(slots=True)
class SitemapResult:
    """What one sitemap gave: its format, the counts, and why it stopped (None: at its end)."""

    url: str
    format: str | None = None
    gzip: bool = False
    stop: StopReason | None = None
    detail: str = ""
    urls: int = 0
    sitemaps: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    raw_bytes: int = 0
    document_bytes: int = 0
    """Bytes after inflation (the body itself when not gzipped); at most ``max_bytes + 1``."""
    peak_open_nodes: int = 0

    @property
    def entries(self) -> int:
        return self.urls + self.sitemaps

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


class _Stop(Exception):
    def __init__(self, reason: StopReason, detail: str = "") -> None:
        super().__init__(reason, detail)
        self.reason: StopReason = reason
        self.detail = detail


Raw = tuple[str | None, float | None]
"""An entry as a reader found it: its location (None when missing) and lastmod."""
Batch = list[Raw]
"""The entries one slice of the document completed."""


# -- dates -----------------------------------------------------------------------------------

_TIME_MEMO: dict[str, float | None] = {}
_TIME_MEMO_SIZE = 4_096


def w3c_time(text: str | None) -> float | None:
    """A W3C datetime (sitemaps.org's ``lastmod``, Atom's ``updated``) as epoch seconds."""
    if text is None:
        return None
    text = text.strip()
    if text in _TIME_MEMO:
        return _TIME_MEMO[text]
    value = _read_w3c(text)
    if len(_TIME_MEMO) >= _TIME_MEMO_SIZE:
        _TIME_MEMO.clear()
    _TIME_MEMO[text] = value
    return value


def _read_w3c(text: str) -> float | None:
    if len(text) == 4 and text.isdigit():
        text += "-01-01"
    elif len(text) == 7 and text[4] == "-":
        text += "-01"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def rfc822_time(text: str | None) -> float | None:
    """An RSS ``pubDate`` (RFC 822) as epoch seconds; a W3C datetime is read too."""
    if text is None:
        return None
    try:
        moment = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return w3c_time(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# -- XML formats -----------------------------------------------------------------------------


def _local(tag: object) -> str:
    if not isinstance(tag, str):
        return ""
    return tag[tag.rfind("}") + 1:]


def _read_sitemaps_org(element: Any) -> Raw:
    loc: str | None = None
    lastmod: float | None = None
    for child in element:
        tag = child.tag
        if not isinstance(tag, str):
            continue
        if tag.endswith("loc") and _local(tag) == "loc":
            loc = (child.text or "").strip()
        elif tag.endswith("lastmod") and _local(tag) == "lastmod":
            lastmod = w3c_time(child.text)
    return loc, lastmod


def _read_rss(element: Any) -> Raw:
    loc: str | None = None
    lastmod: float | None = None
    for child in element:
        name = _local(child.tag)
        if name == "link" and loc is None:
            loc = (child.text or "").strip()
        elif name == "pubDate":
            lastmod = rfc822_time(child.text)
    return loc, lastmod


def _read_atom(element: Any) -> Raw:
    loc: str | None = None
    updated: float | None = None
    published: float | None = None
    for child in element:
        name = _local(child.tag)
        if name == "link" and loc is None and child.get("rel", "alternate") == "alternate":
            loc = (child.get("href") or "").strip()
        elif name == "updated":
            updated = w3c_time(child.text)
        elif name == "published":
            published = w3c_time(child.text)
    return loc, updated if updated is not None else published


@dataclass(frozen=True, slots=True)
class _XmlFormat:
    name: str
    entry: str
    kind: EntryKind
    read: Callable[[Any], Raw]
    direct: bool
    """Entries are children of the root (sitemaps.org); else anywhere (feeds)."""


_XML_FORMATS = {
    "urlset": _XmlFormat("urlset", "url", "url", _read_sitemaps_org, True),
    "sitemapindex": _XmlFormat("sitemapindex", "sitemap", "sitemap", _read_sitemaps_org, True),
    "rss": _XmlFormat("rss", "item", "url", _read_rss, False),
    "RDF": _XmlFormat("rss", "item", "url", _read_rss, False),
    "feed": _XmlFormat("atom", "entry", "url", _read_atom, False),
}


class _XmlSink:
    """Feeds lxml's pull parser slice by slice, reads the finished entries, prunes the tree."""

    def __init__(self, root: str, fmt: _XmlFormat, limits: SitemapLimits,
                 result: SitemapResult) -> None:
        self._fmt = fmt
        self._limits = limits
        self._result = result
        self._parser = etree.XMLPullParser(
            events=("start", "end"), tag=[f"{{*}}{root}", f"{{*}}{fmt.entry}"],
            resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
            remove_comments=True, remove_pis=True)
        self._root: Any = None
        self.ended = False

    def feed(self, data: bytes) -> Iterator[Batch]:
        for start in range(0, len(data), STEP):
            error: etree.XMLSyntaxError | None = None
            try:
                self._parser.feed(data[start:start + STEP] if len(data) > STEP else data)
            except etree.XMLSyntaxError as exc:
                error = exc
            yield self._events()
            if self.ended:
                return
            if error is not None:
                raise _Stop("malformed", str(error))
            self._prune()

    def close(self) -> Iterator[Batch]:
        if self.ended:
            return
        error: etree.XMLSyntaxError | None = None
        try:
            self._parser.close()
        except etree.XMLSyntaxError as exc:
            error = exc
        yield self._events()
        if not self.ended:
            raise _Stop("malformed", str(error) if error is not None else "document not ended")

    def _events(self) -> Batch:
        """The entries finished so far (only the root and entry elements raise events)."""
        batch: Batch = []
        read, direct, root = self._fmt.read, self._fmt.direct, self._root
        for event, element in self._parser.read_events():
            if event == "start":
                if root is None:
                    root = self._root = element
            elif element is root:
                self.ended = True
            elif not direct or element.getparent() is root:
                batch.append(read(element))
                element.clear()
        return batch

    def _prune(self) -> None:
        """Removes the finished elements along the open path (down to the current entry) and
        counts the elements the tree still holds."""
        root = self._root
        if root is None:
            return
        node = root
        while len(node) and _local(node.tag) != self._fmt.entry:
            if len(node) > 1:
                del node[:-1]
            node = node[-1]
        held = sum(1 for _ in root.iter())
        self._result.peak_open_nodes = max(self._result.peak_open_nodes, held)
        if held > self._limits.max_open_nodes:
            raise _Stop("entry_too_large", f"{held} elements held")


class _TextSink:
    """Lines of a text sitemap, as they complete."""

    def __init__(self, limits: SitemapLimits, result: SitemapResult) -> None:
        self._max = limits.max_loc_chars
        self._result = result
        self._pending = b""
        self._skipping = False
        self.ended = False
        """A text sitemap has no end of its own."""

    def feed(self, data: bytes) -> Iterator[Batch]:
        batch: Batch = []
        parts = data.split(b"\n")
        last = len(parts) - 1
        for index, part in enumerate(parts):
            if self._skipping:
                self._skipping = index == last
                continue
            line = self._pending + part
            if index == last:
                self._pending = line
                break
            self._pending = b""
            self._line(line, batch)
        if len(self._pending) > self._max:
            self._result.refuse("too_long")
            self._pending = b""
            self._skipping = True
        yield batch

    def close(self) -> Iterator[Batch]:
        batch: Batch = []
        line, self._pending = self._pending, b""
        self._line(line, batch)
        yield batch

    def _line(self, line: bytes, batch: Batch) -> None:
        line = line.strip()
        if not line:
            return
        if not line[:8].lower().startswith(_TEXT_STARTS):
            self._result.refuse("not_http")
            return
        try:
            batch.append((line.decode("utf-8"), None))
        except UnicodeDecodeError:
            self._result.refuse("not_utf8")


# -- format detection ------------------------------------------------------------------------

_MORE = "more"


def _scan_prolog(buf: bytes) -> tuple[str, str]:
    """Reads what precedes the root element: ``("root", local name)``, ``(_MORE, "")`` when the
    bytes end first, ``("dtd", "")`` for a document type declaration, ``("bad", "")``."""
    i, n = 0, len(buf)
    while True:
        while i < n and buf[i] in _WHITESPACE:
            i += 1
        if i + 1 >= n:
            return _MORE, ""
        if buf[i] != 0x3C:
            return "bad", ""
        if buf[i + 1] in b"?!":
            i = _skip_markup(buf, i)
            if i < 0:
                return ("dtd", "") if i == _DTD else (_MORE, "") if i == _NEED else ("bad", "")
            continue
        match = _ROOT_NAME.match(buf, i + 1)
        if match is None:
            return "bad", ""
        if match.end() == n:
            return _MORE, ""
        return "root", match.group().decode("utf-8", "replace").rpartition(":")[2]


_NEED, _DTD, _BAD = -1, -2, -3


def _skip_markup(buf: bytes, i: int) -> int:
    """The index after the declaration, comment or processing instruction at ``i``, or
    ``_NEED`` (not complete yet), ``_DTD`` or ``_BAD``."""
    if buf.startswith(b"<?", i):
        end = buf.find(b"?>", i + 2)
        return _NEED if end < 0 else end + 2
    if buf.startswith(b"<!--", i):
        end = buf.find(b"-->", i + 4)
        return _NEED if end < 0 else end + 3
    if len(buf) - i < 9:
        return _NEED
    return _DTD if buf[i:i + 9].upper() == b"<!DOCTYPE" else _BAD


def _text_hint(url: str, content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "text/plain" or urlsplit(url).path.lower().endswith(".txt")


def _looks_like_text(head: bytes) -> bool | None:
    """True when the document starts with an http(s) URL, None when too short to tell."""
    lowered = head[:8].lower()
    if any(lowered.startswith(start) for start in _TEXT_STARTS):
        return True
    if len(lowered) < 8 and any(start.startswith(lowered) for start in _TEXT_STARTS):
        return None
    return False


# -- the parser ------------------------------------------------------------------------------

_Sink = _XmlSink | _TextSink


class SitemapParser:
    """Push parser of one sitemap: ``feed`` each chunk of the body, then ``close``; both return
    the entries completed. ``result`` holds the counts and the stop reason. Once stopped, or
    after ``close``, feeding does nothing."""

    def __init__(self, *, url: str, content_type: str | None,
                 limits: SitemapLimits = DEFAULT_LIMITS) -> None:
        self.result = SitemapResult(url=url)
        self._limits = limits
        self._text_hint = _text_hint(url, content_type)
        self._head = b""
        self._sniffed = False
        self._inflater: Any = None
        self._between_members: bytes | None = None
        """Bytes after a finished gzip member (None: inside one)."""
        self._trailing_ignored = False
        self._prolog = b""
        self._sink: _Sink | None = None
        self._kind: EntryKind = "url"
        self._closed = False

    @property
    def stopped(self) -> bool:
        return self._closed or self.result.stop is not None

    def feed(self, chunk: bytes) -> list[SitemapEntry]:
        return list(self.entries(chunk))

    def close(self) -> list[SitemapEntry]:
        return list(self.close_entries())

    def entries(self, chunk: bytes) -> Iterator[SitemapEntry]:
        """``feed`` as a generator (to be exhausted before the next chunk)."""
        if self.stopped:
            return
        self.result.raw_bytes += len(chunk)
        yield from self._guarded(self._raw(chunk))

    def close_entries(self) -> Iterator[SitemapEntry]:
        """``close`` as a generator."""
        if self.stopped:
            return
        yield from self._guarded(self._finish())
        self._closed = True

    def _guarded(self, batches: Iterator[Batch]) -> Iterator[SitemapEntry]:
        try:
            for batch in batches:
                yield from self._accepted(batch)
        except _Stop as stop:
            self.result.stop = stop.reason
            self.result.detail = stop.detail
            self._sink = None

    def _accepted(self, batch: Batch) -> Iterator[SitemapEntry]:
        result, kind, limits = self.result, self._kind, self._limits
        for loc, lastmod in batch:
            if loc is None:
                result.refuse("empty")
                continue
            if len(loc) > limits.max_loc_chars or not loc.startswith(_HTTP_STARTS):
                reason = loc_refusal(loc, limits.max_loc_chars)
                if reason is not None:
                    result.refuse(reason)
                    continue
            if result.urls + result.sitemaps >= limits.max_entries:
                raise _Stop("too_many_urls", f"more than {limits.max_entries} entries")
            if kind == "url":
                result.urls += 1
            else:
                result.sitemaps += 1
            yield SitemapEntry(kind, loc, lastmod)

    # raw bytes -> document bytes

    def _raw(self, chunk: bytes) -> Iterator[Batch]:
        if not self._sniffed:
            self._head += chunk
            if len(self._head) < len(GZIP_MAGIC):
                return
            chunk, self._head = self._head, b""
            self._sniffed = True
            if chunk.startswith(GZIP_MAGIC):
                self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self.result.gzip = True
        if self._inflater is None:
            yield from self._document(chunk)
        else:
            yield from self._inflate(chunk)

    def _inflate(self, data: bytes) -> Iterator[Batch]:
        if self._between_members is not None:
            data = self._next_member(data)
        more = bool(data)
        while more:
            budget = min(STEP, self._limits.max_bytes + 1 - self.result.document_bytes)
            try:
                out = self._inflater.decompress(data, budget)
            except zlib.error as exc:
                raise _Stop("gzip", str(exc)) from None
            data = self._inflater.unconsumed_tail
            yield from self._document(out)
            if self._inflater.eof:
                data = self._next_member(self._inflater.unused_data + data)
            # A full slice may leave output inside zlib even when no input is left.
            more = bool(data) or len(out) == budget

    def _next_member(self, rest: bytes) -> bytes:
        """After a gzip member: another member starts (its bytes are returned, to inflate), or
        bytes that are not one are ignored."""
        if self._trailing_ignored:
            return b""
        rest = (self._between_members or b"") + rest
        if len(rest) < len(GZIP_MAGIC):
            self._between_members = rest
            return b""
        if not rest.startswith(GZIP_MAGIC):
            self._between_members = b""
            self._trailing_ignored = True
            return b""
        self._between_members = None
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        return rest

    def _gzip_truncated(self) -> bool:
        if self._inflater is None:
            return False
        return not self._inflater.eof and self._between_members is None

    # document bytes -> entries

    def _document(self, data: bytes) -> Iterator[Batch]:
        if not data:
            return
        result = self.result
        room = self._limits.max_bytes - result.document_bytes
        result.document_bytes += len(data)
        over = len(data) > room
        if over:
            data = data[:max(room, 0)]
        if self._sink is None:
            data = self._sniff(data, final=False)
        if self._sink is not None and data:
            yield from self._sink.feed(data)
        if over:
            raise _Stop("too_large", f"more than {self._limits.max_bytes} bytes")

    def _sniff(self, data: bytes, *, final: bool) -> bytes:
        """Buffers the first bytes until the format is known; then makes the sink and returns
        the bytes to feed it."""
        buf = (self._prolog + data).lstrip(_WHITESPACE)
        if buf.startswith(_UTF8_BOM):
            buf = buf[len(_UTF8_BOM):].lstrip(_WHITESPACE)
        self._prolog = buf
        if not buf or (not final and _UTF8_BOM.startswith(buf)):
            return b""
        if buf[:1] == b"<":
            return self._sniff_xml(buf, final=final)
        text = _looks_like_text(buf)
        if text is None and not final:
            return b""
        if not (text or self._text_hint):
            raise _Stop("unknown_format", "neither XML nor a list of URLs")
        self.result.format = "text"
        self._sink = _TextSink(self._limits, self.result)
        self._prolog = b""
        return buf

    def _sniff_xml(self, buf: bytes, *, final: bool) -> bytes:
        state, root = _scan_prolog(buf)
        if state == _MORE:
            if final or len(buf) > PROLOG_MAX:
                raise _Stop("malformed", "no root element")
            return b""
        if state == "dtd":
            raise _Stop("dtd", "document type declaration refused")
        fmt = _XML_FORMATS.get(root)
        if state == "bad" or fmt is None:
            raise _Stop("unknown_format", f"root element {root!r}" if root else "not XML")
        self.result.format = fmt.name
        self._kind = fmt.kind
        self._sink = _XmlSink(root, fmt, self._limits, self.result)
        self._prolog = b""
        return buf

    def _finish(self) -> Iterator[Batch]:
        if not self._sniffed:
            self._sniffed = True
            yield from self._document(self._head)
        if self._sink is None:
            self._sniff(b"", final=True)
        sink = self._sink
        if sink is None:
            raise _Stop("empty", "no content")
        if self._gzip_truncated() and not sink.ended:
            raise _Stop("gzip", "truncated")
        yield from sink.close()


class SitemapStream:
    """The entries of a sitemap given as an iterable of chunks; ``result`` is final once the
    iteration ended."""

    def __init__(self, chunks: Iterable[bytes], *, url: str, content_type: str | None,
                 limits: SitemapLimits = DEFAULT_LIMITS) -> None:
        self.parser = SitemapParser(url=url, content_type=content_type, limits=limits)
        self._entries = self._run(chunks)

    @property
    def result(self) -> SitemapResult:
        return self.parser.result

    def __iter__(self) -> Iterator[SitemapEntry]:
        return self

    def __next__(self) -> SitemapEntry:
        return next(self._entries)

    def _run(self, chunks: Iterable[bytes]) -> Iterator[SitemapEntry]:
        for chunk in chunks:
            yield from self.parser.entries(chunk)
            if self.parser.stopped:
                return
        yield from self.parser.close_entries()


def parse_sitemap(chunks: Iterable[bytes], *, url: str, content_type: str | None,
                  limits: SitemapLimits = DEFAULT_LIMITS) -> SitemapStream:
    """Iterates the entries of the sitemap at ``url`` whose body comes as ``chunks``; the
    returned stream's ``result`` has the counts and the stop reason."""
    return SitemapStream(chunks, url=url, content_type=content_type, limits=limits)


def loc_refusal(loc: str | None, max_chars: int = DEFAULT_LIMITS.max_loc_chars) -> str | None:
    """Why a location cannot be an entry (None: it can): ``empty``, ``too_long``, ``relative``,
    ``not_http``."""
    if not loc:
        return "empty"
    if len(loc) > max_chars:
        return "too_long"
    head = loc[:8].lower()
    if head.startswith("http://") or head == "https://":
        return None
    scheme, colon, _ = loc.partition(":")
    if colon and scheme and "/" not in scheme and "?" not in scheme and "#" not in scheme:
        return "not_http"
    return "relative"


# -- host rules ------------------------------------------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}


def allowed(loc: str, sitemap_url: str, *, cross_submitted_hosts: frozenset[str] = frozenset(),
            relaxed: bool = False) -> str | None:
    """None when the sitemap at ``sitemap_url`` may list ``loc``, else why not: ``bad_url``,
    ``not_http``, ``cross_host`` (another origin, not announced), ``outside_directory``.

    ``cross_submitted_hosts``: the hosts (lower case, ``host:port`` for a port other than the
    scheme's default) whose robots.txt announced this sitemap; any URL of such a host, either
    scheme, is allowed. ``relaxed``: any http(s) URL is allowed."""
    try:
        target = urlsplit(loc)
        origin = _origin(target)
    except ValueError:
        return "bad_url"
    if origin is None:
        return "not_http"
    if relaxed:
        return None
    home = _sitemap_home(sitemap_url)
    if home is None:
        return "bad_url"
    if origin != home[0]:
        return None if _host_key(origin) in cross_submitted_hosts else "cross_host"
    if not _clean_path(target.path).startswith(home[1]):
        return "outside_directory"
    return None


def _origin(parts: SplitResult) -> tuple[str, str, int] | None:
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname, parts.port or _DEFAULT_PORTS[scheme]


def _host_key(origin: tuple[str, str, int]) -> str:
    scheme, host, port = origin
    return host if port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"


@lru_cache(maxsize=256)
def _sitemap_home(sitemap_url: str) -> tuple[tuple[str, str, int], str] | None:
    """The sitemap's origin and directory (its path up to and including the last ``/``)."""
    try:
        parts = urlsplit(sitemap_url)
        origin = _origin(parts)
    except ValueError:
        return None
    if origin is None:
        return None
    path = _clean_path(parts.path)
    return origin, path[:path.rfind("/") + 1]


def _clean_path(path: str) -> str:
    """The path with its dot segments (``.``, ``..``, also percent-encoded) resolved."""
    if not path:
        return "/"
    if "." not in path and "%" not in path:
        return path
    decoded = _PERCENT_DOT.sub(".", path)
    if "/." not in decoded:
        return path
    clean = posixpath.normpath(decoded)
    if clean.startswith("//"):
        clean = clean[1:]
    if decoded.endswith(("/", "/.", "/..")) and not clean.endswith("/"):
        clean += "/"
    return clean
