"""The ZooKeeper side of the domain configuration, against a real ZooKeeper.

``ZookeeperWatcher`` (single and pointer mode, ensure, polling, reconnection after a server
restart, background connection) and ``ZookeeperDomainConfigStore`` (versions, compare-and-set,
concurrent updates, watch, session expiry). Each test works under a node path of its own;
tests that stop a server use a private one, never the shared session server.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from scrapy_cluster.domain_config.document import DomainDocument, frontier_domain
from scrapy_cluster.domain_config.store import VersionedDocument, update
from scrapy_cluster.domain_config.zookeeper_store import ZookeeperDomainConfigStore, node_path
from scrapy_cluster.domain_config.zookeeper_watcher import ZookeeperWatcher
from scrapy_cluster.errors import DomainConfigConflictError, ZookeeperUnavailableError
from scrapy_cluster.frontier.config import DomainThrottle
from tests.support.services import free_port
from tests.support.starting import external_or_started
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

WAIT_S = 15.0
CONNECT_S = 30.0  # a just-started ZooKeeper may leave a first connection attempt unanswered 10 s
RESTART_WAIT_S = 60.0


class Recorder:
    """What a watcher's handlers received, with bounded waits for what is expected next."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.contents: list[str] = []
        self.validity: list[bool] = []
        self.errors: list[str] = []
        self.versions: list[VersionedDocument] = []

    def config(self, contents: str) -> None:
        self._record(self.contents, contents)

    def valid(self, valid: bool) -> None:
        self._record(self.validity, valid)

    def error(self, message: str) -> None:
        self._record(self.errors, message)

    def version(self, versioned: VersionedDocument) -> None:
        self._record(self.versions, versioned)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
        with self._changed:
            return self._changed.wait_for(predicate, timeout_s)

    def _record(self, values: list[Any], value: Any) -> None:
        with self._changed:
            values.append(value)
            self._changed.notify_all()


def watcher_for(hosts: str, path: str, recorder: Recorder, **options: Any) -> ZookeeperWatcher:
    options.setdefault("connect_timeout_s", CONNECT_S)
    return ZookeeperWatcher(hosts, path, valid_handler=recorder.valid,
                            config_handler=recorder.config, error_handler=recorder.error,
                            **options)


def throttled(*domains: str) -> DomainDocument:
    document = DomainDocument()
    for hits, domain in enumerate(domains, start=1):
        document = document.with_throttle(domain, DomainThrottle(window_s=60, hits=hits))
    return document


def expire_session(client: KazooClient, hosts: str) -> None:
    """ZooKeeper's own way to expire a session: attach a second client to it, then close it."""
    session_id, password = client.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(timeout=CONNECT_S)
    twin.stop()
    twin.close()


@pytest.fixture
def path() -> str:
    return f"/sc-test-domain-config/{uuid.uuid4().hex}/all"


@pytest.fixture
def kazoo(zookeeper_hosts: str) -> Iterator[KazooClient]:
    """A plain client standing for the operator who edits the nodes."""
    client = KazooClient(hosts=zookeeper_hosts)
    client.start(timeout=CONNECT_S)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def store(zookeeper_hosts: str, path: str) -> Iterator[ZookeeperDomainConfigStore]:
    assign_path, zookeeper_id = path.rsplit("/", 1)
    settings = {"ZOOKEEPER_HOSTS": zookeeper_hosts, "ZOOKEEPER_ASSIGN_PATH": assign_path + "/",
                "ZOOKEEPER_ID": zookeeper_id}
    opened = ZookeeperDomainConfigStore.from_settings(settings, frontier_domain(),
                                                      connect_timeout_s=CONNECT_S)
    yield opened
    opened.close()


@contextmanager
def private_zookeeper(workdir: Path, port: int | None = None) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper owned by one test (it may stop and restart it on the same port and data);
    stopped on leaving the block."""
    for server in external_or_started(None, lambda: ZooKeeperServer(workdir, port=port)):
        assert isinstance(server, ZooKeeperServer)
        yield server


@contextmanager
def logged_messages(logger_name: str) -> Iterator[LogSignal]:
    """The messages ``logger_name`` logs inside the block (any thread), as they come."""
    signal = LogSignal()
    logger = logging.getLogger(logger_name)
    logger.addHandler(signal)
    try:
        yield signal
    finally:
        logger.removeHandler(signal)


class LogSignal(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []
        self.logged = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.logged.set()


# --- ZookeeperWatcher ------------------------------------------------------------------------

def test_watcher_delivers_the_initial_content_and_each_change(
        zookeeper_hosts: str, kazoo: KazooClient, path: str, recorder: Recorder) -> None:
    kazoo.create(path, b"first", makepath=True)
    with watcher_for(zookeeper_hosts, path, recorder):
        assert recorder.contents == ["first"]
        kazoo.set(path, b"second")
        assert recorder.wait_for(lambda: recorder.contents[-1:] == ["second"])
        kazoo.set(path, b"third")
        assert recorder.wait_for(lambda: recorder.contents == ["first", "second", "third"])


def test_watcher_with_ensure_creates_the_missing_node(
        zookeeper_hosts: str, kazoo: KazooClient, path: str, recorder: Recorder) -> None:
    with watcher_for(zookeeper_hosts, path, recorder, ensure=True) as watcher:
        assert kazoo.exists(path) is not None
        assert watcher.is_valid()
        assert watcher.get_file_contents() == ""


def test_watcher_reports_a_missing_node_then_its_creation(
        zookeeper_hosts: str, kazoo: KazooClient, path: str, recorder: Recorder) -> None:
    with watcher_for(zookeeper_hosts, path, recorder) as watcher:
        assert not watcher.is_valid()
        assert any(path in message for message in recorder.errors)
        kazoo.create(path, b"now here", makepath=True)
        assert recorder.wait_for(lambda: recorder.contents == ["now here"])
        assert recorder.wait_for(lambda: recorder.validity[-1:] == [True])


def test_pointer_mode_follows_a_change_of_the_pointer(
        zookeeper_hosts: str, kazoo: KazooClient, path: str, recorder: Recorder) -> None:
    first, second = f"{path}-config-a", f"{path}-config-b"
    kazoo.create(first, b"config a", makepath=True)
    kazoo.create(second, b"config b", makepath=True)
    kazoo.create(path, first.encode(), makepath=True)
    with watcher_for(zookeeper_hosts, path, recorder, pointer=True) as watcher:
        assert recorder.contents == ["config a"]
        kazoo.set(path, second.encode())
        assert recorder.wait_for(lambda: recorder.contents == ["config a", "config b"])
        assert watcher.get_file_contents(pointer=True) == second


def test_pointer_mode_follows_a_change_of_the_pointed_at_node(
        zookeeper_hosts: str, kazoo: KazooClient, path: str, recorder: Recorder) -> None:
    target = f"{path}-config"
    kazoo.create(target, b"version 1", makepath=True)
    kazoo.create(path, target.encode(), makepath=True)
    with watcher_for(zookeeper_hosts, path, recorder, pointer=True) as watcher:
        kazoo.set(target, b"version 2")
        assert recorder.wait_for(lambda: recorder.contents == ["version 1", "version 2"])
        assert watcher.get_file_contents() == "version 2"


def test_pointer_mode_stops_following_the_node_it_no_longer_points_at(
        zookeeper_hosts: str, kazoo: KazooClient, path: str, recorder: Recorder) -> None:
    old, new = f"{path}-old", f"{path}-new"
    kazoo.create(old, b"old", makepath=True)
    kazoo.create(new, b"new", makepath=True)
    kazoo.create(path, old.encode(), makepath=True)
    with watcher_for(zookeeper_hosts, path, recorder, pointer=True):
        kazoo.set(path, new.encode())
        assert recorder.wait_for(lambda: recorder.contents == ["old", "new"])
        kazoo.set(old, b"old, edited")
        kazoo.set(new, b"new, edited")
        assert recorder.wait_for(lambda: recorder.contents[-1:] == ["new, edited"])
        assert "old, edited" not in recorder.contents


def test_watcher_is_valid_and_answers_ping_while_connected(
        zookeeper_hosts: str, kazoo: KazooClient, path: str, recorder: Recorder) -> None:
    kazoo.create(path, b"x", makepath=True)
    watcher = watcher_for(zookeeper_hosts, path, recorder)
    try:
        assert watcher.is_valid()
        assert watcher.ping()
        assert recorder.validity == [True]
    finally:
        watcher.close()
    assert not watcher.ping()


def test_watcher_refuses_to_start_when_zookeeper_is_unreachable(path: str) -> None:
    with pytest.raises(ZookeeperUnavailableError, match="not reachable"):
        ZookeeperWatcher(f"127.0.0.1:{free_port()}", path, connect_timeout_s=1.0)


def test_watcher_reconnects_after_a_server_restart_and_delivers_the_next_update(
        tmp_path: Path, path: str, recorder: Recorder) -> None:
    with private_zookeeper(tmp_path / "zookeeper") as server:
        with watcher_for(server.hosts, path, recorder, ensure=True) as watcher:
            assert recorder.contents == [""]
            server.stop()
            assert recorder.wait_for(lambda: recorder.validity[-1:] == [False])
            assert not watcher.is_valid()
            server.start()
            assert recorder.wait_for(lambda: recorder.validity[-1:] == [True], RESTART_WAIT_S)
            editor = KazooClient(hosts=server.hosts)
            editor.start(timeout=CONNECT_S)
            try:
                editor.set(path, b"after the restart")
            finally:
                editor.stop()
                editor.close()
            assert recorder.wait_for(lambda: recorder.contents[-1:] == ["after the restart"])


def test_watcher_without_valid_init_connects_once_the_server_is_up(
        tmp_path: Path, path: str, recorder: Recorder) -> None:
    port = free_port()
    with watcher_for(f"127.0.0.1:{port}", path, recorder, ensure=True,
                     valid_init=False) as watcher:
        assert not watcher.is_valid()
        with private_zookeeper(tmp_path / "zookeeper", port=port):
            assert recorder.wait_for(lambda: recorder.contents == [""], RESTART_WAIT_S)
            assert recorder.wait_for(lambda: recorder.validity[-1:] == [True])


# --- ZookeeperDomainConfigStore ---------------------------------------------------------------

def test_node_path_joins_with_exactly_one_slash() -> None:
    assert node_path("/scrapy-cluster/crawler/", "all") == "/scrapy-cluster/crawler/all"
    assert node_path("/scrapy-cluster/crawler", "all") == "/scrapy-cluster/crawler/all"


def test_store_reads_a_missing_node_as_the_empty_document_at_version_0(
        store: ZookeeperDomainConfigStore) -> None:
    assert store.read() == VersionedDocument(DomainDocument(), 0)


def test_store_write_at_version_0_creates_the_node_with_the_yaml(
        store: ZookeeperDomainConfigStore, kazoo: KazooClient, path: str) -> None:
    document = throttled("example.com").with_blacklisted("spam.example")
    assert store.write(document, expected_version=0) == 1
    assert store.read() == VersionedDocument(document, 1)
    data, _stat = kazoo.get(path)
    assert data.decode("utf-8") == document.to_yaml()


def test_store_write_on_a_stale_version_raises_a_conflict(
        store: ZookeeperDomainConfigStore) -> None:
    assert store.write(throttled("a.com"), expected_version=0) == 1
    assert store.write(throttled("b.com"), expected_version=1) == 2
    with pytest.raises(DomainConfigConflictError):
        store.write(throttled("c.com"), expected_version=1)
    with pytest.raises(DomainConfigConflictError):
        store.write(throttled("c.com"), expected_version=0)
    assert store.read() == VersionedDocument(throttled("b.com"), 2)


def test_twenty_concurrent_updates_all_survive(store: ZookeeperDomainConfigStore) -> None:
    domains = [f"site{number}.com" for number in range(20)]
    start = threading.Barrier(len(domains))
    failures: list[BaseException] = []

    def add(number: int) -> None:
        throttle = DomainThrottle(window_s=60, hits=number)
        start.wait(WAIT_S)
        try:
            update(store, lambda document: document.with_throttle(domains[number], throttle))
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=add, args=(number,)) for number in range(len(domains))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S * 4)
    assert failures == []
    final = store.read()
    assert {domain: throttle.hits for domain, throttle in final.document.throttles.items()} == {
        domain: number for number, domain in enumerate(domains)}
    assert final.version == len(domains)


def test_store_watch_delivers_the_current_version_and_each_new_one(
        store: ZookeeperDomainConfigStore, recorder: Recorder) -> None:
    with store.watch(recorder.version):
        assert recorder.wait_for(lambda: recorder.versions == [
            VersionedDocument(DomainDocument(), 0)])
        store.write(throttled("a.com"), expected_version=0)
        store.write(throttled("a.com", "b.com"), expected_version=1)
        assert recorder.wait_for(lambda: recorder.versions[-1:] == [
            VersionedDocument(throttled("a.com", "b.com"), 2)])


def test_store_watch_logs_and_skips_a_document_that_does_not_parse(
        store: ZookeeperDomainConfigStore, kazoo: KazooClient, path: str,
        recorder: Recorder) -> None:
    store.write(throttled("a.com"), expected_version=0)
    with logged_messages("scrapy_cluster.domain_config") as log, store.watch(recorder.version):
        assert recorder.wait_for(lambda: len(recorder.versions) == 1)
        kazoo.set(path, b"domains: [unclosed")
        assert log.logged.wait(WAIT_S)
        store.write(throttled("b.com"), expected_version=2)
        assert recorder.wait_for(lambda: len(recorder.versions) == 2)
    assert recorder.versions == [VersionedDocument(throttled("a.com"), 1),
                                 VersionedDocument(throttled("b.com"), 3)]
    assert len(log.messages) == 1
    assert "version 2 ignored" in log.messages[0]
    assert "not valid YAML" in log.messages[0]


def test_store_watch_recovers_from_an_expired_session(
        store: ZookeeperDomainConfigStore, zookeeper_hosts: str, recorder: Recorder) -> None:
    states: list[KazooState] = []
    reconnected = threading.Event()

    def listen(state: KazooState) -> None:
        states.append(state)
        if KazooState.LOST in states and state == KazooState.CONNECTED:
            reconnected.set()

    store.client.add_listener(listen)
    with store.watch(recorder.version):
        expire_session(store.client, zookeeper_hosts)
        assert reconnected.wait(CONNECT_S)
        store.write(throttled("after.com"), expected_version=0)
        assert recorder.wait_for(lambda: recorder.versions[-1:] == [
            VersionedDocument(throttled("after.com"), 1)])
