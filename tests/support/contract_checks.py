"""What more than one module of the crawl contract suite (``tests/contract/``) checks: the
fields of page and error items, one item per URL (``by_url``, ``once_each``) and case 1, a
generated site full of repeated links where every page is fetched once and delivered once
(``crawl_generated_site``: on Redis Streams in ``test_crawl_contract``, over Kafka in
``test_kafka_bus``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.support.addresses import CRAWL_CONTRACT
from tests.support.contract_crawl import CrawlRig
from tests.support.contract_site import (
    ROBOTS_PATH,
    ContractSite,
    absolute_links,
    generated_graph,
    reachable,
)

# The fields of a page item and of an error item (docs/crawler.md, "Result items"): the same
# for both engines.
PAGE_ITEM_FIELDS = frozenset({
    "url", "response_url", "status_code", "status_msg", "response_headers", "request_headers",
    "body", "encoding_base64", "body_length", "body_truncated", "links", "attrs", "appid",
    "crawlid", "spiderid", "timestamp", "encoding"})
ERROR_ITEM_FIELDS = frozenset({
    "url", "response_url", "status_code", "status_msg", "error", "retry_times",
    "request_headers", "links", "attrs", "appid", "crawlid", "spiderid", "timestamp"})


def by_url(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Items by URL, after checking there is exactly one per URL."""
    repeated = {url: n for url, n in Counter(item["url"] for item in items).items() if n > 1}
    assert not repeated, f"URLs delivered more than once: {repeated}"
    return {item["url"]: item for item in items}


def once_each(urls: set[str] | list[str]) -> Counter[str]:
    return Counter(dict.fromkeys(urls, 1))


# the generated site of case 1
GRAPH_HOSTS = CRAWL_CONTRACT.hosts(101, 102)
GRAPH_PAGES_PER_HOST = 24
WHOLE_SITE_DEPTH = 60


def crawl_generated_site(site: ContractSite, rig: CrawlRig, crawlers: int = 1, *,
                         other_crawlers: int = 0) -> None:
    """Case 1 on ``site`` with ``crawlers`` crawlers of ``rig`` besides ``other_crawlers``
    already running."""
    graph = generated_graph(site, GRAPH_HOSTS, GRAPH_PAGES_PER_HOST)
    site.add_graph(graph)
    seed = site.url(GRAPH_HOSTS[0], "/g/0.html")
    expected = set(reachable(graph, seed, WHOLE_SITE_DEPTH))
    assert expected == set(graph), "the generated graph must reach every page from the seed"
    repeated_links = sum(len(links) for links in graph.values()) - len(graph)
    assert repeated_links > 4 * len(graph), "the site must be full of repeated links"
    for _ in range(crawlers):
        rig.start()

    crawlid = rig.feed(seed, maxdepth=WHOLE_SITE_DEPTH)
    items = rig.collect(crawlid, expected_urls=expected)

    # the site's log: every page exactly once, nothing else; robots.txt once per host and
    # crawler process at most (each process reads it once)
    assert site.hits() == once_each(expected)
    robots = site.hits(robots=True) - site.hits()
    assert set(robots) == {site.url(host, ROBOTS_PATH) for host in GRAPH_HOSTS}
    assert max(robots.values()) <= crawlers + other_crawlers, robots
    # the topic: exactly one item per page, with the page as served
    assert Counter(item["url"] for item in items) == once_each(expected)
    for item in items:
        host, path = site.split(item["url"])
        body = site.reply(host, path).body
        links = list(dict.fromkeys(absolute_links(item["url"], graph[item["url"]])))
        assert (set(item), item["status_code"], item["status_msg"], item["response_url"],
                item["body"], item["body_length"], item["encoding_base64"],
                item["body_truncated"], item["encoding"], [link["url"] for link in item["links"]],
                item["appid"], item["crawlid"], item["spiderid"]) == \
            (PAGE_ITEM_FIELDS, 200, "OK", item["url"], body.decode(), len(body), False, False,
             "utf-8", links, "contract", crawlid, "link"), item["url"]
