"""Sitemap ingest (issue 27): peak RSS, URLs/s and Redis bytes of a 1,000,000-URL sitemap tree,
and the gzip bomb.

    .venv/bin/python benchmarks/sitemap_ingest.py [--large 20] [--urls 50000]
        [--redis-url URL] [--workdir DIR] [--skip-control] [--json FILE]

The tree is ``tests/support/sitemap_site.py``'s, cut down to its indexes and its large urlsets
(``--large`` urlsets of ``--urls`` URLs, ``/sitemap-large-<k>.xml``, gzip files for even k,
under a gzipped top index, two level-2 indexes and a level-3 one that lists the top index
again: a loop), plus one gzip bomb that no index lists. nginx serves it on 127.0.4.1-3 (a free
port); a throwaway redis-server holds the frontier.

Each measurement runs in a child process of its own (this script with ``--child``), which
reports its peak RSS (``VmHWM`` of /proc/self/status, and ``ru_maxrss``) and its RSS once its
imports are done and its Redis client is connected, before the first download (the baseline):

- ``ingest``: the walk a crawler does: the top index is queued as a sitemap request (the crawl
  API's default fields plus ``sitemap: {"kind": "sitemap", "depth": 0}``), then each sitemap is
  downloaded whole with urllib (as a crawler holds a body; a ``.gz`` file arrives gzipped and
  the parser inflates it), read by ``SitemapFlow`` and every batch it yields queued with
  ``Frontier.enqueue_many(batch, dedupe=True)``; child sitemaps are taken from the batches, each
  once. The wall time is split into download, parse (``SitemapFlow`` iteration) and enqueue.
  ``ingest+seen`` is the same with the crawler's seen cache (``seen_cache=True``, as both
  engines build their frontier).
- ``parse``: the same walk without Redis: download and parse only.
- ``bomb``: ``/sitemap-bomb.xml.gz`` (``bomb_bytes`` of spaces, gzipped) read by
  ``SitemapFlow``: bytes inflated when the parser stopped, and its reason.

Redis bytes per queued URL: growth of INFO ``used_memory`` over the ingest divided by the
requests queued; as a control the same page URLs are queued by this process as plain crawl
requests (no ``meta``), with dedupe and without (``benchmarks/frontier_memory.py``'s shape).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for tests.support

HOSTS = ("127.0.4.1", "127.0.4.2", "127.0.4.3")
TOP = "/sitemap_index.xml.gz"
BOMB = "/sitemap-bomb.xml.gz"
FIELDS: dict[str, Any] = {
    "appid": "benchapp", "crawlid": "sitemaps1", "spiderid": "link", "priority": 1,
    "maxdepth": 0, "curdepth": 0, "expires": 0, "attrs": None, "allowed_domains": None,
    "allow_regex": None, "deny_regex": None, "deny_extensions": None, "useragent": None,
    "cookie": None}
"""The crawl API's default fields, as ``benchmarks/frontier_memory.py`` queues them."""
CONTROL_BATCH = 1_000
MB = 1_000_000


# -- the child: one measurement in a fresh process -------------------------------------------


def status_kb(field: str) -> int:
    """A ``kB`` line of /proc/self/status (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def memory() -> dict[str, int]:
    return {"rss_kb": status_kb("VmRSS"), "hwm_kb": status_kb("VmHWM"),
            "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def fetch(url: str) -> tuple[int, str | None, bytes]:
    """The whole body as a crawler receives it (urllib decodes no Content-Encoding; the
    sitemaps walked here have none)."""
    with urllib.request.urlopen(url, timeout=60) as answer:
        return answer.status, answer.headers.get("Content-Type"), answer.read()


@dataclasses.dataclass
class Walk:
    """What one walk of the tree did; times in seconds."""

    sitemaps: int = 0
    entries: int = 0
    queued: int = 0
    duplicates: int = 0
    download_s: float = 0.0
    parse_s: float = 0.0
    enqueue_s: float = 0.0
    largest_body: int = 0
    stops: Counter[str] = dataclasses.field(default_factory=Counter)
    funnel: Counter[str] = dataclasses.field(default_factory=Counter)


def walk(top_url: str, frontier: Any) -> Walk:
    """Every sitemap reachable from ``top_url``, read as a crawler reads it; with a frontier,
    each batch queued with dedupe."""
    from scrapy_cluster.crawler.common.sitemap_flow import SITEMAP_FIELD, SitemapFlow

    done = Walk()
    top = {**FIELDS, "url": top_url, SITEMAP_FIELD: {"kind": "sitemap", "depth": 0}}
    if frontier is not None:
        done.queued += frontier.enqueue_many([top], dedupe=True).queued
    todo, seen = deque([top]), {top_url}
    while todo:
        stored = todo.popleft()
        started = time.perf_counter()
        status, content_type, body = fetch(stored["url"])
        done.download_s += time.perf_counter() - started
        done.sitemaps += 1
        done.largest_body = max(done.largest_body, len(body))
        flow = SitemapFlow(stored, status=status, content_type=content_type, body=body)
        for batch in _timed(iter(flow), done):
            done.entries += len(batch)
            for request in batch:
                if SITEMAP_FIELD in request and request["url"] not in seen:
                    seen.add(request["url"])
                    todo.append(request)
            if frontier is not None:
                started = time.perf_counter()
                result = frontier.enqueue_many(batch, dedupe=True)
                done.enqueue_s += time.perf_counter() - started
                done.queued += result.queued
                done.duplicates += result.duplicates
        done.funnel.update(flow.funnel)
        if flow.result is not None and flow.result.stop is not None:
            done.stops[flow.result.stop] += 1
        del body, flow
    return done


def _timed(batches: Iterator[list[dict[str, Any]]], done: Walk) -> Iterator[list[dict[str, Any]]]:
    """``batches`` with the time spent making each added to ``done.parse_s``."""
    while True:
        started = time.perf_counter()
        batch = next(batches, None)
        done.parse_s += time.perf_counter() - started
        if batch is None:
            return
        yield batch


def bomb(url: str) -> dict[str, Any]:
    from scrapy_cluster.crawler.common.sitemap_flow import SITEMAP_FIELD, SitemapFlow

    status, content_type, body = fetch(url)
    stored = {**FIELDS, "url": url, SITEMAP_FIELD: {"kind": "sitemap", "depth": 0}}
    flow = SitemapFlow(stored, status=status, content_type=content_type, body=body)
    started = time.perf_counter()
    urls = sum(len(batch) for batch in flow)
    took = time.perf_counter() - started
    result = flow.result
    assert result is not None
    return {"body_bytes": len(body), "inflated_bytes": result.document_bytes,
            "stop": result.stop, "detail": result.detail, "urls": urls, "parse_s": took,
            "funnel": dict(flow.funnel)}


def child(args: argparse.Namespace) -> None:
    import redis

    from scrapy_cluster.crawler.common import sitemap_flow  # noqa: F401 - in the baseline
    from scrapy_cluster.frontier import Frontier
    from scrapy_cluster.settings import load_settings

    frontier = None
    if args.child.startswith("ingest"):
        client = redis.Redis.from_url(args.redis_url)
        client.ping()
        frontier = Frontier.from_settings(load_settings("crawler", environ={}), client,
                                          seen_cache=args.child == "ingest+seen")
    baseline = memory()
    report: dict[str, Any] = {"mode": args.child, "baseline": baseline}
    started = time.perf_counter()
    if args.child == "bomb":
        report.update(bomb(args.url))
    else:
        done = walk(args.url, frontier)
        report.update({field.name: getattr(done, field.name)
                       for field in dataclasses.fields(done)})
    report["wall_s"] = time.perf_counter() - started
    report["peak"] = memory()
    print(json.dumps(report))


# -- the parent: the site, Redis, the children, the table ------------------------------------


def bench_site(large: int, urls: int, port: int) -> Any:
    """The sitemap site with its indexes, its large urlsets and one bomb only."""
    from tests.support.sitemap_site import BOMB as BOMB_KIND
    from tests.support.sitemap_site import INDEX, SitemapSite, SitemapSiteConfig

    class BenchSitemapSite(SitemapSite):
        def _documents(self) -> list[Any]:
            docs = super()._documents()
            large_urls = {self.a(path) for path in self.large_paths()}
            keep = [doc for doc in docs if doc.kind == INDEX or doc.url in large_urls
                    or doc.url == self.a(BOMB)]
            kept = {doc.url for doc in keep}
            assert any(doc.kind == BOMB_KIND for doc in keep)
            listed = kept - {self.a(BOMB)}  # the bomb is read on its own
            return [dataclasses.replace(doc, children=tuple(c for c in doc.children
                                                            if c in listed))
                    for doc in keep]

    config = SitemapSiteConfig(hosts=HOSTS, large_sitemaps=large, urls_per_large=urls)
    return BenchSitemapSite(config, port)


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def run_child(mode: str, url: str, redis_url: str) -> dict[str, Any]:
    answer = subprocess.run([sys.executable, __file__, "--child", mode, "--url", url,
                             "--redis-url", redis_url], capture_output=True, text=True,
                            check=False)
    if answer.returncode != 0:
        raise SystemExit(f"child {mode} failed:\n{answer.stderr}")
    report: dict[str, Any] = json.loads(answer.stdout.strip().splitlines()[-1])
    return report


def used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def control(client: Any, site: Any, *, dedupe: bool) -> tuple[int, int]:
    """The large urlsets' page URLs queued as plain crawl requests by this process: (bytes of
    ``used_memory`` grown, requests queued)."""
    from scrapy_cluster.frontier import Frontier
    from scrapy_cluster.settings import load_settings

    client.flushdb()
    frontier = Frontier.from_settings(load_settings("crawler", environ={}), client)
    before, queued, batch = used_memory(client), 0, []
    for path in site.large_paths():
        for entry in site.entries(site.docs[site.a(path)]):
            batch.append({**FIELDS, "url": entry.url})
            if len(batch) == CONTROL_BATCH:
                queued += frontier.enqueue_many(batch, dedupe=dedupe).queued
                batch = []
    if batch:
        queued += frontier.enqueue_many(batch, dedupe=dedupe).queued
    return used_memory(client) - before, queued


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import redis
    from frontier_support import throwaway_redis
    from tests.support.nginx import NginxSite, find_nginx

    binary = find_nginx()
    if binary is None:
        raise SystemExit("nginx not found (Debian: apt-get install nginx-light)")
    site = bench_site(args.large, args.urls, free_port(HOSTS[0]))
    started = time.perf_counter()
    nginx = NginxSite(site, workdir, binary=binary, status_port=free_port("127.0.0.1"))
    out: dict[str, Any] = {"large": args.large, "urls_per_large": args.urls}
    with nginx, throwaway_redis(args.redis_url) as redis_url:
        out["write_s"] = time.perf_counter() - started
        client = redis.Redis.from_url(redis_url)
        top, bomb_url = site.a(TOP), site.a(BOMB)
        for mode in ("ingest", "ingest+seen"):
            client.flushdb()
            before = used_memory(client)
            out[mode] = run_child(mode, top, redis_url)
            out[mode]["redis_bytes"] = used_memory(client) - before
        client.flushdb()
        out["parse"] = run_child("parse", top, redis_url)
        out["bomb"] = run_child("bomb", bomb_url, redis_url)
        out["bomb"]["model_inflated_bytes"] = site.inflated_size(site.docs[bomb_url])
        if not args.skip_control:
            out["control_dedupe"] = control(client, site, dedupe=True)
            out["control_plain"] = control(client, site, dedupe=False)
        lengths = [len(entry.url) for path in site.large_paths()
                   for entry in site.entries(site.docs[site.a(path)])]
        out["url_chars"] = sum(lengths) / len(lengths)
    return out


def table(out: dict[str, Any]) -> str:
    rows = ["| run | URLs queued | wall s | URLs/s | download / parse / enqueue s "
            "| baseline RSS MB | peak RSS MB (VmHWM / ru_maxrss) | peak - baseline MB "
            "| Redis bytes per URL |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for mode in ("ingest", "ingest+seen", "parse"):
        run = out[mode]
        count = run["queued"] if mode != "parse" else run["entries"]
        per_url = f"{run['redis_bytes'] / run['queued']:.1f}" if "redis_bytes" in run else "-"
        enqueue = f"{run['enqueue_s']:.1f}" if mode != "parse" else "-"
        rows.append(
            f"| {mode} | {count:,} | {run['wall_s']:.1f} | {count / run['wall_s']:,.0f} "
            f"| {run['download_s']:.1f} / {run['parse_s']:.1f} / {enqueue} "
            f"| {run['baseline']['rss_kb'] / 1024:.1f} "
            f"| {run['peak']['hwm_kb'] / 1024:.1f} / {run['peak']['maxrss_kb'] / 1024:.1f} "
            f"| {(run['peak']['hwm_kb'] - run['baseline']['rss_kb']) / 1024:.1f} | {per_url} |")
    parse = out["parse"]
    rows.append(f"\nparse only (SitemapFlow iteration, no download, no Redis): "
                f"{parse['entries'] / parse['parse_s']:,.0f} entries/s; "
                f"sitemaps read {parse['sitemaps']}, largest body {parse['largest_body']:,} B")
    for name in ("control_dedupe", "control_plain"):
        if name in out:
            grown, queued = out[name]
            rows.append(f"{name}: {grown / queued:.1f} bytes per request ({queued:,} queued, "
                        f"URLs of {out['url_chars']:.1f} characters on average)")
    bomb_run = out["bomb"]
    rows.append(f"bomb: body {bomb_run['body_bytes']:,} B, inflated {bomb_run['inflated_bytes']:,}"
                f" B of {bomb_run['model_inflated_bytes']:,} when stopped ({bomb_run['stop']}: "
                f"{bomb_run['detail'].strip()}), "
                f"{bomb_run['urls']} URLs, {bomb_run['parse_s']:.2f} s, RSS "
                f"{bomb_run['baseline']['rss_kb'] / 1024:.1f} MB before, peak "
                f"{bomb_run['peak']['hwm_kb'] / 1024:.1f} MB")
    rows.append(f"ingest funnel: {dict(out['ingest']['funnel'])}; "
                f"stops: {dict(out['ingest']['stops'])}; duplicates {out['ingest']['duplicates']}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=20, help="large urlsets")
    parser.add_argument("--urls", type=int, default=50_000, help="URLs per large urlset")
    parser.add_argument("--redis-url")
    parser.add_argument("--workdir", type=Path, help="where the site is written (default: temp)")
    parser.add_argument("--skip-control", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        out = measure(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="sitemap-bench-") as workdir:
            out = measure(args, Path(workdir))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))
    print(f"write {out['write_s']:.1f} s (site files, not measured)")
    print(table(out))


if __name__ == "__main__":
    main()
