"""The link extractor seam of the fast engine, and its lxml implementation.

An ``Extractor`` turns a body into the page's encoding and links, answering what the Scrapy
crawler's ``response.encoding`` and ``links.page_links`` answer for the same bytes: the response
class from the Content-Type (HTML, XML, other text, or not text: no encoding, no links), the
encoding from the BOM, the header, the ``<meta>`` declaration, else inferred (w3lib, as Scrapy),
the links from the page's lxml tree (``links.links_in_tree``). Another parser (selectolax, ...)
only has to implement ``__call__``.

``LxmlExtractor`` parses with lxml directly (no parsel ``Selector``), feeding the parser the
very bytes parsel feeds it for the Scrapy crawler (the decoded text, stripped, NULs removed,
re-encoded as UTF-8), so the tree, and therefore the links, are the same. For the usual page
(UTF-8 that decodes cleanly, or ASCII in an ASCII-compatible encoding) those bytes ARE the
body, so the body is handed to the parser as it is, with no decode/encode round trip; any
other page (another encoding with non-ASCII bytes, invalid bytes, a UTF-16/32 BOM, NULs) is
decoded with w3lib as before, because libxml2's decoders do not replace bad bytes as Python's
do. A document lxml refuses gives no links (never an exception).
"""

from __future__ import annotations

import codecs
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from charset_normalizer import from_bytes
from lxml import etree
from parsel.selector import SafeXMLParser
from scrapy.http import HtmlResponse, JsonResponse, TextResponse, XmlResponse
from scrapy.link import Link
from scrapy.responsetypes import responsetypes
from w3lib.encoding import (
    html_body_declared_encoding,
    html_to_unicode,
    http_content_type_encoding,
    read_bom,
    resolve_encoding,
)
from w3lib.html import get_base_url

from scrapy_cluster.crawler.common.link_rules import links_in_tree

BASE_URL_SCAN_CHARS = 4096
_DEFAULT_ENCODING = "ascii"
_UTF8_BOM = codecs.BOM_UTF8
_PY_ASCII_WHITESPACE = b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "
"""The ASCII characters ``str.strip()`` removes (``bytes.strip()`` leaves \\x1c-\\x1f)."""
_EMPTY_DOCUMENT = b"<html/>"
_ASCII_COMPATIBLE = frozenset({
    "ascii", "utf-8", "koi8-r", "koi8-u", *(f"cp125{n}" for n in range(9)),
    *(f"iso8859-{n}" for n in range(1, 17) if n != 12),
})
"""Codecs (``codecs.lookup(...).name``) that decode every ASCII byte to itself, statelessly."""


@dataclass(frozen=True)
class Extracted:
    """``encoding``: the page's (None when it is not text); ``links`` at most the page limit,
    ``dropped``: hrefs past it."""

    encoding: str | None
    links: list[Link] = field(default_factory=list)
    dropped: int = 0


class Extractor(Protocol):
    def __call__(self, body: bytes, *, url: str, content_type: str | None,
                 content_disposition: str | None, max_links: int) -> Extracted: ...


def response_kind(content_type: str | None, url: str, body: bytes, *,
                  content_disposition: str | None = None) -> str:
    """``html``, ``xml``, ``json``, ``text`` or ``binary``: the Scrapy response class for these
    values (``responsetypes.from_args``, as Scrapy's download handler and
    HttpCompressionMiddleware call it for a decoded body)."""
    headers = {}
    if content_type is not None:
        headers[b"Content-Type"] = content_type.encode("latin-1")
    if content_disposition is not None:
        headers[b"Content-Disposition"] = content_disposition.encode("latin-1")
    cls = responsetypes.from_args(headers=headers, url=url, body=body)
    if issubclass(cls, HtmlResponse):
        return "html"
    if issubclass(cls, XmlResponse):
        return "xml"
    if issubclass(cls, JsonResponse):
        return "json"
    return "text" if issubclass(cls, TextResponse) else "binary"


def page_encoding(body: bytes, content_type: str | None) -> str:
    """``TextResponse.encoding`` for these bytes and Content-Type header."""
    declared = (read_bom(body)[0] or http_content_type_encoding(content_type or "")
                or html_body_declared_encoding(body))
    if declared:
        return declared
    return html_to_unicode(content_type or "", body, auto_detect_fun=_auto_detect,
                           default_encoding=_DEFAULT_ENCODING)[0]


def _auto_detect(text: bytes) -> str | None:
    for encoding in (_DEFAULT_ENCODING, "utf-8"):
        try:
            text.decode(encoding)
        except UnicodeError:
            continue
        return resolve_encoding(encoding)
    match = from_bytes(text).best()
    return resolve_encoding(match.encoding) if match else None


class LxmlExtractor:
    """Decodes like Scrapy's TextResponse and reads links from the lxml tree parsel would build
    (see module docstring)."""

    def __init__(self) -> None:
        self._parsers = threading.local()  # an lxml parser is reused, never shared by threads

    def __call__(self, body: bytes, *, url: str, content_type: str | None,
                 content_disposition: str | None, max_links: int) -> Extracted:
        kind = response_kind(content_type, url, body, content_disposition=content_disposition)
        if kind == "binary":
            return Extracted(None)
        encoding = page_encoding(body, content_type)
        if kind == "json":  # the Scrapy engine's JsonResponse has no tree: no links
            return Extracted(encoding)
        try:
            document, head = parser_input(body, encoding)
            root = self._parse(document, xml=kind == "xml")
            base_url = get_base_url(head, url, encoding)
        except (etree.LxmlError, AttributeError, ValueError, TypeError, LookupError):
            return Extracted(encoding)
        found = links_in_tree(root, base_url=base_url, page_url=url, encoding=encoding,
                              max_links=max_links)
        return Extracted(encoding, found.links, found.dropped)

    def _parse(self, document: bytes, *, xml: bool) -> Any:
        """``parsel.selector.create_root_node`` for UTF-8 bytes: a recovering parser with
        ``huge_tree``, ``<html/>`` when the document has no root. Plain lxml elements (parsel
        builds ``lxml.html`` ones): the same tree, cheaper to walk."""
        parser = self._parser(xml)
        root = etree.fromstring(document, parser=parser)
        if root is None:
            root = etree.fromstring(_EMPTY_DOCUMENT, parser=parser)
        return root

    def _parser(self, xml: bool) -> Any:
        name = "xml" if xml else "html"
        parser = getattr(self._parsers, name, None)
        if parser is None:
            cls = SafeXMLParser if xml else etree.HTMLParser
            parser = cls(recover=True, encoding="utf-8", huge_tree=True)
            setattr(self._parsers, name, parser)
        return parser


def parser_input(body: bytes, encoding: str) -> tuple[bytes, str]:
    """The bytes parsel parses for the Scrapy crawler's ``response.text`` of ``body`` (the text
    stripped, NULs removed, UTF-8, ``<html/>`` when empty), and the first
    ``BASE_URL_SCAN_CHARS`` characters of that text, where ``<base href>`` is looked for.

    ``response.text`` is w3lib's ``html_to_unicode`` of the body with ``encoding``. When that
    decoding is the identity on the body's bytes (clean UTF-8, or ASCII in an ASCII-compatible
    encoding; a UTF-8 BOM dropped) and stripping it removes only ASCII whitespace, the result
    is a slice of the body itself: no decode/encode round trip."""
    fast = _fast_codec(encoding)
    if fast is not None and b"\x00" not in body:
        data = body[len(_UTF8_BOM):] if body.startswith(_UTF8_BOM) else body
        text: str | None = None
        if data.isascii():  # a UTF-8 BOM makes w3lib decode with UTF-8: the same text
            text = data[:BASE_URL_SCAN_CHARS].decode("ascii")
        elif fast == "utf-8" and read_bom(body)[0] in (None, "utf-8"):
            try:
                text = data.decode("utf-8")[:BASE_URL_SCAN_CHARS]
            except UnicodeDecodeError:
                text = None
        if text is not None:
            stripped = data.strip(_PY_ASCII_WHITESPACE)
            if not stripped:
                return _EMPTY_DOCUMENT, text
            if stripped[0] < 0x80 and stripped[-1] < 0x80:  # else str.strip may remove more
                return stripped, text
    text = html_to_unicode(f"charset={encoding}", body)[1]
    document = text.strip().replace("\x00", "").encode("utf-8") or _EMPTY_DOCUMENT
    return document, text[:BASE_URL_SCAN_CHARS]


@lru_cache(maxsize=64)
def _fast_codec(encoding: str) -> str | None:
    """``utf-8`` or ``ascii`` when ``html_to_unicode(f"charset={encoding}", ...)`` decodes with
    UTF-8, or with a codec that maps every ASCII byte to itself; None for any other."""
    decoding = http_content_type_encoding(f"charset={encoding}")
    if decoding is None or decoding in ("utf-16", "utf-32"):
        return None
    try:
        name = codecs.lookup(decoding).name
    except LookupError:
        return None
    if name == "utf-8":
        return "utf-8"
    return "ascii" if name in _ASCII_COMPATIBLE else None
