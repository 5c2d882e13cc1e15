"""One contract, both domain-configuration backends (Redis, ZooKeeper), against real servers.

Whatever the backend, what the frontier obeys is in Redis: with ZooKeeper a ``Mirror`` (what
``scrapy-cluster config sync`` runs) applies every version there.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from scrapy_cluster import keys
from scrapy_cluster.domain_config import DomainDocument, frontier_domain, update
from scrapy_cluster.domain_config.redis_store import RedisDomainConfigStore
from scrapy_cluster.domain_config.store import VersionedDocument
from scrapy_cluster.domain_config.sync import Mirror
from scrapy_cluster.errors import DomainConfigConflictError
from scrapy_cluster.frontier import DispatchView
from scrapy_cluster.frontier.config import DomainConfig, DomainThrottle
from tests.support.frontier import make_frontier, req

pytestmark = pytest.mark.integration
NORMALIZE = frontier_domain()
WAIT_S = 10.0


class Backend:
    """A store, and how to wait until Redis (what crawlers read) holds a version."""

    def __init__(self, store: Any, redis_client: redis.Redis) -> None:
        self.store, self.redis = store, redis_client

    def applied(self, version: int) -> bool:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if int(self.redis.hget(keys.domain_config_document(), "version") or 0) >= version:
                return True
            time.sleep(0.02)
        return False


@pytest.fixture(params=["redis", "zookeeper"])
def backend(request: pytest.FixtureRequest, redis_client: redis.Redis) -> Iterator[Backend]:
    redis_store = RedisDomainConfigStore(redis_client, make_frontier(redis_client),
                                         normalize=NORMALIZE)
    if request.param == "redis":
        yield Backend(redis_store, redis_client)
        return
    from scrapy_cluster.domain_config.zookeeper_store import ZookeeperDomainConfigStore

    hosts = request.getfixturevalue("zookeeper_hosts")
    store = ZookeeperDomainConfigStore.from_settings(
        {"ZOOKEEPER_HOSTS": hosts, "ZOOKEEPER_ASSIGN_PATH": f"/sc-test-{uuid.uuid4().hex}/",
         "ZOOKEEPER_ID": "all"}, NORMALIZE)
    mirror = Mirror(store, redis_store).start()
    try:
        yield Backend(store, redis_client)
    finally:
        mirror.close()
        store.close()


def doc(text: str) -> DomainDocument:
    return DomainDocument.from_yaml(text, NORMALIZE)


def test_nothing_stored_reads_as_the_empty_document_at_version_0(backend: Backend) -> None:
    assert backend.store.read() == VersionedDocument(DomainDocument(), 0)


def test_a_write_is_read_back_with_a_new_version(backend: Backend) -> None:
    document = doc("domains: {a.com: {window: 60, hits: 5}}\nblacklist: [b.com]")
    version = backend.store.write(document, expected_version=0)
    assert version >= 1
    assert backend.store.read() == VersionedDocument(document, version)


def test_a_write_based_on_a_stale_version_is_refused(backend: Backend) -> None:
    first = backend.store.write(doc("blacklist: [a.com]"), expected_version=0)
    backend.store.write(doc("blacklist: [b.com]"), expected_version=first)
    with pytest.raises(DomainConfigConflictError):
        backend.store.write(doc("blacklist: [c.com]"), expected_version=first)
    assert backend.store.read().document.blacklist == {"b.com"}


def test_twenty_concurrent_updates_are_all_kept(backend: Backend) -> None:
    def add(index: int) -> Callable[[DomainDocument], DomainDocument]:
        return lambda document: document.with_throttle(f"d{index}.com",
                                                       DomainThrottle(window_s=60, hits=index))

    threads = [threading.Thread(target=update, args=(backend.store, add(i))) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    final = backend.store.read()
    assert {name: t.hits for name, t in final.document.throttles.items()} == \
        {f"d{i}.com": i for i in range(20)}


def test_the_frontier_obeys_the_document_and_a_new_one_fully_replaces_it(
        backend: Backend, redis_client: redis.Redis) -> None:
    config = DomainConfig(redis_client, make_frontier(redis_client))
    first = backend.store.write(doc("domains: {a.com: {window: 60, hits: 1}}\n"
                                    "blacklist: [b.com]"), expected_version=0)
    assert backend.applied(first)
    assert (config.throttles(), config.blacklist()) == \
        ({"a.com": DomainThrottle(window_s=60.0, hits=1)}, {"b.com"})
    second = backend.store.write(doc("domains: {c.com: {window: 1, hits: 1}}"),
                                 expected_version=first)
    assert backend.applied(second)
    assert (set(config.throttles()), config.blacklist()) == ({"c.com"}, set())


def test_a_crawl_delay_entry_of_an_unnamed_domain_survives_a_push(
        backend: Backend, redis_client: redis.Redis) -> None:
    delayed = b'{"window":5,"hits":1,"scale":1,"crawl_delay":5}'
    redis_client.hset(keys.domain_throttle_config(), "slow.com", delayed)
    version = backend.store.write(doc("domains: {a.com: {window: 60, hits: 1}}"),
                                  expected_version=0)
    assert backend.applied(version)
    assert redis_client.hget(keys.domain_throttle_config(), "slow.com") == delayed


def test_watchers_see_every_new_version(backend: Backend) -> None:
    seen: list[int] = []
    arrived = threading.Event()

    def record(versioned: VersionedDocument) -> None:
        seen.append(versioned.version)
        if versioned.document.blacklist == {"z.com"}:
            arrived.set()

    watch = backend.store.watch(record)
    try:
        backend.store.write(doc("blacklist: [z.com]"), expected_version=0)
        assert arrived.wait(WAIT_S)
    finally:
        watch.close()
    assert seen[0] == 0 and seen[-1] >= 1


def test_pushed_limits_and_blacklist_apply_on_the_next_pop_and_revert(
        backend: Backend, redis_client: redis.Redis) -> None:
    frontier = make_frontier(redis_client, QUEUE_WINDOW=0)  # unthrottled by default
    view = DispatchView("link", "10.0.0.1")
    frontier.enqueue_many([req(f"http://a.com/{i}") for i in range(3)]
                          + [req(f"http://b.com/{i}") for i in range(2)])
    first = backend.store.write(doc("domains: {a.com: {window: 60, hits: 1}}\n"
                                    "blacklist: [b.com]"), expected_version=0)
    assert backend.applied(first)
    assert [r.domain for r in frontier.pop(view, 10).requests] == ["a.com"]
    second = backend.store.write(DomainDocument(), expected_version=first)
    assert backend.applied(second)
    assert sorted(r.domain for r in frontier.pop(view, 10).requests) == \
        ["a.com", "a.com", "b.com", "b.com"]


def test_a_mirror_replaces_a_document_of_another_source_whatever_its_version(
        redis_client: redis.Redis) -> None:
    """Switching from the Redis backend to ZooKeeper: ZooKeeper's version 1 must win over
    Redis's version 5; a repeated or older version of the same source is ignored."""
    redis_store = RedisDomainConfigStore(redis_client, make_frontier(redis_client),
                                         normalize=NORMALIZE)
    for version in range(5):
        redis_store.write(doc(f"blacklist: [r{version}.com]"), expected_version=version)
    from_zookeeper = VersionedDocument(doc("blacklist: [z.com]"), 1)
    assert redis_store.mirror(from_zookeeper, "zookeeper:/a") is True
    assert redis_store.read() == from_zookeeper
    assert redis_store.mirror(VersionedDocument(doc("blacklist: [old.com]"), 1),
                              "zookeeper:/a") is False
    assert redis_client.smembers(keys.domain_blacklist()) == {b"z.com"}
