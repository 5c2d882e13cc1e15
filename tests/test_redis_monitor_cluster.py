"""The Redis Monitor end to end: real ``kafka-monitor run`` and ``redis-monitor`` processes.

Requests go in with ``scrapy-cluster feed`` (or straight into ``redis-monitor:jobs`` with
``JobWriter`` / raw XADD); answers are read from ``<prefix>.outbound_firehose`` (and
``<prefix>.outbound_testapp``) with a bus reader, exactly as an application reads them.
No crawler runs, so the queues hold exactly what was fed.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner

from scrapy_cluster import keys
from scrapy_cluster.bus import create_bus, topics
from scrapy_cluster.cli import main
from scrapy_cluster.frontier import Frontier
from scrapy_cluster.kafka_monitor.jobs import JobWriter
from scrapy_cluster.settings import load_settings
from scrapy_cluster.stats.reasons import NO_CRAWLER
from tests.support.monitors import monitors_up
from tests.support.processes import Processes

pytestmark = pytest.mark.integration

SPIDER, APP = "link", "testapp"
GROUP = "redis-monitor"  # the job stream's consumer group
WINDOWS = ("900", "3600", "21600", "43200", "86400", "604800")
MIN_HELD = 10  # jobs the killed monitor must hold for the kill test to mean something


def funnel(queued: int) -> dict[str, Any]:
    """The URL funnel of a crawl of seeds only, nothing crawled: every URL offered was new."""
    return {"submitted": queued, "queued": queued, "deduplicated": 0, "filtered": {},
            "fetched": {}, "retried": 0, "dropped": 0, "delivered": 0}


def windows(count: int) -> dict[str, int]:
    """A stats answer's window dictionary when every request counted fell in every window."""
    return {**dict.fromkeys(WINDOWS, count), "lifetime": count}


# --- settings -----------------------------------------------------------------------------

def _env(backend: dict[str, Any], redis_url: str, tmp_path: Path) -> dict[str, str]:
    name = uuid.uuid4().hex[:8]
    values = {**backend, "REDIS_URL": redis_url, "KAFKA_TOPIC_PREFIX": f"rm-{name}",
              "KAFKA_INCOMING_TOPIC": f"rm-{name}.incoming", "KAFKA_GROUP": f"rm-{name}",
              "KAFKA_APPID_TOPICS": True, "REDIS_LOCK_EXPIRATION": 1, "STATS_DUMP": 0,
              "LOG_LEVEL": "WARNING", "SC_DATA_DIR": str(tmp_path / "no-cluster"),
              "KAFKA_FEED_TIMEOUT": 10}
    return {key: str(value) for key, value in values.items()}


@pytest.fixture
def env(bus_backend: tuple[str, dict[str, Any]], redis_client: redis.Redis, redis_url: str,
        tmp_path: Path) -> dict[str, str]:
    """Settings as environment variables: fresh topics and group on the backend under test."""
    return _env(bus_backend[1], redis_url, tmp_path)


@pytest.fixture
def redis_env(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> dict[str, str]:
    """The same on the Redis Streams bus only."""
    return _env({"BUS_BACKEND": "redis", "REDIS_STREAM_CLAIM_IDLE_MS": 1000}, redis_url, tmp_path)


# --- helpers ------------------------------------------------------------------------------

def cli(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env=env)


def feed(env: dict[str, str], request: dict[str, Any], handler: str) -> None:
    result = cli(env, "feed", orjson.dumps(request).decode())
    assert (result.exit_code, result.stdout) == (
        0, f"sent to {env['KAFKA_INCOMING_TOPIC']} ({handler})\n"), result.stderr


def feed_file(env: dict[str, str], path: Path, requests: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(request) + b"\n" for request in requests))
    result = cli(env, "feed", "--file", str(path))
    assert (result.exit_code, result.stdout) == (
        0, f"sent {len(requests)}, failed 0, invalid 0\n"), result.stderr


def pending(env: dict[str, str], client: redis.Redis, crawlid: str) -> int:
    frontier = Frontier.from_settings(load_settings("redis-monitor", environ=env), client)
    return frontier.crawl_info(SPIDER, APP, crawlid).total_pending


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str | Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for "
                                 f"{what() if callable(what) else what}")
        time.sleep(0.05)


def lifetime(client: redis.Redis, name: str) -> int:
    return int(client.get(f"stats:redis-monitor:{name}:lifetime") or 0)


def consumer_of(client: redis.Redis, process: subprocess.Popen[bytes]) -> str:
    """The group member name of a monitor process."""
    prefix = f"{socket.gethostname()}:{process.pid}-"
    names = [name for name in monitors_up(client) if name.startswith(prefix)]
    assert len(names) == 1, f"no single monitor named {prefix}*: {monitors_up(client)}"
    return names[0]


def pending_jobs(client: redis.Redis) -> int:
    try:
        return int(client.xpending(keys.redis_monitor_jobs(), GROUP)["pending"])
    except redis.ResponseError:
        return 0


def write_info_jobs(env: dict[str, str], client: redis.Redis, numbers: range) -> None:
    """Info jobs for crawls with nothing queued (cheap), uuid ``u<n>``, in one round trip."""
    writer = JobWriter.from_settings(load_settings("kafka-monitor", environ=env))
    pipe = client.pipeline(transaction=False)
    for n in numbers:
        writer.queue_job(pipe, "info", keys.info_job(SPIDER, APP, f"c{n}", f"u{n}"),
                         {"action": "info", "appid": APP, "spiderid": SPIDER,
                          "crawlid": f"c{n}", "uuid": f"u{n}"})
    pipe.execute()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path)
    yield running
    running.stop_all()


class Answers:
    """Every message on some topics, read from their beginning with a bus reader."""

    def __init__(self, env: dict[str, str], topic_names: list[str]) -> None:
        self.bus = create_bus(load_settings("redis-monitor", environ=env))
        self.reader = self.bus.reader(topic_names, from_beginning=True)
        self.seen: list[tuple[str, dict[str, Any], float]] = []  # topic, answer, epoch s read

    def poll(self, timeout_s: float = 0.2) -> int:
        messages = self.reader.poll(1000, timeout_s)
        now = time.time()
        self.seen += [(message.topic, message.value, now) for message in messages]
        return len(messages)

    def values(self, topic: str) -> list[dict[str, Any]]:
        return [value for seen_topic, value, _ in self.seen if seen_topic == topic]

    def wait_for(self, topic: str, match: Callable[[dict[str, Any]], bool], what: str,
                 timeout_s: float = 30) -> tuple[dict[str, Any], float]:
        """The first answer on ``topic`` that ``match``es, and when it was read."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [(value, at) for seen_topic, value, at in self.seen
                     if seen_topic == topic and isinstance(value, dict) and match(value)]
            if found:
                return found[0]
            assert time.monotonic() < deadline, (
                f"timed out after {timeout_s}s waiting for {what} on {topic}; "
                f"saw {[value for _, value, _ in self.seen][-10:]}")
            self.poll()

    def drain(self, quiet_s: float = 0.5) -> None:
        """Read until nothing more arrives for ``quiet_s``."""
        while self.poll(quiet_s):
            pass

    def close(self) -> None:
        self.reader.close()
        self.bus.close()


@pytest.fixture
def answers_factory() -> Iterator[Callable[[dict[str, str], list[str]], Answers]]:
    opened: list[Answers] = []

    def open_answers(env: dict[str, str], topic_names: list[str]) -> Answers:
        opened.append(Answers(env, topic_names))
        return opened[-1]

    yield open_answers
    for answers in opened:
        answers.close()


def firehose(env: dict[str, str]) -> str:
    return topics.outbound_firehose(env["KAFKA_TOPIC_PREFIX"])


def app_topic(env: dict[str, str]) -> str:
    return topics.outbound_app(env["KAFKA_TOPIC_PREFIX"], APP)


class Asker:
    """Feeds a request through the Kafka Monitor and returns the Redis Monitor's answer,
    checking it arrived identically on the firehose and the app's topic."""

    def __init__(self, env: dict[str, str], answers: Answers) -> None:
        self.env = env
        self.answers = answers

    def __call__(self, request: dict[str, Any], handler: str) -> dict[str, Any]:
        before = int(time.time())
        feed(self.env, request, handler)
        answer = self.expect(lambda value: value.get("uuid") == request["uuid"],
                             f"the answer to {request}", before)
        return answer

    def expect(self, match: Callable[[dict[str, Any]], bool], what: str, before: int,
               timeout_s: float = 45) -> dict[str, Any]:
        """The matching answer without its ``server_time`` (checked: an int near now)."""
        answer, _ = self.answers.wait_for(firehose(self.env), match, what, timeout_s)
        copy, _ = self.answers.wait_for(app_topic(self.env), match, what, 10)
        assert copy == answer
        answer = dict(answer)
        server_time = answer.pop("server_time")
        assert isinstance(server_time, int)
        assert before - 5 <= server_time <= time.time() + 5, answer
        return answer


# --- 1. end to end, on both bus backends ------------------------------------------------------

def test_answers_info_stats_domain_and_stop_end_to_end(
        env: dict[str, str], processes: Processes, redis_client: redis.Redis, tmp_path: Path,
        answers_factory: Callable[[dict[str, str], list[str]], Answers]) -> None:
    answers = answers_factory(env, [firehose(env), app_topic(env)])
    kafka_monitor = processes.start(env, "kafka-monitor", "run")
    processes.start(env, "redis-monitor")
    expires = int(time.time()) + 3600
    crawl = {"appid": APP, "crawlid": "abc123", "spiderid": SPIDER}
    feed_file(env, tmp_path / "crawls.jsonl", [
        {**crawl, "url": "http://127.0.0.51:9/a", "priority": 1},
        {**crawl, "url": "http://127.0.0.51:9/b", "priority": 5},
        {**crawl, "url": "http://127.0.0.51:9/c", "priority": 3},
        {**crawl, "url": "http://127.0.0.52:9/a", "priority": 2},
        {**crawl, "url": "http://127.0.0.52:9/b?x=1", "priority": 2},
        {**crawl, "url": "http://127.0.0.53:9/", "priority": 1},
        {**crawl, "crawlid": "def456", "url": "http://127.0.0.53:9/z", "priority": 4,
         "expires": expires},
    ])
    wait_for(lambda: (pending(env, redis_client, "abc123"),
                      pending(env, redis_client, "def456")) == (6, 1), 45,
             lambda: f"the crawls on the frontier\n{processes.logs()}")
    ask = Asker(env, answers)
    abc_domains = {"127.0.0.51": {"low_priority": 1, "high_priority": 5, "total": 3},
                   "127.0.0.52": {"low_priority": 2, "high_priority": 2, "total": 2},
                   "127.0.0.53": {"low_priority": 1, "high_priority": 1, "total": 1}}

    info = ask({"action": "info", "appid": APP, "crawlid": "abc123", "uuid": "info-1",
                "spiderid": SPIDER}, "ActionHandler")
    assert info == {"uuid": "info-1", "spiderid": SPIDER, "appid": APP, "crawlid": "abc123",
                    "total_pending": 6, "total_domains": 3, "domains": abc_domains,
                    "status": "running", "funnel": funnel(6), "reason": NO_CRAWLER}

    assert ask({"action": "info", "appid": APP, "crawlid": "def456", "uuid": "info-2",
                "spiderid": SPIDER}, "ActionHandler") == {
        "uuid": "info-2", "spiderid": SPIDER, "appid": APP, "crawlid": "def456",
        "total_pending": 1, "total_domains": 1, "expires": str(expires),
        "domains": {"127.0.0.53": {"low_priority": 4, "high_priority": 4, "total": 1}},
        "status": "running", "funnel": funnel(1),
        "reason": NO_CRAWLER}

    assert ask({"action": "info", "appid": APP, "uuid": "info-app", "spiderid": SPIDER},
               "ActionHandler") == {
        "uuid": "info-app", "spiderid": SPIDER, "appid": APP, "total_pending": 7,
        "total_domains": 3, "total_crawlids": 2,
        "crawlids": {
            "abc123": {"domains": abc_domains, "distinct_domains": 3, "total": 6,
                       "status": "running", "funnel": funnel(6), "reason": NO_CRAWLER},
            "def456": {"domains": {"127.0.0.53": {"low_priority": 4, "high_priority": 4,
                                                  "total": 1}},
                       "distinct_domains": 1, "total": 1, "expires": str(expires),
                       "status": "running", "funnel": funnel(1), "reason": NO_CRAWLER}}}

    assert ask({"appid": APP, "uuid": "stats-queue", "stats": "queue"}, "StatsHandler") == {
        "stats": "queue", "appid": APP, "uuid": "stats-queue",
        "queues": {"queue_link": {"domains": [{"domain": "127.0.0.51", "backlog": 3},
                                              {"domain": "127.0.0.52", "backlog": 2},
                                              {"domain": "127.0.0.53", "backlog": 2}],
                                  "spider_backlog": 7, "num_domains": 3},
                   "total_backlog": 7}}

    # The Kafka Monitor counts a request in the transaction that writes its job, so this
    # answer counts the stats request itself: 7 crawls, 3 infos and 2 stats requests.
    stats = ask({"appid": APP, "uuid": "stats-km", "stats": "kafka-monitor"}, "StatsHandler")
    [(machine, [node])] = stats.pop("nodes").items()
    assert machine == socket.gethostname()
    assert node.startswith(f"{kafka_monitor.pid}-")
    assert stats == {"stats": "kafka-monitor", "appid": APP, "uuid": "stats-km",
                     "total": windows(12),
                     "plugins": {"ScraperHandler": windows(7), "ActionHandler": windows(3),
                                 "StatsHandler": windows(2)}}

    assert ask({"uuid": "domain-1", "appid": APP, "action": "domain-update",
                "domain": "127.0.0.51", "hits": 10, "window": 60, "scale": 0.5},
               "ZookeeperHandler") == {
        "action": "domain-update", "domain": "127.0.0.51", "uuid": "domain-1", "appid": APP}
    throttle = redis_client.hget(keys.domain_throttle_config(), "127.0.0.51")
    assert throttle is not None
    assert orjson.loads(throttle) == {"window": 60.0, "hits": 10, "scale": 0.5}

    stop = ask({"action": "stop", "appid": APP, "crawlid": "abc123", "uuid": "stop-1",
                "spiderid": SPIDER}, "ActionHandler")
    assert stop == {"action": "stop", "total_purged": info["total_pending"], "crawlid": "abc123",
                    "uuid": "stop-1", "spiderid": SPIDER, "appid": APP}

    assert ask({"action": "info", "appid": APP, "crawlid": "abc123", "uuid": "info-3",
                "spiderid": SPIDER}, "ActionHandler") == {
        "uuid": "info-3", "spiderid": SPIDER, "appid": APP, "crawlid": "abc123",
        "total_pending": 0, "total_domains": 0, "domains": {}, "status": "stopped",
        "funnel": funnel(6)}  # the funnel is the crawl's history: it outlives the purge
    assert pending(env, redis_client, "def456") == 1, "stop purged another crawl"
    # Every job was taken and acknowledged, each answered once. The monitor acknowledges a job
    # after its answer is on the bus, so the last acknowledgement may follow the last answer.
    wait_for(lambda: pending_jobs(redis_client) == 0, 15, "every job acknowledged")
    assert redis_client.hlen(keys.redis_monitor_taken()) == 0
    answers.drain()
    uuids = Counter(value.get("uuid") for value in answers.values(firehose(env)))
    assert uuids == Counter(["info-1", "info-2", "info-app", "stats-queue", "stats-km",
                             "domain-1", "stop-1", "info-3"])
    assert all(process.poll() is None for process, _ in processes.processes), processes.logs()
    assert processes.stop_all() == [0, 0]


def test_expired_crawl_is_purged_and_announced(
        env: dict[str, str], processes: Processes, redis_client: redis.Redis, tmp_path: Path,
        answers_factory: Callable[[dict[str, str], list[str]], Answers]) -> None:
    answers = answers_factory(env, [firehose(env), app_topic(env)])
    processes.start(env, "kafka-monitor", "run")
    processes.start(env, "redis-monitor")
    ask = Asker(env, answers)
    # Both monitors and the bus answer before the clock of the expiring crawl starts.
    assert ask({"action": "info", "appid": APP, "uuid": "warm-up", "spiderid": SPIDER},
               "ActionHandler")["total_pending"] == 0
    expires = int(time.time()) + 3
    fed_at = time.time()
    urls = ["http://127.0.0.51:9/e", "http://127.0.0.52:9/e", "http://127.0.0.52:9/f"]
    feed_file(env, tmp_path / "expiring.jsonl", [
        {"url": url, "appid": APP, "crawlid": "exp1", "spiderid": SPIDER, "expires": expires}
        for url in urls])
    answer, read_at = answers.wait_for(
        firehose(env), lambda value: value.get("action") == "expired", "the expired answer", 30)
    delay = read_at - expires
    fed_in_s = time.time() - fed_at
    assert answer["server_time"] >= expires, f"expired early: {answer} (expires {expires})"
    assert {**answer, "server_time": None} == {
        "action": "expired", "total_expired": len(urls), "server_time": None, "crawlid": "exp1",
        "spiderid": SPIDER, "appid": APP}, f"answer read {delay:.2f}s after the expiry"
    copy, _ = answers.wait_for(app_topic(env), lambda value: value.get("action") == "expired",
                               "the expired answer on the app topic", 10)
    assert copy == answer
    assert pending(env, redis_client, "exp1") == 0
    assert redis_client.zcard(keys.crawl_timeouts()) == 0
    assert not redis_client.exists(keys.crawl_timeout(SPIDER, APP, "exp1"))
    assert ask({"action": "info", "appid": APP, "crawlid": "exp1", "uuid": "after",
                "spiderid": SPIDER}, "ActionHandler") == {
        "uuid": "after", "spiderid": SPIDER, "appid": APP, "crawlid": "exp1",
        "total_pending": 0, "total_domains": 0, "domains": {}, "status": "expired",
        "funnel": funnel(len(urls))}
    answers.drain()
    expired = [value for value in answers.values(firehose(env))
               if value.get("action") == "expired"]
    assert len(expired) == 1, (f"expired announced {len(expired)} times; answer read "
                               f"{delay:.2f}s after the expiry (fed in {fed_in_s:.2f}s)")
    # Not a timing assertion: a loose bound that the 0.5 s tick ran at all near the expiry.
    assert delay < 15, f"expired answer read {delay:.2f}s after the expiry"


# --- 2. two monitors share the jobs -------------------------------------------------------------

def start_monitors(env: dict[str, str], processes: Processes, client: redis.Redis,
                   count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` Redis Monitors, returned once each is a member of the job group."""
    started = [processes.start(env, "redis-monitor") for _ in range(count)]
    wait_for(lambda: len(monitors_up(client)) == count, 30,
             lambda: f"{count} monitors reading jobs\n{processes.logs()}")
    return started


@pytest.mark.slow
def test_two_monitors_answer_a_thousand_jobs_exactly_once(
        redis_env: dict[str, str], processes: Processes, redis_client: redis.Redis,
        answers_factory: Callable[[dict[str, str], list[str]], Answers]) -> None:
    env = {**redis_env, "LOG_LEVEL": "INFO"}  # "Sent info to bus" per job tells who answered
    answers = answers_factory(env, [firehose(env)])
    monitors = start_monitors(env, processes, redis_client, 2)
    write_info_jobs(env, redis_client, range(1000))
    def thousand_answers() -> bool:
        answers.poll()
        return len(answers.values(firehose(env))) >= 1000

    wait_for(thousand_answers, 45,
             lambda: f"1,000 answers, have {len(answers.values(firehose(env)))}")
    wait_for(lambda: pending_jobs(redis_client) == 0, 15, "every job acknowledged")
    answers.drain()
    values = answers.values(firehose(env))
    uuids = Counter(value["uuid"] for value in values)
    assert set(uuids) == {f"u{n}" for n in range(1000)}
    assert [uuid for uuid, count in uuids.items() if count > 1] == []
    assert len(values) == 1000
    assert next(value for value in values if value["uuid"] == "u7") == {
        "server_time": next(value for value in values if value["uuid"] == "u7")["server_time"],
        "uuid": "u7", "spiderid": SPIDER, "appid": APP, "crawlid": "c7", "total_pending": 0,
        "total_domains": 0, "domains": {}, "status": "unknown", "funnel": funnel(0)}
    assert lifetime(redis_client, "InfoMonitor") == 1000
    assert lifetime(redis_client, "total") == 1000
    assert redis_client.hlen(keys.redis_monitor_taken()) == 0
    assert not redis_client.exists(*(keys.info_job(SPIDER, APP, f"c{n}", f"u{n}")
                                     for n in range(1000)))
    assert processes.stop_all() == [0, 0]
    per_monitor = [processes.log(monitor).count("Sent info to bus") for monitor in monitors]
    assert sum(per_monitor) == 1000, per_monitor
    assert min(per_monitor) > 0, f"one monitor answered everything: {per_monitor}"


# --- 3. a monitor killed with jobs in hand ---------------------------------------------------

def stopped(process: subprocess.Popen[bytes]) -> bool:
    """True once the process is in the stopped state (after SIGSTOP)."""
    stat = Path(f"/proc/{process.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def frozen_with_jobs(client: redis.Redis, process: subprocess.Popen[bytes],
                     consumer: str) -> list[str]:
    """SIGSTOP the monitor and return the stream entries it read and has not acknowledged
    (it stays stopped: send SIGCONT to let it go on)."""
    process.send_signal(signal.SIGSTOP)
    wait_for(lambda: stopped(process), 5, "the monitor to stop")
    held: list[dict[str, Any]] = client.xpending_range(
        keys.redis_monitor_jobs(), GROUP, min="-", max="+", count=10_000, consumername=consumer)
    return [entry["message_id"].decode() for entry in held]


@pytest.mark.slow
def test_monitor_killed_with_jobs_in_hand_loses_none(
        redis_env: dict[str, str], processes: Processes, redis_client: redis.Redis,
        answers_factory: Callable[[dict[str, str], list[str]], Answers]) -> None:
    env = redis_env  # REDIS_LOCK_EXPIRATION=1: the victim's jobs are claimed after 1 s idle
    answers = answers_factory(env, [firehose(env)])
    # The victim runs alone and reads all 1,000 jobs as one batch, so it holds them for as long
    # as it takes to handle them; it is frozen (SIGSTOP) until caught holding at least
    # MIN_HELD jobs it read but did not acknowledge; then a second monitor joins and the victim
    # is SIGKILLed while both are members of the group.
    [victim] = start_monitors({**env, "REDIS_MONITOR_BATCH_SIZE": "1000"}, processes,
                              redis_client, 1)
    victim_name = consumer_of(redis_client, victim)
    write_info_jobs(env, redis_client, range(1000))
    answered = keys.bus_stream(firehose(env))
    held: list[str] = []
    attempts = 0
    deadline = time.monotonic() + 30
    while len(held) < MIN_HELD:
        assert time.monotonic() < deadline, f"the victim never held jobs\n{processes.logs()}"
        assert pending_jobs(redis_client) or redis_client.xlen(answered) < 1000, (
            f"every job was answered before the victim was caught holding {MIN_HELD} "
            f"({attempts} attempts)")
        if attempts:
            victim.send_signal(signal.SIGCONT)
        attempts += 1
        held = frozen_with_jobs(redis_client, victim, victim_name)
    survivor = processes.start(env, "redis-monitor")
    wait_for(lambda: len(monitors_up(redis_client)) == 2, 30,
             lambda: f"the second monitor reading jobs\n{processes.logs()}")
    answered_at_kill = int(redis_client.xlen(answered))
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    entries: Any = [redis_client.xrange(keys.redis_monitor_jobs(), entry, entry)
                    for entry in held]
    held_uuids = {orjson.loads(fields[b"payload"])["uuid"] for [(_, fields)] in entries}

    def all_answered() -> bool:
        answers.poll()
        return {value["uuid"] for value in answers.values(firehose(env))} >= {
            f"u{n}" for n in range(1000)}

    wait_for(all_answered, 40, lambda: (
        f"every job answered; missing "
        f"{1000 - len({value['uuid'] for value in answers.values(firehose(env))})}, "
        f"pending {pending_jobs(redis_client)}\n{processes.logs()}"))
    wait_for(lambda: pending_jobs(redis_client) == 0, 15, "every job acknowledged")
    answers.drain()
    uuids = Counter(value["uuid"] for value in answers.values(firehose(env)))
    duplicated = {uuid for uuid, count in uuids.items() if count > 1}
    report = (f"victim killed holding {len(held)} jobs after {answered_at_kill} of 1,000 were "
              f"answered; {sum(uuids.values()) - 1000} duplicate answers")
    assert set(uuids) == {f"u{n}" for n in range(1000)}, report
    assert duplicated <= held_uuids, f"{report}; duplicated outside the victim's batch"
    assert sum(uuids.values()) - 1000 <= len(held), report
    assert redis_client.hlen(keys.redis_monitor_taken()) == 0, report
    assert survivor.poll() is None, processes.logs()


# --- 4. malformed jobs ----------------------------------------------------------------------------

def raw_job(client: redis.Redis, fields: dict[str, bytes | str], *,
            key: str | None = None, value: bytes | None = None) -> None:
    """XADD an entry as is; SET ``key`` first when given (a job is taken only while its
    key exists)."""
    if key is not None:
        client.set(key, value if value is not None else b"{}", ex=600)
    client.xadd(keys.redis_monitor_jobs(), fields)  # type: ignore[arg-type]


def test_malformed_jobs_are_dropped_with_an_error_answer(
        redis_env: dict[str, str], processes: Processes, redis_client: redis.Redis,
        answers_factory: Callable[[dict[str, str], list[str]], Answers]) -> None:
    env = redis_env
    answers = answers_factory(env, [firehose(env)])
    [monitor] = start_monitors(env, processes, redis_client, 1)

    def job(job_type: str, key: str, payload: dict[str, Any] | bytes) -> None:
        body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        raw_job(redis_client, {"key": key, "type": job_type, "payload": body}, key=key,
                value=body)

    info = {"action": "info", "appid": APP, "spiderid": SPIDER, "crawlid": "c1"}
    # Entries whose request cannot be read: nothing to answer to.
    raw_job(redis_client, {"key": "info:link:testapp:c1:m-nopayload", "type": "info"},
            key="info:link:testapp:c1:m-nopayload")
    job("info", "info:link:testapp:c1:m-notjson", b"{not json")
    job("info", "info:link:testapp:c1:m-array", b"[1, 2]")
    # Readable requests that can never succeed: an error answer each.
    job("bogus", "bogus:testapp:m-type", {"appid": APP, "uuid": "m-type"})
    job("info", "info:7:testapp:c1:m-spider", {**info, "spiderid": 7, "uuid": "m-spider"})
    job("info", "info:link:testapp:c1:m-nouuid", {**info, "uuid": None})
    job("statsrequest", "statsrequest:bogus:testapp:m-stats",
        {"appid": APP, "uuid": "m-stats", "stats": "bogus"})
    job("zk", "zk:explode:example.com:testapp:m-zk",
        {"appid": APP, "uuid": "m-zk", "action": "explode", "domain": "example.com"})
    # And a good one after them.
    write_info_jobs(env, redis_client, range(1))

    good, _ = answers.wait_for(firehose(env), lambda value: value.get("uuid") == "u0",
                               "the good job's answer", 30)
    assert good["total_pending"] == 0 and "error" not in good
    errors: dict[str, dict[str, Any]] = {}
    for wanted in ("m-type", "m-spider", "m-stats", "m-zk"):
        errors[wanted], _ = answers.wait_for(
            firehose(env), lambda value, wanted=wanted: value.get("uuid") == wanted,  # type: ignore[misc]
            f"the error answer for {wanted}", 15)
    no_uuid, _ = answers.wait_for(
        firehose(env), lambda value: "error" in value and value.get("uuid") is None,
        "the error answer of the info job without uuid", 15)
    wait_for(lambda: pending_jobs(redis_client) == 0, 15, "every entry acknowledged")
    answers.drain()

    assert errors["m-type"]["error"] == (
        "no plugin handles job type 'bogus' (key 'bogus:testapp:m-type')")
    assert errors["m-type"]["appid"] == APP
    assert errors["m-spider"]["error"] == "info job field 'spiderid' has the wrong type (int)"
    assert {name: errors["m-spider"][name] for name in ("appid", "spiderid", "crawlid")} == {
        "appid": APP, "spiderid": 7, "crawlid": "c1"}
    assert errors["m-stats"]["error"].startswith("unknown stats type 'bogus'")
    assert errors["m-stats"]["stats"] == "bogus"
    assert errors["m-zk"]["error"].startswith("unknown domain action 'explode'")
    assert (errors["m-zk"]["action"], errors["m-zk"]["domain"]) == ("explode", "example.com")
    assert no_uuid["error"] == "info job lacks required field 'uuid'"
    assert no_uuid["appid"] == APP
    for answer in [*errors.values(), no_uuid]:
        assert isinstance(answer["server_time"], int)
    # Entries whose request could not be read are dropped without an answer (no uuid to
    # answer to); every one is acknowledged and the monitor keeps serving.
    answered = Counter(value.get("uuid") for value in answers.values(firehose(env)))
    assert answered == Counter(["u0", "m-type", "m-spider", None, "m-stats", "m-zk"])
    assert monitor.poll() is None, processes.logs()
    assert redis_client.hlen(keys.redis_monitor_taken()) == 0
    assert lifetime(redis_client, "fail") == 8
    log = processes.log(monitor)
    for reason in ("job payload is not JSON", "job payload is not a JSON object",
                   "job entry has no payload"):
        assert reason in log, f"{reason!r} not logged:\n{log}"


def test_entries_lacking_key_or_type_get_an_error_answer(
        redis_env: dict[str, str], processes: Processes, redis_client: redis.Redis,
        answers_factory: Callable[[dict[str, str], list[str]], Answers]) -> None:
    env = redis_env
    answers = answers_factory(env, [firehose(env)])
    [monitor] = start_monitors(env, processes, redis_client, 1)
    info = {"action": "info", "appid": APP, "spiderid": SPIDER, "crawlid": "c1"}
    raw_job(redis_client, {"type": "info", "payload": orjson.dumps({**info, "uuid": "m-nokey"})})
    body = orjson.dumps({**info, "uuid": "m-notype"})
    raw_job(redis_client, {"key": "info:link:testapp:c1:m-notype", "payload": body},
            key="info:link:testapp:c1:m-notype", value=body)
    write_info_jobs(env, redis_client, range(1))
    answers.wait_for(firehose(env), lambda value: value.get("uuid") == "u0",
                     "the good job's answer", 30)
    wait_for(lambda: pending_jobs(redis_client) == 0, 15, "every entry acknowledged")
    answers.drain()
    assert monitor.poll() is None, processes.logs()
    errors: dict[str, str] = {str(value.get("uuid")): value["error"]
                              for value in answers.values(firehose(env)) if "error" in value}
    assert set(errors) == {"m-nokey", "m-notype"}, errors
    assert "key" in errors["m-nokey"] and "type" in errors["m-notype"], errors
