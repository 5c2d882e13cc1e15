"""The link extractor seam of the fast engine, and its lxml implementation.

An ``Extractor`` turns a body into the page's encoding and links, answering what the Scrapy
crawler's ``response.encoding`` and ``links.page_links`` answer for the same bytes: the response
class from the Content-Type (HTML, XML, other text, or not text: no encoding, no links), the
encoding from the BOM, the header, the ``<meta>`` declaration, else inferred (w3lib, as Scrapy),
the links from the lxml tree parsel builds (``links.links_in_tree``). Another parser
(selectolax, ...) only has to implement ``__call__``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import parsel
from charset_normalizer import from_bytes
from scrapy.link import Link
from w3lib.encoding import (
    html_body_declared_encoding,
    html_to_unicode,
    http_content_type_encoding,
    read_bom,
    resolve_encoding,
)
from w3lib.html import get_base_url

from scrapy_cluster.crawler.links import links_in_tree

BASE_URL_SCAN_CHARS = 4096
_DEFAULT_ENCODING = "ascii"


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
    """``html``, ``xml``, ``text`` or ``binary``: the Scrapy response class for these values
    (``responsetypes.from_args``, as Scrapy's download handler and HttpCompressionMiddleware
    call it for a decoded body)."""
    from scrapy.http import HtmlResponse, TextResponse, XmlResponse
    from scrapy.responsetypes import responsetypes

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
    """Decodes like Scrapy's TextResponse and reads links from parsel's lxml tree."""

    def __call__(self, body: bytes, *, url: str, content_type: str | None,
                 content_disposition: str | None, max_links: int) -> Extracted:
        kind = response_kind(content_type, url, body, content_disposition=content_disposition)
        if kind == "binary":
            return Extracted(None)
        encoding = page_encoding(body, content_type)
        text = html_to_unicode(f"charset={encoding}", body)[1]
        try:
            root = parsel.Selector(text=text, type="xml" if kind == "xml" else "html").root
            base_url = get_base_url(text[:BASE_URL_SCAN_CHARS], url, encoding)
        except (AttributeError, ValueError, TypeError):
            return Extracted(encoding)
        found = links_in_tree(root, base_url=base_url, page_url=url, encoding=encoding,
                              max_links=max_links)
        return Extracted(encoding, found.links, found.dropped)
