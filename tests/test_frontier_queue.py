"""Enqueue and dispatch order against a real redis-server, with an injected clock."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.frontier import DispatchView
from tests.support.frontier import (
    VIEW,
    CountingConnection,
    FrontierFactory,
    ManualClock,
    drain,
    pop_urls,
    req,
)
from tests.support.frontier import frontier_factory as frontier_factory  # on both clients
from tests.support.frontier import settings as frontier_settings

pytestmark = pytest.mark.integration


def test_higher_priority_first_within_a_domain(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/low", priority=1), req("http://a.com/high", priority=9),
                           req("http://a.com/mid", priority=5)])
    assert drain(frontier) == ["http://a.com/high", "http://a.com/mid", "http://a.com/low"]


def test_equal_priorities_come_out_first_in_first_out(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    urls = [f"http://a.com/{name}" for name in ("zz", "aa", "mm", "bb")]
    frontier.enqueue_many([req(url) for url in urls])
    assert drain(frontier) == urls


def test_equal_priorities_are_fifo_across_crawls(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/1", crawlid="x"), req("http://a.com/2", crawlid="y"),
                           req("http://a.com/3", crawlid="x"), req("http://a.com/4", crawlid="y")])
    assert drain(frontier) == [f"http://a.com/{i}" for i in range(1, 5)]


def test_among_domains_allowed_at_once_higher_head_priority_first(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.pop(VIEW, 1)  # register the view before anything is queued
    frontier.enqueue_many([req("http://a.com/", priority=1), req("http://b.com/", priority=7),
                           req("http://c.com/", priority=3)])
    assert pop_urls(frontier, 3) == ["http://b.com/", "http://c.com/", "http://a.com/"]


def test_domain_allowed_earlier_goes_before_higher_priority(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    frontier.pop(VIEW, 1)
    frontier.enqueue_many([req("http://early.com/", priority=1)])
    clock.advance(5)
    frontier.enqueue_many([req("http://late.com/", priority=9)])
    assert pop_urls(frontier, 2) == ["http://early.com/", "http://late.com/"]


def test_new_view_keeps_priority_order_across_domains(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/", priority=1), req("http://b.com/", priority=7)])
    assert pop_urls(frontier, 2, DispatchView("link", "10.9.9.9")) == ["http://b.com/",
                                                                        "http://a.com/"]


def test_due_domains_are_served_round_robin(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    clock = ManualClock()
    frontier = frontier_factory(redis_client, clock)
    frontier.pop(VIEW, 1)
    frontier.enqueue_many([req(f"http://a.com/{i}") for i in range(3)]
                          + [req(f"http://b.com/{i}") for i in range(3)])
    hosts = []
    for _ in range(6):
        clock.advance(1)
        hosts.extend(url.split("/")[2] for url in pop_urls(frontier, 1))
    assert hosts == ["a.com", "b.com"] * 3


def test_subdomains_share_the_registered_domain_queue(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://news.bbc.co.uk/1"), req("http://www.bbc.co.uk/2")])
    index = keys.domain_queue("link", "bbc.co.uk")
    assert redis_client.zrange(index, 0, -1) == [b"1|c1"]
    assert redis_client.llen(keys.domain_subqueue("link", "bbc.co.uk", 1, "c1")) == 2


def test_request_fields_survive_dispatch(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    original = req("http://a.com/x", priority=4, maxdepth=2, curdepth=1, attrs={"k": "v"},
                   headers={"Accept": ["text/html"]}, meta={"n": 1}, method="POST", body="b=1")
    frontier.enqueue_many([original])
    leased = frontier.pop(VIEW, 1).requests[0]
    assert {k: leased.request[k] for k in original} == original
    assert leased.domain == "a.com"


def test_new_domain_is_dispatchable_immediately(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    assert frontier.pop(VIEW, 1).wait_s is None
    frontier.enqueue_many([req("http://brand-new.com/")])
    assert pop_urls(frontier, 1) == ["http://brand-new.com/"]


def test_dispatch_time_is_redis_server_time_without_clock(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client)
    frontier.enqueue_many([req("http://a.com/")])
    seconds, micros = redis_client.time()
    leased = frontier.pop(VIEW, 1).requests[0]
    assert abs(leased.dispatched_at_ms - (seconds * 1000 + micros // 1000)) < 5000


def test_invalid_requests_are_reported_and_the_rest_queued(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    result = frontier.enqueue_many([req("http://a.com/"), {"url": "http://b.com/"},
                                    req("http://c.com/", priority="x")])
    assert result.queued == 1
    assert [index for index, _ in result.invalid] == [1, 2]
    assert "'appid' must be a non-empty string" in result.invalid[0][1]


def test_unparseable_urls_are_invalid_requests_not_a_failed_batch(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    result = frontier.enqueue_many([req("http://[ab/x"), req("http://ok.com/")])
    assert (result.queued, result.invalid) == (1, [(0, "url cannot be parsed: Invalid IPv6 URL")])
    assert pop_urls(frontier, 2) == ["http://ok.com/"]


def test_blacklisted_crawl_is_dropped_and_counted(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    redis_client.sadd(keys.crawl_blacklist("link"), "stopped")
    result = frontier.enqueue_many([req("http://a.com/", crawlid="stopped"), req("http://b.com/")])
    assert (result.queued, result.blacklisted) == (1, 1)
    assert drain(frontier) == ["http://b.com/"]


@pytest.mark.parametrize(("backlog", "queued", "blacklisted", "pending"), [
    (False, 1, 1, 0),  # dropped
    (True, 2, 0, 1),  # kept queued, never dispatched
], ids=["without_backlog", "with_backlog"])
def test_a_blacklisted_domain_is_dropped_or_kept_but_never_dispatched(
        redis_client: redis.Redis, frontier_factory: FrontierFactory, backlog: bool,
        queued: int, blacklisted: int, pending: int) -> None:
    frontier = frontier_factory(redis_client, ManualClock(), SCHEDULER_BACKLOG_BLACKLIST=backlog)
    redis_client.sadd(keys.domain_blacklist(), "bad.com")
    result = frontier.enqueue_many([req("http://www.bad.com/"), req("http://good.com/")])
    assert (result.queued, result.blacklisted) == (queued, blacklisted)
    assert drain(frontier) == ["http://good.com/"]
    assert frontier.crawl_info("link", "app", "c1").total_pending == pending


def test_enqueue_of_a_batch_is_one_round_trip(
        redis_url: str, redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    frontier = frontier_factory(redis.Redis(connection_pool=pool), ManualClock())
    frontier.enqueue_many([req("http://warm.com/")])  # first call also loads the script
    before = CountingConnection.sent
    frontier.enqueue_many([req(f"http://d{i}.com/{i}") for i in range(200)], dedupe=True)
    assert CountingConnection.sent - before == 1


def test_pop_is_one_round_trip_whatever_the_domain_count(
        redis_url: str, redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    frontier = frontier_factory(redis.Redis(connection_pool=pool), ManualClock())
    frontier.enqueue_many([req(f"http://d{i}.com/") for i in range(500)])
    frontier.pop(VIEW, 1)
    before = CountingConnection.sent
    assert len(frontier.pop(VIEW, 32).requests) == 32
    assert CountingConnection.sent - before == 1


def test_views_of_another_spider_do_not_see_the_request(
        redis_client: redis.Redis, frontier_factory: FrontierFactory) -> None:
    frontier = frontier_factory(redis_client, ManualClock())
    frontier.enqueue_many([req("http://a.com/", spiderid="other")])
    assert frontier.pop(VIEW, 5).requests == []
    assert pop_urls(frontier, 5, DispatchView("other", "10.0.0.1")) == ["http://a.com/"]


def test_settings_fixture_has_the_frontier_settings() -> None:
    assert frontier_settings()["FRONTIER_POP_LOOKAHEAD"] == 16


def test_frontier_works_again_after_a_redis_restart(  # type: ignore[no-untyped-def]
        private_redis, frontier_factory: FrontierFactory) -> None:
    client = redis.Redis.from_url(private_redis.url)
    frontier = frontier_factory(client, ManualClock())
    frontier.enqueue_many([req("http://a.com/before")])
    private_redis.restart()
    frontier.enqueue_many([req("http://a.com/after")])
    assert pop_urls(frontier, 5) == ["http://a.com/after"]
    client.close()
