"""The crawl contract, checked the same way against both crawler engines.

Each test runs once with the Scrapy engine (``scrapy-cluster crawler --spider link``) and once
with the fast engine (``... --engine fast``): real crawler processes, the session's real
redis-server, the Redis Streams bus and a local site (``tests/support/contract_site.py``). The
verdict comes from the outside: the site's own request log (which URL was requested how often,
and when) and the items on ``<prefix>.crawled_firehose``. Redis is only asked when a crawl is
over (nothing queued, nothing leased).

Where one engine has a known bug, its parameter is marked ``xfail(strict=True)`` with the bug
described in the reason (it turns into a failure once the bug is fixed: remove the marker then).
Where the engines differ on purpose (documented in docs/crawler.md, "Fast engine"), each one's
documented behaviour is asserted and a comment says so.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from scrapy_cluster.sitegen.throttle_measure import max_in_window
from tests.support.addresses import CRAWL_CONTRACT
from tests.support.contract_checks import (
    ERROR_ITEM_FIELDS,
    GRAPH_HOSTS,
    PAGE_ITEM_FIELDS,
    WHOLE_SITE_DEPTH,
    by_url,
    crawl_generated_site,
    once_each,
)
from tests.support.contract_crawl import ENGINES, CrawlRig
from tests.support.contract_site import (
    ROBOTS_PATH,
    ContractSite,
    Reply,
    absolute_links,
    generated_graph,
    html_page,
)
from tests.support.services import free_port

pytestmark = pytest.mark.integration

RigFactory = Callable[..., CrawlRig]
SiteFactory = Callable[..., ContractSite]


# --- 1. a generated site: every page fetched once, one item per page ------------------------
# (``crawl_generated_site``, in tests/support/contract_checks.py: test_kafka_bus runs it too)

@pytest.mark.parametrize("crawlers", [1, 2])
def test_generated_site_every_page_fetched_once_and_delivered_once(
        crawlers: int, make_rig: RigFactory, make_site: SiteFactory) -> None:
    crawl_generated_site(make_site(GRAPH_HOSTS), make_rig(), crawlers)


def test_both_engines_at_once_fetch_every_page_once(
        tmp_path: Path, redis_client: redis.Redis, redis_url: str,
        make_site: SiteFactory) -> None:
    """One crawler of each engine on the same crawl (docs: both engines can crawl the same
    crawls at once): still every page once, one item per page."""
    prefix = f"contract{uuid.uuid4().hex[:8]}"
    rigs = {engine: CrawlRig(tmp_path / engine, redis_url, engine, prefix=prefix,
                             scrapy_settings={"USER_AGENT": f"contract-{engine}"})
            for engine in ENGINES}
    site = make_site(GRAPH_HOSTS)
    try:
        rigs["fast"].start()
        crawl_generated_site(site, rigs["scrapy"], other_crawlers=1)
        assert rigs["fast"].processes[0][0].poll() is None, rigs["fast"].logs()
        # both took part (told apart by their User-Agent)
        agents = Counter(hit.agent for hit in site.log() if hit.path != ROBOTS_PATH)
        assert set(agents) == {"contract-scrapy", "contract-fast"}, agents
    finally:
        for rig in rigs.values():
            rig.close()


# --- 2. the crawl's filters decide exactly which URLs are fetched ---------------------------

FILTER_HOST, OTHER_DOMAIN = CRAWL_CONTRACT.hosts(103, 104)


def filter_site(make_site: SiteFactory) -> ContractSite:
    site = make_site((FILTER_HOST, OTHER_DOMAIN))
    a, b = FILTER_HOST, OTHER_DOMAIN
    site.add_html(a, "/f/index.html", [
        "/f/a.html", site.url(b, "/f/offsite.html"), "/f/deny-this.html", "/other/outside.html",
        "/f/report.pdf", "/f/archive.zip", "/f/photo.jpg", "/f/d1.html"])
    site.add_html(a, "/f/a.html", ["/f/b.html", site.url(b, "/f/offsite-2.html"),
                                   "/f/index.html"])
    site.add_html(a, "/f/d1.html", ["/f/d2.html"])
    site.add_html(a, "/f/d2.html", ["/f/d3.html"])  # d3: depth 3, past maxdepth 2
    for path in ("/f/b.html", "/f/d3.html", "/f/deny-this.html", "/other/outside.html"):
        site.add_html(a, path, [])
    for path in ("/f/offsite.html", "/f/offsite-2.html"):
        site.add_html(b, path, [])
    site.add(a, "/f/report.pdf", Reply(content_type="application/pdf", body=b"%PDF-1.4\n%%EOF\n"))
    site.add(a, "/f/archive.zip", Reply(content_type="application/zip", body=b"PK\x05\x06"))
    site.add(a, "/f/photo.jpg", Reply(content_type="image/jpeg", body=b"\xff\xd8\xff\xd9"))
    # the default extension list (no deny_extensions in the crawl)
    site.add_html(a, "/x/index.html", ["/x/page.html", "/x/photo.jpg", "/x/doc.pdf",
                                       "/x/style.css", "/x/notes.txt"])
    site.add_html(a, "/x/page.html", [])
    site.add(a, "/x/notes.txt", Reply(content_type="text/plain", body=b"notes"))
    for path in ("/x/photo.jpg", "/x/doc.pdf", "/x/style.css"):
        site.add(a, path, Reply(content_type="application/octet-stream", body=b"\x00"))
    return site


def test_filters_allowed_domains_regexes_extensions_and_maxdepth_fetch_exactly_the_allowed(
        make_rig: RigFactory, make_site: SiteFactory) -> None:
    site = filter_site(make_site)
    rig = make_rig()
    rig.start()

    def url(path: str) -> str:
        return site.url(FILTER_HOST, path)

    seed = url("/f/index.html")
    crawlid = rig.feed(seed, maxdepth=2, allowed_domains=[FILTER_HOST], allow_regex=["/f/"],
                       deny_regex=["deny"], deny_extensions=["pdf", "zip"])
    items = rig.collect(crawlid)
    # deny_extensions given: .jpg is not in the crawl's list, so it is fetched
    expected = {url(p) for p in ("/f/index.html", "/f/a.html", "/f/photo.jpg", "/f/d1.html",
                                 "/f/b.html", "/f/d2.html")}
    assert site.hits(robots=True) == once_each(expected | {url(ROBOTS_PATH)})
    assert site.hits([OTHER_DOMAIN], robots=True) == Counter()
    found = by_url(items)
    assert set(found) == expected
    assert {u: found[u]["status_code"] for u in expected} == dict.fromkeys(expected, 200)
    # an item lists every link of its page, followed or not
    assert [link["url"] for link in found[seed]["links"]] == absolute_links(seed, [
        "/f/a.html", site.url(OTHER_DOMAIN, "/f/offsite.html"), "/f/deny-this.html",
        "/other/outside.html", "/f/report.pdf", "/f/archive.zip", "/f/photo.jpg",
        "/f/d1.html"])

    # no deny_extensions: Scrapy's default list (images, documents, css...) applies
    seed = url("/x/index.html")
    crawlid = rig.feed(seed, maxdepth=1)
    items = rig.collect(crawlid)
    expected = {seed, url("/x/page.html"), url("/x/notes.txt")}
    assert site.hits([FILTER_HOST]) - once_each(
        {url(p) for p in ("/f/index.html", "/f/a.html", "/f/photo.jpg", "/f/d1.html",
                          "/f/b.html", "/f/d2.html")}) == once_each(expected)
    assert set(by_url(items)) == expected


# --- 3. robots.txt ------------------------------------------------------------------------

ROBOTS_HOST, MOVED_ROBOTS_HOST, AGENT_ROBOTS_HOST = CRAWL_CONTRACT.hosts(105, 119, 120)
ROBOTS_TXT = "User-agent: *\nDisallow: /private/\nDisallow: /r/secret-\n"
# the crawlers' User-Agent is Scrapy's ("Scrapy/<version> (+https://scrapy.org)"): the
# Scrapy group applies to them, not the * group
AGENT_ROBOTS_TXT = "User-agent: Scrapy\nDisallow: /r/scrapy-no/\n\nUser-agent: *\nDisallow: /r/\n"


def test_robots_txt_disallowed_pages_are_never_fetched_and_give_error_items(
        make_rig: RigFactory, make_site: SiteFactory) -> None:
    site = make_site((ROBOTS_HOST, MOVED_ROBOTS_HOST, AGENT_ROBOTS_HOST))
    site.set_robots(ROBOTS_HOST, ROBOTS_TXT)
    # a robots.txt that redirects: the target's rules apply
    site.set_robots(MOVED_ROBOTS_HOST, Reply(302, headers=(("Location", "/real-robots.txt"),)))
    site.add(MOVED_ROBOTS_HOST, "/real-robots.txt", Reply(
        content_type="text/plain", body=b"User-agent: *\nDisallow: /r/no/\n"))
    site.set_robots(AGENT_ROBOTS_HOST, AGENT_ROBOTS_TXT)

    def url(path: str, host: str = ROBOTS_HOST) -> str:
        return site.url(host, path)

    site.add_html(ROBOTS_HOST, "/r/index.html", ["/private/a.html", "/private/b.html",
                                                 "/r/open.html", "/r/secret-1.html"])
    site.add_html(ROBOTS_HOST, "/r/open.html", ["/private/a.html", "/r/open-2.html",
                                                "/r/index.html"])
    for path in ("/r/open-2.html", "/private/a.html", "/private/b.html", "/r/secret-1.html"):
        site.add_html(ROBOTS_HOST, path, [])
    for host, refused in ((MOVED_ROBOTS_HOST, "/r/no/1.html"),
                          (AGENT_ROBOTS_HOST, "/r/scrapy-no/1.html")):
        site.add_html(host, "/r/index.html", [refused, "/r/yes.html"])
        site.add_html(host, refused, [])
        site.add_html(host, "/r/yes.html", [])
    rig = make_rig()
    rig.start()

    crawlid = rig.feed([url("/r/index.html", host) for host in site.hosts], maxdepth=5)
    items = by_url(rig.collect(crawlid))

    allowed = {url(p) for p in ("/r/index.html", "/r/open.html", "/r/open-2.html")} | {
        url(p, host) for host in (MOVED_ROBOTS_HOST, AGENT_ROBOTS_HOST)
        for p in ("/r/index.html", "/r/yes.html")}
    disallowed = {url(p) for p in ("/private/a.html", "/private/b.html", "/r/secret-1.html")}
    disallowed |= {url("/r/no/1.html", MOVED_ROBOTS_HOST),
                   url("/r/scrapy-no/1.html", AGENT_ROBOTS_HOST)}
    robots = {url(ROBOTS_PATH, host) for host in site.hosts}
    assert site.hits(robots=True) == \
        once_each(allowed | robots | {url("/real-robots.txt", MOVED_ROBOTS_HOST)})
    assert set(items) == allowed | disallowed
    assert {u: items[u]["status_code"] for u in allowed} == dict.fromkeys(allowed, 200)
    assert {u: (set(items[u]), items[u]["error"], items[u]["status_code"],
                items[u]["retry_times"]) for u in disallowed} == dict.fromkeys(
        disallowed, (ERROR_ITEM_FIELDS, {"type": "IgnoreRequest",
                                         "message": "Forbidden by robots.txt",
                                         "reason": "robots"}, None, 0))


# --- 4. the throttle is never exceeded at the site ------------------------------------------
# Two crawler processes share each domain's limit (it is kept in Redis, cluster-wide).

THROTTLED = {CRAWL_CONTRACT.host(106): DomainThrottle(window_s=1.0, hits=4, moderated=True),
             CRAWL_CONTRACT.host(107): DomainThrottle(window_s=1.0, hits=3, moderated=False)}
THROTTLED_PAGES = 8


def test_throttle_never_exceeded_in_the_sites_own_log(
        make_rig: RigFactory, make_site: SiteFactory) -> None:
    site = make_site(tuple(THROTTLED))
    graphs = {host: generated_graph(site, (host,), THROTTLED_PAGES, seed=n)
              for n, host in enumerate(THROTTLED)}
    for graph in graphs.values():
        site.add_graph(graph)
    rig = make_rig()
    config = DomainConfig(rig.client, rig.frontier)
    for host, throttle in THROTTLED.items():
        config.set_throttle(host, throttle)
    rig.start()
    rig.start()  # two crawlers share each limit
    seeds = [site.url(host, "/g/0.html") for host in THROTTLED]
    expected = {url for graph in graphs.values() for url in graph}

    crawlid = rig.feed(seeds, maxdepth=WHOLE_SITE_DEPTH)
    items = rig.collect(crawlid, expected_urls=expected)

    assert site.hits() == once_each(expected)
    assert Counter(item["url"] for item in items) == once_each(expected)
    # never more than `hits` requests in any window (the frontier adds its send allowance on
    # top of each window, so the configured window is the bound the site must see)
    peaks = {host: max_in_window(site.arrivals(host), throttle.window_s)
             for host, throttle in THROTTLED.items()}
    assert {host: peaks[host] <= throttle.hits for host, throttle in THROTTLED.items()} == \
        dict.fromkeys(THROTTLED, True), peaks
    assert {host: len(site.arrivals(host)) for host in THROTTLED} == \
        dict.fromkeys(THROTTLED, THROTTLED_PAGES)


# --- 6. hostile pages ---------------------------------------------------------------------

HOSTILE_HOST = CRAWL_CONTRACT.host(108)
MAXSIZE = 12_000_000  # DOWNLOAD_MAXSIZE for this test
BUS_LIMIT = 100_000  # BUS_MAX_MESSAGE_BYTES: a larger item has its body cut
HUGE_ATTRIBUTE = 11_000_000  # past libxml2's 10 MB limit for one text or attribute node
TOO_BIG = MAXSIZE + 500_000
BROKEN_HTML = (b'<html><head><title>broken</title><body><div><p>unclosed <b><i>nest</b></i>'
               b'<table><tr><td>cell<a href="/h/from-broken.html">from broken</a></table>'
               b'</div></div></span><<<>>> &&&&#xZZZ; &#0; <a href=/h/from-broken-2.html>x'
               b'</td></tr></p><!-- a comment that never ends <a href="/h/in-comment.html">')
NUL_HTML = (b'<html><body>nul \x00 here \x01\x02\x1b control '
            b'<a href="/h/from-nul.html">n</a></body></html>')
BAD_BYTES_HTML = (b'<html><body><p>ok \xc3\xa9 then \xff\xfe lone, \xc3 truncated, \xed\xa0\x80'
                  b'</p><a href="/h/from-bad-bytes.html">caf\xe9</a></body></html>')
HUGE_ATTRIBUTE_HTML = (b'<html><body><a href="/h/before-huge.html">b</a><div data-blob="'
                       + b"A" * HUGE_ATTRIBUTE + b'">x</div>'
                       b'<a href="/h/after-huge.html">after the huge attribute</a></body></html>')
GARBAGE_HREFS = (
    "javascript:alert(1)", "javascript:void(0)", "JaVaScRiPt:location='/h/js.html'",
    "mailto:someone@example.com", "tel:+100", "data:text/html,<a href=/h/data.html>x</a>",
    f"ftp://{HOSTILE_HOST}/h/ftp.html", "http://[::1", "http://", "//", "\x01\x02",
    "https://:80/", f"http://{HOSTILE_HOST}:99999/h/bad-port.html", "", "   ", "#only-a-fragment",
    "/h/from-garbage.html")


def hostile_site(make_site: SiteFactory, refused_url: str) -> ContractSite:
    import gzip

    site = make_site((HOSTILE_HOST,))
    h = HOSTILE_HOST
    site.add_html(h, "/h/index.html", [
        "/h/broken.html", "/h/nul.html", "/h/bad-bytes.html", "/h/huge-attribute.html",
        "/h/garbage-links.html", "/h/too-big.html", "/h/too-big-chunked.html",
        "/h/gzip-bomb.html", refused_url, "/h/after.html"])
    site.add(h, "/h/broken.html", Reply(body=BROKEN_HTML))
    site.add(h, "/h/nul.html", Reply(body=NUL_HTML))
    site.add(h, "/h/bad-bytes.html", Reply(body=BAD_BYTES_HTML))
    site.add(h, "/h/huge-attribute.html", Reply(body=HUGE_ATTRIBUTE_HTML))
    garbage = "".join(f'<a href="{href}">g{n}</a>\n' for n, href in enumerate(GARBAGE_HREFS))
    site.add(h, "/h/garbage-links.html",
             Reply(body=f"<html><body>{garbage}</body></html>".encode()))
    big = b"<html><body>" + b"x" * (TOO_BIG - 26) + b"</body></html>"
    site.add(h, "/h/too-big.html", Reply(body=big))
    site.add(h, "/h/too-big-chunked.html", Reply(body=big, chunked=True))
    site.add(h, "/h/gzip-bomb.html", Reply(body=gzip.compress(bytes(2 * MAXSIZE)),
                                           headers=(("Content-Encoding", "gzip"),)))
    site.add_html(h, "/h/after.html", ["/h/after-2.html"])
    for path in ("/h/from-broken.html", "/h/from-broken-2.html", "/h/from-nul.html",
                 "/h/from-bad-bytes.html", "/h/before-huge.html", "/h/after-huge.html",
                 "/h/from-garbage.html", "/h/after-2.html", "/h/later.html",
                 "/h/later-2.html", "/h/in-comment.html", "/h/js.html", "/h/data.html"):
        site.add_html(h, path, ["/h/later-2.html"] if path == "/h/later.html" else [])
    return site


def test_hostile_pages_give_their_items_and_the_crawler_keeps_crawling(
        engine: str, make_rig: RigFactory, make_site: SiteFactory) -> None:
    refused_url = f"http://{HOSTILE_HOST}:{free_port(HOSTILE_HOST)}/refused.html"  # nobody there
    site = hostile_site(make_site, refused_url)

    def url(path: str) -> str:
        return site.url(HOSTILE_HOST, path)

    rig = make_rig(scrapy_settings={"DOWNLOAD_MAXSIZE": MAXSIZE, "RETRY_TIMES": 1},
                   env={"BUS_MAX_MESSAGE_BYTES": str(BUS_LIMIT)})
    process = rig.start()
    crawlid = rig.feed(url("/h/index.html"), maxdepth=3)
    items = by_url(rig.collect(crawlid))

    pages = {url(p) for p in (
        "/h/index.html", "/h/broken.html", "/h/nul.html", "/h/bad-bytes.html",
        "/h/huge-attribute.html", "/h/garbage-links.html", "/h/after.html", "/h/after-2.html",
        "/h/from-broken.html", "/h/from-broken-2.html", "/h/from-nul.html",
        "/h/from-bad-bytes.html", "/h/before-huge.html", "/h/after-huge.html",
        "/h/from-garbage.html")}
    too_large = {url(p) for p in ("/h/too-big.html", "/h/too-big-chunked.html",
                                  "/h/gzip-bomb.html")}
    # the site saw each page once (the too-large ones are not retried), nothing else: no
    # garbage link, nothing from inside a comment
    assert site.hits(robots=True) == once_each(pages | too_large | {url(ROBOTS_PATH)})
    assert set(items) == pages | too_large | {refused_url}
    assert {u: (set(items[u]), items[u]["status_code"]) for u in pages} == \
        dict.fromkeys(pages, (PAGE_ITEM_FIELDS, 200))

    def links(path: str) -> list[str]:
        return [link["url"] for link in items[url(path)]["links"]]

    # broken markup: the parser recovers, the links outside the comment are found
    assert links("/h/broken.html") == [url("/h/from-broken.html"), url("/h/from-broken-2.html")]
    assert items[url("/h/broken.html")]["body"] == BROKEN_HTML.decode()
    # NUL and control characters are valid UTF-8: a text body, byte for byte
    assert (items[url("/h/nul.html")]["body"], links("/h/nul.html")) == \
        (NUL_HTML.decode(), [url("/h/from-nul.html")])
    # invalid UTF-8 under a UTF-8 header: the exact bytes, base64; links still read
    bad = items[url("/h/bad-bytes.html")]
    assert (base64.b64decode(bad["body"]), bad["encoding_base64"], bad["encoding"],
            links("/h/bad-bytes.html")) == \
        (BAD_BYTES_HTML, True, "utf-8", [url("/h/from-bad-bytes.html")])
    # an 11 MB attribute: links on both sides of it; the item's body is cut to the bus limit
    huge = items[url("/h/huge-attribute.html")]
    assert (links("/h/huge-attribute.html"), huge["body_truncated"], huge["body_length"],
            HUGE_ATTRIBUTE_HTML.decode().startswith(huge["body"]),
            len(huge["body"]) < BUS_LIMIT) == \
        ([url("/h/before-huge.html"), url("/h/after-huge.html")], True,
         len(HUGE_ATTRIBUTE_HTML), True, True)
    # garbage hrefs: no javascript:, mailto:, tel:, data: or ftp: link; unparsable ones
    # dropped; an empty or blank href is the page itself, a bare fragment the page with it
    # (neither fetched again: the frontier deduplicates them); an empty host or an invalid
    # port reach the frontier, which refuses them (nothing fetched, no item)
    page = url("/h/garbage-links.html")
    assert links("/h/garbage-links.html") == [
        page, "https://:80/", f"http://{HOSTILE_HOST}:99999/h/bad-port.html",
        page + "#only-a-fragment", url("/h/from-garbage.html")]
    # bodies past DOWNLOAD_MAXSIZE: error items, reason too_large, not retried
    errors = {u: (set(items[u]), items[u]["error"]["type"], items[u]["error"]["reason"],
                  items[u]["status_code"], items[u]["retry_times"]) for u in too_large}
    assert errors == {
        url("/h/too-big.html"): (ERROR_ITEM_FIELDS, "DownloadCancelledError", "too_large",
                                 None, 0),
        url("/h/too-big-chunked.html"): (ERROR_ITEM_FIELDS, "DownloadCancelledError",
                                         "too_large", None, 0),
        url("/h/gzip-bomb.html"): (ERROR_ITEM_FIELDS, "IgnoreRequest", "too_large", None, 0)}
    message = {u: items[u]["error"]["message"] for u in too_large}
    assert message[url("/h/too-big.html")] == (
        f"Expected to receive {TOO_BIG} bytes which is larger than download max size "
        f"({MAXSIZE}) in request <GET {url('/h/too-big.html')}>.")
    assert message[url("/h/too-big-chunked.html")] == (
        f"download cancelled: the body grew past DOWNLOAD_MAXSIZE ({MAXSIZE} bytes) with no "
        f"Content-Length")
    # Documented difference (docs/crawler.md, "Fast engine"): a body cut at DOWNLOAD_MAXSIZE
    # while decompressing names its compressed size with Scrapy, only the decompressed size
    # with the fast engine.
    compressed = r"\d+ B compressed, " if engine == "scrapy" else ""
    assert re.fullmatch(
        rf"Ignored response <200 {re.escape(url('/h/gzip-bomb.html'))}> because its body "
        rf"\({compressed}\d+ B decompressed so far\) exceeded DOWNLOAD_MAXSIZE \({MAXSIZE} B\) "
        rf"during decompression\.", message[url("/h/gzip-bomb.html")]), message

    # a refused connection: the same error type and reason after the retries; the message
    # is the HTTP client's own (documented difference, docs/crawler.md "Fast engine": the
    # fast engine's is aiohttp's)
    refused = items[refused_url]
    port = refused_url.split(":")[2].split("/")[0]
    assert (set(refused), refused["error"]["type"], refused["error"]["reason"],
            refused["retry_times"], refused["error"]["message"]) == \
        (ERROR_ITEM_FIELDS, "DownloadConnectionRefusedError", "download_failed", 1,
         "Connection was refused by other side: 111: Connection refused." if engine == "scrapy"
         else f"Cannot connect to host {HOSTILE_HOST}:{port} ssl:default "
              f"[Connect call failed ('{HOSTILE_HOST}', {port})]")

    # the crawler is still there and crawls a new crawl as usual
    assert process.poll() is None, rig.logs()
    before = site.hits()
    crawlid = rig.feed(url("/h/later.html"), maxdepth=1)
    later = by_url(rig.collect(crawlid))
    assert site.hits() - before == once_each({url("/h/later.html"), url("/h/later-2.html")})
    assert {u: item["status_code"] for u, item in later.items()} == \
        {url("/h/later.html"): 200, url("/h/later-2.html"): 200}
    assert process.poll() is None, rig.logs()


# --- 6a. a page slower than DOWNLOAD_TIMEOUT ----------------------------------------------

SLOW_HOST = CRAWL_CONTRACT.host(121)
DOWNLOAD_TIMEOUT_S = 1
SLOW_PAGE_S = 3.0  # answers after DOWNLOAD_TIMEOUT_S: every attempt times out
# Regression (found by this suite): the fast engine said 'took longer than 1 seconds.' where
# the Scrapy engine (DownloadTimeoutMiddleware reads DOWNLOAD_TIMEOUT with getfloat) says
# '1.0 seconds.' (crawler/fast/fetch.py formatted it with ':g').
def test_a_page_slower_than_download_timeout_gives_one_timeout_item_after_the_retries(
        make_rig: RigFactory, make_site: SiteFactory) -> None:
    site = make_site((SLOW_HOST,))
    slow = site.add_html(SLOW_HOST, "/s/slow.html", [], delay_s=SLOW_PAGE_S)
    seed = site.add_html(SLOW_HOST, "/s/index.html", ["/s/slow.html", "/s/quick.html"])
    quick = site.add_html(SLOW_HOST, "/s/quick.html", [])
    rig = make_rig(scrapy_settings={"DOWNLOAD_TIMEOUT": DOWNLOAD_TIMEOUT_S, "RETRY_TIMES": 1})
    process = rig.start()
    crawlid = rig.feed(seed, maxdepth=1)
    items = by_url(rig.collect(crawlid))

    # one request per attempt (RETRY_TIMES 1: two), then one error item
    assert site.hits() == once_each({seed, quick}) + Counter({slow: 2})
    assert {u: item["status_code"] for u, item in items.items()} == \
        {seed: 200, quick: 200, slow: None}
    assert (set(items[slow]), items[slow]["error"], items[slow]["retry_times"]) == \
        (ERROR_ITEM_FIELDS, {"type": "DownloadTimeoutError", "reason": "timeout",
                             "message": f"Getting {slow} took longer than "
                                        f"{float(DOWNLOAD_TIMEOUT_S)} seconds."}, 1)
    assert process.poll() is None, rig.logs()


# --- 6b. pages that are not HTML -----------------------------------------------------------

NON_HTML_HOST = CRAWL_CONTRACT.host(110)

# Regression (found by this suite): the Scrapy engine lost every application/json page (a
# JsonResponse's selector root is the parsed JSON, crawler/page_links.py called root.iter() on it:
# AttributeError, 'Spider error', lease finished, no item on the topic).
def test_non_html_pages_give_one_item_each(make_rig: RigFactory, make_site: SiteFactory) -> None:
    site = make_site((NON_HTML_HOST,))
    h = NON_HTML_HOST

    def url(path: str) -> str:
        return site.url(h, path)

    bodies = {"/n/data.json": ("application/json", b'{"a": [1, 2], "b": "c"}'),
              "/n/list.json": ("application/json", b"[1, 2]"),
              "/n/notes.txt": ("text/plain", b"plain notes"),
              "/n/anchors.txt": ("text/plain", b'<a href="/n/from-text.html">t</a>'),
              "/n/feed.xml": ("application/xml", b'<?xml version="1.0"?><feed>'
                              b'<a href="/n/from-xml.html">x</a></feed>'),
              "/n/blob": ("application/octet-stream", b"\x00\x01\x02\xff")}
    site.add_html(h, "/n/index.html", list(bodies))
    for path, (content_type, body) in bodies.items():
        site.add(h, path, Reply(content_type=content_type, body=body))
    site.add_html(h, "/n/from-text.html", [])
    site.add_html(h, "/n/from-xml.html", [])
    rig = make_rig()
    rig.start()

    crawlid = rig.feed(url("/n/index.html"), maxdepth=2)
    items = by_url(rig.collect(crawlid))

    pages = {url(p) for p in (*bodies, "/n/index.html", "/n/from-text.html",
                              "/n/from-xml.html")}
    assert site.hits() == once_each(pages)
    assert set(items) == pages  # one item per fetched page, whatever its type
    got = {p: (items[url(p)]["status_code"], base64.b64decode(items[url(p)]["body"])
               if items[url(p)]["encoding_base64"] else items[url(p)]["body"].encode(),
               [link["url"] for link in items[url(p)]["links"]]) for p in bodies}
    assert got == {
        "/n/data.json": (200, bodies["/n/data.json"][1], []),
        "/n/list.json": (200, bodies["/n/list.json"][1], []),
        "/n/notes.txt": (200, bodies["/n/notes.txt"][1], []),
        "/n/anchors.txt": (200, bodies["/n/anchors.txt"][1], [url("/n/from-text.html")]),
        "/n/feed.xml": (200, bodies["/n/feed.xml"][1], [url("/n/from-xml.html")]),
        "/n/blob": (200, bodies["/n/blob"][1], [])}


# --- 6c. the site receives exactly the URL an item names ------------------------------------

EXACT_URL_HOST = CRAWL_CONTRACT.host(117)
# Regression (found by this suite): the fast engine passed the URL string to aiohttp, whose
# yarl.URL(str) re-quoted it: '/u/%zz.html' went out as '/u/%25zz.html', '/u/%7Etilde.html' as
# '/u/~tilde.html', '?x=%41' as '?x=A', while the item named the URL as queued.
def test_the_site_receives_exactly_the_url_each_item_names(
        make_rig: RigFactory, make_site: SiteFactory) -> None:
    site = make_site((EXACT_URL_HOST,))
    h = EXACT_URL_HOST
    hrefs = ["/u/%7Etilde.html", "/u/%zz.html", "/u/q.html?x=%41", "/u/a%2Fb.html",
             "/u/caf\u00e9.html", "/u/a b.html", "/u/q.html?b=2&a=1"]
    site.add(h, "/u/index.html", Reply(body=html_page("exact", hrefs).replace(
        b"caf\xc3\xa9", "caf\u00e9".encode())))
    rig = make_rig()
    rig.start()

    seed = site.url(h, "/u/index.html")
    crawlid = rig.feed(seed, maxdepth=1)
    items = by_url(rig.collect(crawlid))

    expected = {seed, *(site.url(h, p) for p in (
        "/u/%7Etilde.html", "/u/%zz.html", "/u/q.html?x=%41", "/u/a%2Fb.html",
        "/u/caf%C3%A9.html", "/u/a%20b.html", "/u/q.html?b=2&a=1"))}
    assert set(items) == expected
    assert {item["response_url"] for item in items.values()} == expected
    assert site.hits() == once_each(expected)


# --- 6d. hostile redirects ----------------------------------------------------------------

REDIRECT_HOST = CRAWL_CONTRACT.host(118)
REDIRECT_MAX = 3  # REDIRECT_MAX_TIMES for these tests
REDIRECT_BODY = b"<html><body><a href='/t/body-link.html'>moved</a></body></html>"


def redirect_site(make_site: SiteFactory, locations: dict[str, str]) -> ContractSite:
    site = make_site((REDIRECT_HOST,))
    for path, location in locations.items():
        site.add(REDIRECT_HOST, path, Reply(302, headers=(("Location", location),),
                                            body=REDIRECT_BODY))
    for path in ("/t/rel.html", "/t/scheme-relative.html", "/t/caf%E9%20x.html",
                 "/t/frag.html", "/t/body-link.html", "/t/from-no-location.html"):
        site.add_html(REDIRECT_HOST, path, [])
    return site


def test_hostile_redirects_give_one_item_each_and_stay_bounded(
        engine: str, make_rig: RigFactory, make_site: SiteFactory) -> None:
    locations = {"/r/javascript": "javascript:alert(1)", "/r/mailto": "mailto:a@example.com",
                 "/r/empty": "", "/r/self": "/r/self", "/r/relative": "../t/rel.html",
                 "/r/latin-1": "/t/caf\xe9 x.html", "/r/fragment": "/t/frag.html#z",
                 "/r/control": "/t/ctl\x01.html"}
    site = redirect_site(make_site, locations)
    locations["/r/scheme-relative"] = f"//{REDIRECT_HOST}:{site.port}/t/scheme-relative.html"
    site.add(REDIRECT_HOST, "/r/scheme-relative", Reply(302, headers=(
        ("Location", locations["/r/scheme-relative"]),)))
    site.add(REDIRECT_HOST, "/r/no-location", Reply(301, body=html_page(
        "no location", ["/t/from-no-location.html"])))
    site.add_html(REDIRECT_HOST, "/r/index.html", [*locations, "/r/no-location"])

    def url(path: str) -> str:
        return site.url(REDIRECT_HOST, path)

    rig = make_rig(scrapy_settings={"REDIRECT_MAX_TIMES": REDIRECT_MAX, "RETRY_TIMES": 0})
    process = rig.start()
    crawlid = rig.feed(url("/r/index.html"), maxdepth=2)
    items = by_url(rig.collect(crawlid, timeout_s=15))

    def outcome(path: str) -> tuple[Any, ...]:
        item = items[url(path)]
        error = item.get("error")
        return (item["status_code"], error and (error["type"], error["message"],
                                                error["reason"]))

    loop = (None, ("IgnoreRequest", "max redirections reached", "too_many_redirects"))
    common: dict[str, tuple[Any, ...]] = {
        "/r/index.html": (200, None),
        # a redirect to itself (an empty Location is the page itself): REDIRECT_MAX_TIMES,
        # then an error item named after the first URL
        "/r/empty": loop, "/r/self": loop,
        # the target's item names the target; the redirect itself gives no item
        "/t/rel.html": (200, None), "/t/scheme-relative.html": (200, None),
        "/t/caf%E9%20x.html": (200, None), "/t/frag.html#z": (200, None),
        "/t/ctl%01.html": (404, None),
        # a 3xx without Location is a page like any other: its item and links
        "/r/no-location": (301, None), "/t/from-no-location.html": (200, None)}
    # a redirect to a URL without "://" (javascript:, mailto:): scrapy.Request refuses it, so
    # both engines send an error item and follow nothing of the 3xx's body
    per_engine = {path: (None, ("ValueError", f"Missing scheme in request url: {target}",
                                "download_failed"))
                  for path, target in (("/r/javascript", "javascript:alert(1)"),
                                       ("/r/mailto", "mailto:a@example.com"))}
    assert {site.split(u)[1]: outcome(site.split(u)[1]) for u in items} == \
        {**common, **per_engine}
    assert {site.split(u)[1]: n for u, n in site.hits().items()} == {
        "/r/index.html": 1, "/r/javascript": 1, "/r/mailto": 1,
        "/r/empty": REDIRECT_MAX + 1, "/r/self": REDIRECT_MAX + 1,
        "/r/relative": 1, "/t/rel.html": 1, "/r/scheme-relative": 1,
        "/t/scheme-relative.html": 1, "/r/latin-1": 1, "/t/caf%E9%20x.html": 1,
        "/r/fragment": 1, "/t/frag.html": 1, "/r/control": 1, "/t/ctl%01.html": 1,
        "/r/no-location": 1, "/t/from-no-location.html": 1}
    assert process.poll() is None, rig.logs()


# Regression (found by this suite): in the fast engine a Location 'http://[::1' made
# redirect_target() raise ValueError; the page was given back and fetched again at once, for
# ever (~20 requests/s), never giving an item, and the crawl never completed.
def test_a_redirect_to_a_malformed_url_gives_one_error_item(
        make_rig: RigFactory, make_site: SiteFactory) -> None:
    site = make_site((REDIRECT_HOST,))
    bad = site.add(REDIRECT_HOST, "/r/bad-ipv6", Reply(302, headers=(
        ("Location", "http://[::1"),)))
    rig = make_rig(scrapy_settings={"RETRY_TIMES": 0})
    process = rig.start()
    crawlid = rig.feed(bad, maxdepth=1)
    items = rig.collect(crawlid, timeout_s=5)  # a second or two when it works

    assert site.hits() == once_each({bad})
    assert [(item["url"], item["status_code"], item["error"]) for item in items] == \
        [(bad, None, {"type": "ValueError", "message": "Invalid IPv6 URL",
                      "reason": "download_failed"})]
    assert process.poll() is None, rig.logs()


# Regression (found by this suite): the fast engine parsed JSON as HTML and followed the links
# in its strings.
def test_a_json_page_has_no_links_even_with_markup_in_its_strings(
        make_rig: RigFactory, make_site: SiteFactory) -> None:
    site = make_site((NON_HTML_HOST,))
    body = b'{"html": "<a href=\'/n/from-json.html\'>x</a>"}'
    page = site.add(NON_HTML_HOST, "/n/markup.json",
                    Reply(content_type="application/json", body=body))
    site.add_html(NON_HTML_HOST, "/n/from-json.html", [])
    rig = make_rig()
    rig.start()
    crawlid = rig.feed(page, maxdepth=1)
    items = rig.collect(crawlid)

    assert [(item["url"], item["status_code"], item["body"], item["links"])
            for item in items] == [(page, 200, body.decode(), [])]
    assert site.hits() == once_each({page})
