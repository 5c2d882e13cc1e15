"""A crawler killed with SIGKILL mid-crawl loses no page, for both engines.

The killed process cannot hand its leases back; a new crawler reaps them once LEASE_TIMEOUT
(2 s here) passed and crawls those pages again. Judged from the outside: the site's request
log (every page requested at least once, nothing else) and the crawled topic (every page
delivered at least once, read from the beginning after the restart).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.addresses import CRAWLER_KILLED
from tests.support.contract_crawl import CrawlRig, wait_for
from tests.support.contract_site import ContractSite, generated_graph, reachable

pytestmark = pytest.mark.integration

KILL_HOST = CRAWLER_KILLED.host(109)
PAGES = 24
PAGE_DELAY_S = 0.25  # each answer takes this long: the crawl is still running when killed
KILL_AFTER_PAGES = 6
CRAWLER_ENV = {"LEASE_TIMEOUT": "2", "CRAWLER_CONCURRENCY": "4",
               "CRAWLER_PER_DOMAIN_CONCURRENCY": "4"}


def test_kill_9_mid_crawl_then_a_new_crawler_loses_no_page(
        make_rig: Callable[..., CrawlRig], make_site: Callable[..., ContractSite]) -> None:
    site = make_site((KILL_HOST,))
    graph = generated_graph(site, (KILL_HOST,), PAGES, random_links=3, seed=5)
    site.add_graph(graph, delay_s=PAGE_DELAY_S)
    seed = site.url(KILL_HOST, "/g/0.html")
    expected = set(reachable(graph, seed, PAGES))
    assert expected == set(graph)
    rig = make_rig(env=CRAWLER_ENV)
    first = rig.start()

    crawlid = rig.feed(seed, maxdepth=PAGES)
    wait_for(lambda: len(site.hits()) >= KILL_AFTER_PAGES and rig.leases() > 0, 30,
             f"{KILL_AFTER_PAGES} pages fetched with leases held")
    rig.kill(first)
    held = rig.leases()
    fetched_before = site.hits()
    delivered_before = {item["url"] for item in rig.delivered_so_far(crawlid)}
    rig.start()
    items = rig.collect(crawlid, expected_urls=expected, timeout_s=40)

    assert held > 0, "the killed crawler held no lease: nothing was in flight"
    assert set(fetched_before) < expected, "the crawl was over before the kill"
    # pages the site answered (or was answering) but whose item never reached the topic
    cut_short = set(fetched_before) - delivered_before
    assert cut_short, "no page was in flight at the kill"
    hits = site.hits()
    assert set(hits) == expected  # every page fetched at least once, nothing else
    # ... the pages cut short were fetched again after the restart
    assert {url: hits[url] > fetched_before[url] for url in cut_short} == \
        dict.fromkeys(cut_short, True)
    # every page delivered at least once (at least once: a page whose item was sent but
    # whose lease was not yet acknowledged may come twice)
    assert {item["url"] for item in items} == expected
    assert {item["status_code"] for item in items} == {200}
    assert rig.leases() == 0
