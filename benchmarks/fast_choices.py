"""Fast-engine choices, by measurement: aiohttp vs httpx, and lxml vs selectolax for links.

Not run by CI. Usage::

    .venv/bin/python benchmarks/fast_choices.py [--pages 5000] [--concurrency 64] [--rounds 3]
        [--uvloop] [--python-site]

Starts the generated site (``scrapy_cluster.sitegen.site``: the crawl throughput benchmark's
page shape, 7 KB pages with 20 links) on four loopback hosts 127.0.0.2-5, served as static
files by nginx (one worker, ``crawl_support.start_site``) or by the Python server without
nginx / with ``--python-site``.

1. HTTP client. ``--rounds`` rounds, each fetching the same shuffled ``--pages`` URLs once with
   aiohttp (one ``ClientSession``, ``TCPConnector(limit=concurrency)``) and once with
   ``httpx.AsyncClient`` (HTTP/1.1, ``Limits(max_connections=concurrency)``), the order
   alternating from round to round, side by side in this one process. Both keep connections
   alive, read every body fully and parse nothing; ``--concurrency`` tasks share the URL list
   after a warm-up of ``--warmup`` pages on the same client. Per run: pages/s and this
   process's CPU ms per page (``time.process_time``); the table shows the median of the rounds.
   Every run is bounded by ``--pages`` and ``--time-limit``.
2. Link extraction, on ``--samples`` pages fetched from the site, one page with 1,000 absolute
   links, the same page with its same-host links made relative, and a page of edge cases: µs
   per page (median of passes, candidates interleaved) for the project's ``extract_links`` (the
   reference, from the body: ``HtmlResponse`` built, parsed, ``Link`` objects with their text)
   and for each candidate, from the body to the list of URLs. "naive" candidates are the usual
   recipe (``//a/@href`` or ``a[href]`` + ``urljoin``); "matched" ones apply the reference's
   rules (``<a>`` and ``<area>``, ``<base href>`` read as w3lib does, HTML5 whitespace
   stripped, ``safe_url_string``, http(s) only, deduplicated, fragments kept). Every
   candidate's URL list is compared with the reference's on every page; differences are printed.

Prints a markdown table and the chosen options.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import shutil
import statistics
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import aiohttp
import httpx
import lxml.html
from crawl_support import Site, free_port, start_site
from lxml import etree
from scrapy.http import HtmlResponse
from selectolax.lexbor import LexborHTMLParser
from w3lib.html import get_base_url, strip_html5_whitespace
from w3lib.url import safe_url_string

from scrapy_cluster.crawler.common.link_rules import _PLAIN_ABSOLUTE_URL
from scrapy_cluster.crawler.page_links import extract_links
from scrapy_cluster.sitegen.site import GeneratedSite, SiteConfig

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
PAGES_PER_HOST, LINKS, PAGE_BYTES = 1500, 20, 7000  # crawl_throughput.py's page shape
BIG_PAGE_LINKS = 1000
BASE_SCAN = 4096  # scrapy's get_base_url reads the first 4096 characters of the page
TIMEOUT_S = 30.0

Get = Callable[[str], Awaitable[bytes]]
ClientFactory = Callable[[int], AbstractAsyncContextManager[Get]]
Extractor = Callable[[bytes, str, str], list[str]]


# --- 1. HTTP clients ------------------------------------------------------------------------

@asynccontextmanager
async def aiohttp_client(concurrency: int) -> AsyncIterator[Get]:
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:
        async def get(url: str) -> bytes:
            async with session.get(url) as response:
                body = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{url}: HTTP {response.status}")
                return body

        yield get


@asynccontextmanager
async def httpx_client(concurrency: int) -> AsyncIterator[Get]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency,
                          keepalive_expiry=60)
    async with httpx.AsyncClient(http1=True, http2=False, limits=limits, timeout=TIMEOUT_S,
                                 trust_env=False) as client:
        async def get(url: str) -> bytes:
            response = await client.get(url)  # reads the body fully
            if response.status_code != 200:
                raise RuntimeError(f"{url}: HTTP {response.status_code}")
            return response.content

        yield get


CLIENTS: dict[str, ClientFactory] = {
    f"aiohttp {aiohttp.__version__}": aiohttp_client,
    f"httpx {httpx.__version__}": httpx_client,
}


@dataclass
class FetchRun:
    pages: int
    errors: int
    nbytes: int
    elapsed_s: float
    cpu_s: float
    served: int

    @property
    def pages_s(self) -> float:
        return self.pages / self.elapsed_s

    @property
    def cpu_ms_page(self) -> float:
        return self.cpu_s * 1000 / max(1, self.pages)


async def fetch_all(get: Get, urls: list[str], concurrency: int,
                    deadline: float) -> tuple[int, int, int]:
    """Fetch ``urls`` with ``concurrency`` tasks sharing one iterator, until done or
    ``deadline`` (monotonic): (pages, errors, bytes)."""
    pending: Iterator[str] = iter(urls)
    counts = [0, 0, 0]
    first_error: list[str] = []

    async def worker() -> None:
        for url in pending:  # bounded by len(urls)
            if time.monotonic() > deadline:
                return
            try:
                body = await get(url)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                counts[1] += 1
                if not first_error:
                    first_error.append(f"{url}: {exc!r}")
                continue
            counts[0] += 1
            counts[2] += len(body)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    if first_error:
        print(f"    first error: {first_error[0]}")
    return counts[0], counts[1], counts[2]


async def run_client(factory: ClientFactory, site: Site, urls: list[str], warmup: int,
                     concurrency: int, time_limit_s: float) -> FetchRun:
    deadline = time.monotonic() + time_limit_s
    async with factory(concurrency) as get:
        await fetch_all(get, urls[-warmup:], concurrency, deadline)
        gc.collect()
        hits = site.hits()
        cpu, start = time.process_time(), time.perf_counter()
        pages, errors, nbytes = await fetch_all(get, urls, concurrency, deadline)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        served = site.hits() - hits
    return FetchRun(pages, errors, nbytes, elapsed, cpu, served)


async def compare_clients(site: Site, args: argparse.Namespace) -> dict[str, list[FetchRun]]:
    all_urls = [f"http://{host}:{site.port}/p/{n}.html"
                for host in HOSTS for n in range(PAGES_PER_HOST)]
    runs: dict[str, list[FetchRun]] = {name: [] for name in CLIENTS}
    for round_no in range(args.rounds):
        urls = random.Random(round_no).sample(all_urls, min(args.pages, len(all_urls)))
        names = list(CLIENTS) if round_no % 2 == 0 else list(reversed(CLIENTS))
        for name in names:
            run = await run_client(CLIENTS[name], site, urls, args.warmup, args.concurrency,
                                   args.time_limit)
            runs[name].append(run)
            print(f"  round {round_no + 1} {name:14} {run.pages} pages ({run.errors} errors, "
                  f"{run.served} served, {run.nbytes / max(1, run.pages) / 1000:.1f} KB/page) "
                  f"in {run.elapsed_s:.2f} s: {run.pages_s:,.0f} pages/s, "
                  f"{run.cpu_ms_page:.3f} CPU ms/page", flush=True)
    return runs


# --- 2. Link extraction ---------------------------------------------------------------------

def reference_links(body: bytes, url: str, encoding: str) -> list[str]:
    """The project's ``extract_links``, from the body (response built and parsed here)."""
    response = HtmlResponse(url=url, body=body, encoding=encoding)
    return [link.url for link in extract_links(response)]


def naive_urls(hrefs: Iterable[str], url: str) -> list[str]:
    """Every href joined with the page URL (a bogus one, e.g. a bad IPv6 host, skipped)."""
    found = []
    for href in hrefs:
        try:
            found.append(urljoin(url, href))
        except ValueError:
            continue
    return found


def matched_urls(hrefs: Iterable[str | None], url: str, body: bytes,
                 encoding: str) -> list[str]:
    """``hrefs`` resolved and filtered as ``links.page_links`` does."""
    base_url = get_base_url(body, url, encoding, max_scan=BASE_SCAN)
    seen: set[str] = set()
    found: list[str] = []
    for href in hrefs:
        if href is None:
            continue
        href = strip_html5_whitespace(href)
        if not _PLAIN_ABSOLUTE_URL.match(href):
            try:
                href = urljoin(url, safe_url_string(urljoin(base_url, href), encoding=encoding))
            except ValueError:
                continue
        if href in seen or not href.startswith(("http://", "https://")):
            continue
        seen.add(href)
        found.append(href)
    return found


_LXML_PARSERS: dict[str, etree.HTMLParser] = {}
_LXML_HTML_PARSERS: dict[str, lxml.html.HTMLParser] = {}


def lxml_naive(body: bytes, url: str, encoding: str) -> list[str]:
    """lxml.html.fromstring + xpath //a/@href + urljoin."""
    parser = _LXML_HTML_PARSERS.get(encoding) or _LXML_HTML_PARSERS.setdefault(
        encoding, lxml.html.HTMLParser(encoding=encoding))
    root = lxml.html.fromstring(body, parser=parser)
    return naive_urls((str(href) for href in root.xpath("//a/@href")), url)


def lxml_matched(body: bytes, url: str, encoding: str) -> list[str]:
    """lxml.etree's HTML parser, <a>/<area> hrefs, the reference's rules."""
    parser = _LXML_PARSERS.get(encoding) or _LXML_PARSERS.setdefault(
        encoding, etree.HTMLParser(encoding=encoding, recover=True))
    root = etree.fromstring(body, parser)
    if root is None:
        return []
    return matched_urls((element.get("href") for element in root.iter("a", "area")),
                        url, body, encoding)


def _lexbor(body: bytes, encoding: str) -> LexborHTMLParser:
    """Lexbor reads bytes as UTF-8: other encodings are decoded first."""
    if encoding.lower().replace("-", "") in ("utf8", "ascii", "usascii"):
        return LexborHTMLParser(body)
    return LexborHTMLParser(body.decode(encoding, "replace"))


def selectolax_naive(body: bytes, url: str, encoding: str) -> list[str]:
    """LexborHTMLParser + css('a[href]') + urljoin."""
    return naive_urls((node.attributes["href"] or "" for node in _lexbor(body, encoding).css("a[href]")),
                      url)


def selectolax_matched(body: bytes, url: str, encoding: str) -> list[str]:
    """LexborHTMLParser, css('a[href], area[href]'), the reference's rules."""
    nodes = _lexbor(body, encoding).css("a[href], area[href]")
    return matched_urls((node.attributes.get("href") for node in nodes), url, body, encoding)


def lxml_hrefs(body: bytes, url: str, encoding: str) -> list[str]:
    """The parser's share only: lxml.etree parse + raw <a>/<area> hrefs, nothing resolved."""
    parser = _LXML_PARSERS.get(encoding) or _LXML_PARSERS.setdefault(
        encoding, etree.HTMLParser(encoding=encoding, recover=True))
    root = etree.fromstring(body, parser)
    return [] if root is None else [href for element in root.iter("a", "area")
                                    if (href := element.get("href")) is not None]


def selectolax_hrefs(body: bytes, url: str, encoding: str) -> list[str]:
    """The parser's share only: Lexbor parse + raw <a>/<area> hrefs, nothing resolved."""
    return [node.attributes.get("href") or ""
            for node in _lexbor(body, encoding).css("a[href], area[href]")]


EXTRACTORS: dict[str, Extractor] = {
    "reference extract_links": reference_links,
    "lxml naive": lxml_naive,
    "lxml matched": lxml_matched,
    "selectolax naive": selectolax_naive,
    "selectolax matched": selectolax_matched,
}
PARSE_ONLY: dict[str, Extractor] = {
    "(lxml parse + hrefs only)": lxml_hrefs,
    "(selectolax parse + hrefs only)": selectolax_hrefs,
}
REFERENCE = "reference extract_links"
Sample = tuple[bytes, str, str]  # body, url, encoding

EDGE_PATH = "/special/edges.html"
EDGE_PAGE = """<!DOCTYPE html><html><head><title>edges</title>
<base href="/dir/sub/"><link href="/style.css" rel="stylesheet"></head><body>
<a href="rel.html">relative to base</a> <a href="../up.html">up</a> <a href="?q=1">query</a>
<a href="#top">fragment only</a> <a href="frag.html#part">with fragment</a>
<a href=" &#10; http://127.0.0.2:8000/ws.html &#9; ">whitespace</a>
<a href="HTTP://127.0.0.2:8000/UPPER">upper scheme</a> <a href="http://EXAMPLE.com/Host">host</a>
<A HREF="/caps-tag.html">caps tag</A> <a href="">empty</a> <a>no href</a> <a href>valueless</a>
<a href="javascript:void(0)">js</a> <a href="mailto:a@b.c">mail</a> <a href="ftp://x/y">ftp</a>
<a href="rel.html">duplicate</a> <a href="/q?a=1&amp;b=2">entity</a>
<a href="/caf\u00e9/\u00fc.html?q=\u00fc">non-ascii</a> <a href="/a b.html">space</a>
<a href="/bad%zz">bad escape</a> <a href="//127.0.0.3:8000/proto-relative">proto-relative</a>
<a href="http://[::1]:8000/v6">ipv6</a> <a href="http://[bad/">bogus</a>
<map name="m"><area href="/area.html" alt="area"></map> <img src="/img.png">
<svg><a href="/svg-link.html"><text>svg</text></a></svg>
<noscript><a href="/noscript.html">noscript</a></noscript>
<template><a href="/template.html">template</a></template>
<!-- <a href="/comment.html">comment</a> -->
<script>document.write('<a href="/script.html">script</a>')</script>
<table><a href="/in-table.html">misnested</a><tr><td>x</td></tr></table>
<p><a href="/outer.html">outer <a href="/nested.html">nested</a></a></p>
</body></html>"""


def site_samples(site: Site, count: int) -> list[Sample]:
    """``count`` pages of the site, fetched over HTTP (bounded by count and a timeout each)."""
    samples = []
    for n in range(count):
        url = f"http://{HOSTS[n % len(HOSTS)]}:{site.port}/p/{n * 7 % PAGES_PER_HOST}.html"
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
            charset = answer.headers.get_content_charset() or "utf-8"
            samples.append((answer.read(), url, charset))
    return samples


def big_pages(port: int) -> tuple[Sample, Sample]:
    """A page with ``BIG_PAGE_LINKS`` absolute links, and the same with same-host ones relative."""
    config = SiteConfig(hosts=HOSTS, pages_per_host=PAGES_PER_HOST,
                        links_per_page=BIG_PAGE_LINKS, page_bytes=PAGE_BYTES)
    url = f"http://{HOSTS[0]}:{port}/p/0.html"
    body = GeneratedSite(config, port).render(HOSTS[0], "/p/0.html").body
    relative = body.replace(f'href="http://{HOSTS[0]}:{port}/'.encode(), b'href="/')
    return (body, url, "utf-8"), (relative, url, "utf-8")


def time_extractors(samples: list[Sample], passes: int, budget_s: float) -> dict[str, float]:
    """Median µs per page of each extractor over ``passes`` passes through ``samples``
    (candidates interleaved, rotated every pass; stops early after ``budget_s``)."""
    timed = {**EXTRACTORS, **PARSE_ONLY}
    names = list(timed)
    times: dict[str, list[float]] = {name: [] for name in names}
    deadline = time.monotonic() + budget_s
    for number in range(passes):
        for name in names[number % len(names):] + names[:number % len(names)]:
            extractor = timed[name]
            start = time.perf_counter()
            for body, url, encoding in samples:
                extractor(body, url, encoding)
            times[name].append((time.perf_counter() - start) * 1e6 / len(samples))
        if time.monotonic() > deadline:
            break
    return {name: statistics.median(values) for name, values in times.items()}


def differences(samples: list[Sample]) -> dict[str, list[str]]:
    """Per candidate, a line per page whose URL list differs from the reference's."""
    found: dict[str, list[str]] = {name: [] for name in EXTRACTORS if name != REFERENCE}
    for body, url, encoding in samples:
        expected = reference_links(body, url, encoding)
        for name in found:
            got = EXTRACTORS[name](body, url, encoding)
            if got == expected:
                continue
            missing = [u for u in expected if u not in got]
            extra = [u for u in got if u not in expected]
            detail = f"missing {missing}; extra {extra}" if missing or extra else \
                "same URLs, different order/duplicates"
            found[name].append(f"{url} ({len(expected)} vs {len(got)} URLs): {detail}")
    return found


def compare_extractors(site: Site, args: argparse.Namespace
                       ) -> tuple[dict[str, dict[str, float]], dict[str, list[str]]]:
    pages = site_samples(site, args.samples)
    big, relative = big_pages(site.port)
    edge = (EDGE_PAGE.encode(), f"http://{HOSTS[0]}:{site.port}{EDGE_PATH}", "utf-8")
    sets = {f"site page ({PAGE_BYTES // 1000} KB, {LINKS} links)": pages,
            f"{BIG_PAGE_LINKS} absolute links ({len(big[0]) // 1000} KB)": [big] * 10,
            f"{BIG_PAGE_LINKS} links, same-host relative": [relative] * 10}
    figures = {label: time_extractors(samples, args.passes, args.link_budget)
               for label, samples in sets.items()}
    return figures, differences([*pages, big, relative, edge])


# --- report ---------------------------------------------------------------------------------

def median_of(runs: list[FetchRun], attribute: str) -> float:
    return statistics.median(float(getattr(run, attribute)) for run in runs)


def report(runs: dict[str, list[FetchRun]], figures: dict[str, dict[str, float]],
           diffs: dict[str, list[str]]) -> None:
    print("\n| HTTP client | pages/s (median) | CPU ms/page (median) | runs: pages/s |")
    print("|---|---|---|---|")
    for name, client_runs in runs.items():
        print(f"| {name} | {median_of(client_runs, 'pages_s'):,.0f} | "
              f"{median_of(client_runs, 'cpu_ms_page'):.3f} | "
              + ", ".join(f"{run.pages_s:,.0f}" for run in client_runs) + " |")
    labels = list(figures)
    print("\n| link extractor (µs/page, median) | " + " | ".join(labels)
          + " | differs from reference on |")
    print("|---|" + "---|" * (len(labels) + 1))
    for name in [*EXTRACTORS, *PARSE_ONLY]:
        cells = " | ".join(f"{figures[label][name]:,.0f}" for label in labels)
        differs = "-" if name not in diffs else f"{len(diffs[name])} page(s)"
        print(f"| {name} | {cells} | {differs} |")
    print()
    for name, lines in diffs.items():
        site_lines = [line for line in lines if "/p/" in line.split(" ", 1)[0]]
        for line in [*site_lines[:2], *(line for line in lines if line not in site_lines)]:
            print(f"- {name} differs on {line}")
        if len(site_lines) > 2:
            print(f"- {name}: {len(site_lines) - 2} more /p/ page(s) (site and big pages) "
                  "differ the same way")
    if runs:
        client = max(runs, key=lambda name: median_of(runs[name], "pages_s"))
        print(f"\nchosen HTTP client: {client} (highest median pages/s)")
    candidates = [name for name in EXTRACTORS if name != REFERENCE]
    exact = [name for name in candidates
             if not any(EDGE_PATH not in line.split(" ", 1)[0] for line in diffs[name])]

    def score(name: str) -> float:  # geometric mean of µs/page over the sample sets
        return statistics.geometric_mean(figures[label][name] for label in labels)

    extractor = min(exact or candidates, key=score)
    print(f"chosen link extractor: {extractor} (lowest geometric mean of µs/page over the "
          f"sample sets, {score(extractor):,.0f}, among "
          + ("those matching the reference on every site and big page; edge-page "
             "differences listed above)" if exact else "all: none matches the reference)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=5000, help="pages per client run")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=256)
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per client run")
    parser.add_argument("--samples", type=int, default=200, help="site pages for link timing")
    parser.add_argument("--passes", type=int, default=15)
    parser.add_argument("--link-budget", type=float, default=30.0,
                        help="seconds per sample set of link timing")
    parser.add_argument("--uvloop", action="store_true", help="run the clients on uvloop")
    parser.add_argument("--python-site", action="store_true", help="never use nginx")
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="fast-choices-"))
    site = start_site(workdir, free_port(HOSTS[0]), free_port(), pages=PAGES_PER_HOST,
                      links=LINKS, page_bytes=PAGE_BYTES, hosts=HOSTS,
                      python_only=args.python_site)
    try:
        print(f"site: {site.description}, {len(HOSTS)} hosts x {PAGES_PER_HOST} pages "
              f"({PAGE_BYTES} B, {LINKS} links); lxml {'.'.join(map(str, etree.LXML_VERSION))}"
              f" (libxml2 {'.'.join(map(str, etree.LIBXML_VERSION))})", flush=True)
        runs: dict[str, list[FetchRun]] = {}
        if not args.skip_http:
            loop_name = "uvloop" if args.uvloop else "asyncio"
            print(f"HTTP clients, {args.pages} pages x {args.rounds} rounds, concurrency "
                  f"{args.concurrency}, {loop_name} event loop:", flush=True)
            loop_factory = None
            if args.uvloop:
                import uvloop

                loop_factory = uvloop.new_event_loop
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                runs = runner.run(compare_clients(site, args))
        print("link extraction ...", flush=True)
        figures, diffs = compare_extractors(site, args)
        report(runs, figures, diffs)
    finally:
        site.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
