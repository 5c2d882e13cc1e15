"""``scrapy-cluster migrate`` against a real Redis populated as the original 1.2/1.3 wrote it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import orjson
import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.domain_config import open_store
from scrapy_cluster.frontier import DispatchView, Frontier
from scrapy_cluster.migration.legacy import legacy_fingerprint
from scrapy_cluster.settings import load_settings
from tests.support.migration import (
    OriginalRedis,
    api_request,
    link_request,
    member,
    moved,
    run_migrate,
    score,
)

pytestmark = pytest.mark.integration

SITE = "http://shop.example.com"


def frontier_of(client: redis.Redis) -> Frontier:
    settings = load_settings("crawler", environ={}, overrides={
        "QUEUE_WINDOW": 0, "SCHEDULER_IP_ENABLED": False})
    return Frontier.from_settings(settings, client)


def popped_urls(client: redis.Redis, spiderid: str = "link") -> list[str]:
    result = frontier_of(client).pop(DispatchView(spiderid), 1000)
    return [leased.request["url"] for leased in result.requests]


@pytest.fixture
def original(redis_client: redis.Redis) -> OriginalRedis:
    return OriginalRedis(redis_client)


def test_requests_pop_in_the_original_order_highest_priority_first(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis) -> None:
    requests = [api_request(f"{SITE}/seed-{p}", "c1", p) for p in (5, 90, 20)]
    requests += [link_request(f"{SITE}/link-{n}", f"c{n % 2}", 20) for n in range(4)]
    original.queue("link", "example.com", *requests)
    run_migrate("--from", redis_url)
    # The original popped the lowest score first and equal scores in member (byte) order.
    expected = [r["url"] for r in sorted(requests, key=lambda r: (score(r), member(r)))]
    assert popped_urls(redis_client) == expected


def test_link_requests_keep_their_depth_and_crawl_fields(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis) -> None:
    original.queue("link", "example.com", link_request(f"{SITE}/a", "c1", 7, curdepth=2,
                                                       maxdepth=3))
    run_migrate("--from", redis_url)
    request = frontier_of(redis_client).pop(DispatchView("link"), 1).requests[0].request
    assert {k: request[k] for k in ("appid", "crawlid", "priority", "curdepth", "maxdepth")} == \
        {"appid": "app", "crawlid": "c1", "priority": 7, "curdepth": 2, "maxdepth": 3}


def test_stopped_crawls_stay_blacklisted_and_their_requests_are_not_queued(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis) -> None:
    original.stop("link", "app", "stopped")
    original.queue("link", "example.com", api_request(f"{SITE}/x", "stopped", 10),
                   api_request(f"{SITE}/y", "running", 10))
    result = run_migrate("--from", redis_url)
    assert (redis_client.sismember(keys.crawl_blacklist("link"), "stopped"),
            popped_urls(redis_client)) == (True, [f"{SITE}/y"])
    assert "skipped 1 request(s) of stopped or expired crawls" in result.stdout


def test_crawl_expiries_are_registered_for_the_redis_monitor(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis) -> None:
    key = original.timeout("link", "app", "c1", 1_900_000_000)
    run_migrate("--from", redis_url)
    assert redis_client.zscore(keys.crawl_timeouts(), key) == 1_900_000_000


def test_a_second_run_changes_nothing_and_says_so(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis) -> None:
    original.queue("link", "example.com", *[api_request(f"{SITE}/{n}", "c1", 5)
                                            for n in range(5)])
    original.stop("link", "app", "old")
    original.timeout("link", "app", "c1", 1_900_000_000)
    original.dupefilter("link", "c1", [f"{SITE}/0"], extra_digests=3)
    first = run_migrate("--from", redis_url)
    second = run_migrate("--from", redis_url)
    assert (moved(first), moved(second)) == (7, 0)
    assert "already migrated" in second.stdout


def test_a_refused_request_is_kept_and_reported_not_dropped(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis) -> None:
    original.queue("link", "example.com", api_request("ftp://example.com/file", "c1", 5),
                   api_request(f"{SITE}/ok", "c1", 5))
    result = run_migrate("--from", redis_url)
    kept = [orjson.loads(entry) for entry in redis_client.lrange(keys.migration_rejected(), 0, -1)]
    assert [(entry["key"], orjson.loads(entry["item"])["url"]) for entry in kept] == \
        [("link:example.com:queue", "ftp://example.com/file")]
    assert "rejected 1 request(s)" in result.stdout and "url must be" in result.stdout


def test_original_dupefilter_digests_without_a_known_url_are_reported_not_convertible(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis) -> None:
    original.queue("link", "example.com", link_request(f"{SITE}/queued", "c1", 5))
    original.dupefilter("link", "c1", [f"{SITE}/queued", f"{SITE}/fetched"], extra_digests=2)
    result = run_migrate("--from", redis_url)
    assert "4 original fingerprint(s): 1 of requests imported above, 0 converted from " \
           "--seen-urls, 3 not convertible" in result.stdout


def test_seen_urls_are_deduplicated_by_their_crawl_after_migration(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis,
        tmp_path) -> None:
    original.queue("link", "example.com", link_request(f"{SITE}/queued", "c1", 5))
    original.dupefilter("link", "c1", [f"{SITE}/queued", f"{SITE}/fetched"])
    seen = tmp_path / "seen.jsonl"
    seen.write_bytes(orjson.dumps({"url": f"{SITE}/fetched", "crawlid": "c1"}) + b"\n")
    run_migrate("--from", redis_url, "--seen-urls", str(seen))
    again = [link_request(f"{SITE}/fetched", "c1", 5), link_request(f"{SITE}/new", "c1", 5)]
    result = frontier_of(redis_client).enqueue_many(
        [{**r["meta"], "url": r["url"]} for r in again], dedupe=True)
    assert (result.queued, result.duplicates) == (1, 1)


def test_the_original_fingerprint_ignores_what_canonicalization_ignores() -> None:
    assert legacy_fingerprint("http://a.com/p?b=2&a=1#frag") == \
        legacy_fingerprint("http://a.com/p?a=1&b=2")


def test_migrating_to_another_redis_leaves_the_source_untouched(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis,
        private_redis) -> None:
    original.queue("link", "example.com", api_request(f"{SITE}/a", "c1", 5))
    original.dupefilter("link", "c1", [f"{SITE}/a"])
    before = sorted(redis_client.keys("*"))
    target = redis.Redis.from_url(private_redis.url)
    first = run_migrate("--from", redis_url, "--to", private_redis.url)
    second = run_migrate("--from", redis_url, "--to", private_redis.url)
    assert (sorted(redis_client.keys("*")), popped_urls(target), moved(first),
            moved(second)) == (before, [f"{SITE}/a"], 1, 0)


def test_the_original_domain_config_becomes_ours(
        redis_url: str, redis_client: redis.Redis, tmp_path) -> None:
    document = tmp_path / "example.yml"
    document.write_text("blacklist:\n  - spam.com\ndomains:\n  shop.example.com:\n"
                        "    window: 60\n    hits: 10\n    scale: 0.5\n")
    first = run_migrate("--from", redis_url, "--domain-config", str(document))
    second = run_migrate("--from", redis_url, "--domain-config", str(document))
    ours = open_store(load_settings(environ={}), redis_client).read().document
    assert (ours.throttles["example.com"].limit, sorted(ours.blacklist),
            moved(first), moved(second)) == (5, ["spam.com"], 2, 0)


def test_a_dry_run_writes_nothing(redis_url: str, redis_client: redis.Redis,
                                  original: OriginalRedis) -> None:
    original.queue("link", "example.com", api_request(f"{SITE}/a", "c1", 5))
    original.stop("link", "app", "old")
    before = {key: redis_client.type(key) for key in redis_client.keys("*")}
    result = run_migrate("--from", redis_url, "--dry-run")
    assert ({key: redis_client.type(key) for key in redis_client.keys("*")},
            moved(result)) == (before, 2)


def test_migrate_stamps_the_key_layout_version(redis_url: str,
                                               redis_client: redis.Redis) -> None:
    result = run_migrate("--from", redis_url)
    assert redis_client.get(keys.schema_version()) == b"2"
    assert "layout 0 -> 1" in result.stdout and "layout 1 -> 2" in result.stdout


def _queued_items(client: redis.Redis, spiderid: str = "link") -> int:
    return sum(client.llen(key) for key in client.scan_iter(f"{spiderid}:*:queue:*"))


def test_a_run_killed_mid_way_completes_on_the_next_run_with_nothing_doubled(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis) -> None:
    # dont_filter requests bypass the frontier's dedupe: a batch imported twice would show.
    total = 0
    for domain in range(4):
        requests = [link_request(f"http://d{domain}.example.com/{n}", f"c{n % 3}", n % 7,
                                 dont_filter=n % 2 == 0) for n in range(60)]
        original.queue("link", f"d{domain}.example.com", *requests)
        total += len(requests)
    env = {**os.environ, "MIGRATE_BATCH_SIZE": "1", "MIGRATE_BATCH_PAUSE_S": "0.01"}
    process = subprocess.Popen([sys.executable, "-m", "scrapy_cluster", "migrate", "--from",
                                redis_url], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while _queued_items(redis_client) < 20 and time.monotonic() < deadline:
        assert process.poll() is None, "migrate finished before it could be interrupted"
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)
    interrupted_at = _queued_items(redis_client)
    run_migrate("--from", redis_url)
    assert 0 < interrupted_at < total
    assert (_queued_items(redis_client), list(redis_client.scan_iter("migrate:src:*"))) == \
        (total, [])


def test_members_that_cannot_be_requests_are_kept_with_their_reason(
        redis_url: str, redis_client: redis.Redis, original: OriginalRedis) -> None:
    seed = api_request(f"{SITE}/ok", "c1", 50)
    link = link_request(f"{SITE}/link", "c1", 40)
    broken = {
        b'{"url": "http://shop.example.com/cut': "not JSON",
        member({**seed, "url": None}): "'url' missing or not a string",
        member({**seed, "url": f"{SITE}/typed", "maxdepth": "2"}): "maxdepth",
        member({**link, "url": f"{SITE}/headers", "headers": "Referer: x"}):
            "'headers' must be an object, got str",
        member({**link, "url": f"{SITE}/meta", "meta": ["appid"]}): "'meta' must be an object",
        member({**link, "url": f"{SITE}/depth", "meta": {**link["meta"], "curdepth": -1}}):
            "'curdepth' must be a non-negative integer",
    }
    key = original.queue("link", "example.com", seed, link)
    redis_client.zadd(key, dict.fromkeys(broken, -1))
    result = run_migrate("--from", redis_url)
    kept = {entry["item"].encode(): entry["reason"] for entry in map(
        orjson.loads, redis_client.lrange(keys.migration_rejected(), 0, -1))}
    assert sorted(kept) == sorted(broken)
    assert [why for raw, why in broken.items() if why not in kept[raw]] == []
    assert (popped_urls(redis_client), "rejected 6 request(s)" in result.stdout) == \
        ([f"{SITE}/ok", f"{SITE}/link"], True)
