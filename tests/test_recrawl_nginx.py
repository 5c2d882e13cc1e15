"""Re-crawls end to end against nginx: a crawl with ``recrawl`` fed through the Kafka Monitor,
crawlers of either engine, the Redis Monitor answering ``stop`` and sending ``complete``, and
a mutator changing pages between cycles (``tests/support/recrawl_rig.py``). Judged from
nginx's access log (validators sent, 304 or 200 answered, arrival times per host) and from the
crawled and outbound topics.
"""

from __future__ import annotations

import signal
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scrapy_cluster.sitegen.throttle_measure import max_in_window
from tests.support.nginx import find_nginx
from tests.support.recrawl_rig import (
    APPID,
    CRAWLER_ENV,
    ENGINES,
    HOSTS,
    INTERVAL_S,
    MONITOR_ENV,
    SCHEDULE_SITE,
    THROTTLE_HITS,
    THROTTLE_WINDOW_S,
    rig,
)
from tests.support.revisit_site import (
    Change,
    LogRecord,
    Mutator,
    RevisitNginx,
    RevisitSite,
    RevisitSiteConfig,
    read_change_log,
    read_log,
    staleness,
)
from tests.support.services import free_port
from tests.support.starting import service_unavailable

pytestmark = pytest.mark.integration

CYCLES = 3
SLOW_SITE = RevisitSiteConfig(HOSTS, pages_per_host=3, links_per_page=1, page_bytes=1200,
                              rate_limit_bytes_s=600)


@dataclass
class Outcome:
    """One scheduled crawl's traces: nginx's records per URL, items and notices as read."""

    fetches: dict[str, list[LogRecord]]
    items: list[tuple[float, dict[str, Any]]]
    notices: list[tuple[float, dict[str, Any]]]
    changes: list[Change]
    first_urls: set[str]

    def changed_at(self, url: str) -> float | None:
        return next((c.at_s for c in self.changes if c.url == url and c.kind == "changed"), None)

    @property
    def added(self) -> str:
        return next(change.url for change in self.changes if change.kind == "added")


@pytest.fixture(scope="module", params=ENGINES)
def outcome(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """A crawl re-fetched every INTERVAL_S for CYCLES cycles; after the first cycle a page
    of the second host changes and a new page is linked from a page of the first."""
    workdir = Path(tmp_path_factory.mktemp(f"recrawl-{request.param}"))
    with rig(workdir, SCHEDULE_SITE, MONITOR_ENV) as running:
        running.cluster.start(request.param, **CRAWLER_ENV)
        first_urls = running.site.urls()
        crawlid = running.feed({"interval": INTERVAL_S, "max_cycles": CYCLES})
        running.wait_fetched(first_urls, 1)
        running.mutator.change(HOSTS[1], "/p/3.html")
        running.mutator.add_page(HOSTS[0], "/p/2.html")
        notices = running.completed(crawlid)
        return Outcome(running.fetches(), running.watch.items(crawlid), notices,
                       list(running.mutator.changes), first_urls)


def test_each_page_is_fetched_plainly_once_then_with_its_validators_each_cycle(
        outcome: Outcome) -> None:
    for url in outcome.first_urls:
        first, *again = outcome.fetches[url]
        assert (first.conditional, len(again)) == (False, CYCLES), url
        for before, record in zip([first, *again], again, strict=False):
            # nginx sends an ETag, so only If-None-Match goes out (RFC 9110 13.1.3: a server
            # ignores If-Modified-Since next to it)
            assert (record.if_none_match, record.if_modified_since) == \
                (before.etag, None), (url, before, record)


def test_unchanged_pages_are_answered_304(outcome: Outcome) -> None:
    unchanged = {url for url in outcome.first_urls if outcome.changed_at(url) is None}
    assert len(unchanged) >= len(outcome.first_urls) - 3
    assert {url: [r.status for r in outcome.fetches[url]] for url in unchanged} == \
        {url: [200] + [304] * CYCLES for url in unchanged}


def test_a_changed_page_is_fetched_whole_once_after_its_change(outcome: Outcome) -> None:
    changed = {url: at for url in outcome.first_urls if (at := outcome.changed_at(url))}
    assert len(changed) == 3  # one changed, the new page's parent and /new.html
    for url, at_s in changed.items():
        again = outcome.fetches[url][1:]
        whole = [record for record in again if record.status == 200]
        assert len(whole) == 1 and whole[0].body_bytes > 0, (url, again)
        assert whole[0].arrived_s >= at_s - 0.05, (url, at_s, whole)
        assert [r.status for r in again if r is not whole[0]] == [304] * (CYCLES - 1), url


def test_items_follow_the_answers_and_304s_carry_no_body(outcome: Outcome) -> None:
    expected = Counter((url, r.status == 304) for url, records in outcome.fetches.items()
                       for r in records)
    got = Counter((item["url"], bool(item.get("not_modified"))) for _, item in outcome.items)
    assert got == expected
    for _, item in outcome.items:
        assert bool(item.get("body")) != bool(item.get("not_modified")), item


def test_a_new_page_linked_from_a_changed_page_is_fetched_plainly_once(
        outcome: Outcome) -> None:
    records = outcome.fetches.get(outcome.added, [])
    assert [r.conditional for r in records][:1] == [False]
    assert [r.conditional for r in records[1:]] == [True] * (len(records) - 1)
    assert len(records) <= 1 + CYCLES


def test_no_host_gets_more_than_its_throttle_across_cycles(outcome: Outcome) -> None:
    arrivals: dict[str, list[float]] = {}
    for url, records in outcome.fetches.items():
        arrivals.setdefault(url.split("/")[2].split(":")[0], []).extend(
            r.arrived_s for r in records)
    peaks = {host: max_in_window(times, THROTTLE_WINDOW_S) for host, times in arrivals.items()}
    assert set(peaks) == set(HOSTS)
    assert all(peak <= THROTTLE_HITS for peak in peaks.values()), peaks


def test_complete_arrives_once_after_the_last_cycle(outcome: Outcome) -> None:
    ((notice_at, _),) = outcome.notices
    last_request_s = max(r.finished_s for records in outcome.fetches.values() for r in records)
    assert notice_at >= last_request_s
    assert notice_at >= max(at for at, _ in outcome.items)
    assert len(outcome.fetches[outcome.added]) == 1 + CYCLES


def test_staleness_of_the_changes_is_what_the_log_shows(outcome: Outcome) -> None:
    end_s = max(r.finished_s for records in outcome.fetches.values() for r in records) + 1
    measured = staleness(outcome.changes, outcome.fetches, end_s)
    assert (len(measured.caught_s), measured.missed_s) == (3, ())
    assert all(0 <= took_s <= 2 * INTERVAL_S + 2 for took_s in measured.caught_s), measured


@pytest.mark.parametrize("engine", ENGINES)
def test_without_links_only_the_seed_is_refetched_and_a_new_page_is_fetched_once(
        tmp_path: Path, engine: str) -> None:
    with rig(tmp_path, SCHEDULE_SITE, MONITOR_ENV) as running:
        running.cluster.start(engine, **CRAWLER_ENV)
        seed = running.site.url(HOSTS[0], "/p/0.html")
        crawlid = running.feed({"interval": INTERVAL_S, "max_cycles": CYCLES, "links": False},
                               maxdepth=1)
        running.wait_fetched({seed}, 1)
        added, *_ = running.mutator.add_page(HOSTS[0], "/p/0.html")
        notices = running.completed(crawlid)
        fetched = {url: len(records) for url, records in running.fetches().items()}
    linked = {url for url in fetched if url not in (seed, added.url)}
    assert len(notices) == 1
    assert (fetched[seed], fetched.get(added.url)) == (1 + CYCLES, 1)
    assert len(linked) == SCHEDULE_SITE.links_per_page + 2  # and /new.html, the next host's seed
    assert {fetched[url] for url in linked} == {1}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_stop_ends_the_schedule(tmp_path: Path, engine: str) -> None:
    with rig(tmp_path, SCHEDULE_SITE, MONITOR_ENV) as running:
        running.cluster.start(engine, **CRAWLER_ENV)
        crawlid = running.feed({"interval": 1})
        running.wait_fetched(running.site.urls(), 2)
        answered_s = running.ask("stop", crawlid)
        running.watch.watch(3 * INTERVAL_S)
        late = [r for r in running.records() if r.arrived_s > answered_s]
        assert running.watch.answers(crawlid, "complete") == []
    assert late == []


@pytest.mark.parametrize("engine", ENGINES)
def test_a_crawler_killed_mid_cycle_loses_no_scheduled_url(tmp_path: Path, engine: str) -> None:
    cycles = 2
    # a SLOW_SITE page takes about 2 s: the lease outlives it three times over, so only the
    # killed crawler's leases are ever reaped (at the default 2 s a busy machine reaps a lease
    # whose page is still downloading, and the page is fetched again and again)
    slow_env = {**CRAWLER_ENV, "LEASE_TIMEOUT": "6"}
    with rig(tmp_path, SLOW_SITE, {**MONITOR_ENV, "LEASE_TIMEOUT": 6}) as running:
        victim = running.cluster.start(engine, **slow_env)
        crawlid = running.feed({"interval": INTERVAL_S, "max_cycles": cycles})
        frontier = running.cluster.frontier
        running.watch.until(lambda: frontier.crawl_info("link", APPID, crawlid).in_flight > 0,
                            "a leased page", 20)
        running.cluster.stop(victim, signal.SIGKILL)
        running.cluster.start(engine, **slow_env)
        notices = running.completed(crawlid)
        items = Counter(item["url"] for _, item in running.watch.items(crawlid))
        urls = running.site.urls()
    assert len(notices) == 1
    assert {url: min(items[url], 1 + cycles) for url in urls} == {url: 1 + cycles for url in urls}


def _get(url: str, **headers: str) -> tuple[int, str | None, str | None]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            answer.read()
            return answer.status, answer.headers["ETag"], answer.headers["Last-Modified"]
    except urllib.error.HTTPError as answer:
        return answer.code, answer.headers["ETag"], answer.headers["Last-Modified"]


def test_the_origin_answers_304_until_the_mutator_changes_a_page_and_logs_both(
        tmp_path: Path) -> None:
    binary = find_nginx()
    if binary is None:
        service_unavailable(RuntimeError("nginx is not installed (apt-get install nginx-light)"))
    tmp_path.chmod(0o755)
    site = RevisitSite(SCHEDULE_SITE, free_port(HOSTS[0]))
    log = tmp_path / "access.log"
    with RevisitNginx(site, tmp_path / "nginx", binary=str(binary), status_port=free_port(),
                      access_log=log):
        url = site.url(HOSTS[1], "/p/1.html")
        _, etag, modified = _get(url)
        assert etag is not None and modified is not None
        validators = {"If-None-Match": etag, "If-Modified-Since": modified}
        unchanged = _get(url, **validators)
        change = Mutator(site, tmp_path / "changes.log").change(HOSTS[1], "/p/1.html")
        changed = _get(url, **validators)
    assert unchanged == (304, etag, modified)
    assert changed[0] == 200 and changed[1] != etag and changed[2] != modified
    assert [(r.status, r.if_none_match, r.if_modified_since, r.etag) for r in read_log(log)] == [
        (200, None, None, etag), (304, etag, modified, etag), (200, etag, modified, changed[1])]
    assert read_change_log(tmp_path / "changes.log") == [
        Change(url, round(change.at_s, 3), "changed")]


def test_staleness_counts_to_the_next_200_and_changes_never_caught_to_the_end() -> None:
    def record(at_s: float, status: int) -> LogRecord:
        return LogRecord(at_s, 0.0, "h", status, 10, "/p", None, None, None)

    fetches = {"u": [record(1, 200), record(5, 304), record(9, 200)], "v": [record(2, 200)]}
    changes = [Change("u", 4.0, "changed"), Change("u", 8.0, "changed"),
               Change("v", 3.0, "changed"), Change("w", 1.0, "added")]
    measured = staleness(changes, fetches, end_s=10.0)
    assert (measured.caught_s, measured.missed_s, measured.mean_s) == ((5.0, 1.0), (7.0,), 13 / 3)
