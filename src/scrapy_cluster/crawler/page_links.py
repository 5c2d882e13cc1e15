"""The links of a Scrapy response (``common/link_rules.py`` holds the rules and the reading of
a parsed tree, shared with the fast engine)."""

from __future__ import annotations

from scrapy.http import Response, TextResponse
from scrapy.link import Link
from scrapy.utils.response import get_base_url

from scrapy_cluster.crawler.common.link_rules import PageLinks, links_in_tree


def extract_links(response: Response) -> list[Link]:
    """Every unique http(s) link of an HTML response (none for other content)."""
    return page_links(response, max_links=0).links


def page_links(response: Response, *, max_links: int) -> PageLinks:
    """The first ``max_links`` unique http(s) links of an HTML response (0: all of them; see
    ``links_in_tree``)."""
    if not isinstance(response, TextResponse):
        return PageLinks([])
    try:
        root = response.selector.root
        base_url = get_base_url(response)
    except (AttributeError, ValueError, TypeError):
        return PageLinks([])
    if not hasattr(root, "iter"):  # a JSON response's root is the parsed value: no links
        return PageLinks([])
    return links_in_tree(root, base_url=base_url, page_url=response.url,
                         encoding=response.encoding, max_links=max_links)
