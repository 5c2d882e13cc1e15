"""Stats collector: step-window counters, bounded-memory rolling windows, WindowedStats."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster.stats import (
    SECONDS_1_HOUR,
    SECONDS_1_WEEK,
    SECONDS_15_MINUTE,
    SECONDS_30_DAY,
    BitmapCounter,
    Counter,
    HyperLogLogCounter,
    RollingTimeWindow,
    StepWindows,
    TimeWindow,
    UniqueCounter,
    WindowedStats,
    window_seconds,
)
from tests.support.services import RedisServer

# 2016-01-31 19:00:00 UTC, the start of an hour.
HOUR_START_S = 1454266800


class FakeClock:
    """A settable clock: tests move time instead of sleeping."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(HOUR_START_S + 5)


# --- window names -------------------------------------------------------------

def test_window_constants_have_their_lengths_in_seconds() -> None:
    assert (SECONDS_15_MINUTE, SECONDS_1_HOUR, SECONDS_1_WEEK, SECONDS_30_DAY) == (
        900, 3600, 604800, 2592000)


def test_window_seconds_accepts_names_numbers_and_numeric_strings() -> None:
    assert [window_seconds(w) for w in ("SECONDS_6_HOUR", 900, "3600")] == [21600, 900, 3600]


def test_window_seconds_rejects_an_unknown_name_listing_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown stats window 'SECONDS_1_FORTNIGHT'.*SECONDS_1_HOUR"):
        window_seconds("SECONDS_1_FORTNIGHT")


def test_window_seconds_rejects_non_positive_lengths() -> None:
    with pytest.raises(ValueError, match="positive"):
        window_seconds(0)


# --- step-window counters -----------------------------------------------------

@pytest.mark.integration
def test_counter_key_is_base_key_plus_utc_window_start(redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = Counter(redis_client, "counter", clock=clock)
    clock.advance(1800)
    assert counter.get_key() == "counter:2016-01-31_19:00:00"


@pytest.mark.integration
def test_counter_counts_increments_and_amounts(redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = Counter(redis_client, "counter", clock=clock)
    counter.increment()
    counter.increment(amount=4)
    assert counter.value() == 5


@pytest.mark.integration
def test_counter_value_starts_at_start_at(redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = Counter(redis_client, "counter", start_at=100, clock=clock)
    counter.increment()
    assert counter.value() == 101


@pytest.mark.integration
def test_time_window_counts_are_correct_across_a_roll(redis_client: redis.Redis, clock: FakeClock) -> None:
    window = TimeWindow(redis_client, "hits", StepWindows(window_s=SECONDS_1_HOUR), clock=clock)
    for _ in range(3):
        window.increment()
    first_key = window.get_key()
    clock.advance(SECONDS_1_HOUR)
    window.increment()
    assert (window.value(), window.get_key(), int(redis_client.get(first_key))) == (
        1, "hits:2016-01-31_20:00:00", 3)


@pytest.mark.integration
def test_keep_max_keeps_only_that_many_previous_windows(redis_client: redis.Redis, clock: FakeClock) -> None:
    window = TimeWindow(redis_client, "hits", StepWindows(window_s=60, keep_max=2), clock=clock)
    for _ in range(5):
        window.increment()
        clock.advance(60)
    assert sorted(k.decode() for k in redis_client.scan_iter("hits:*")) == [
        "hits:2016-01-31_19:02:00", "hits:2016-01-31_19:03:00", "hits:2016-01-31_19:04:00"]


@pytest.mark.integration
def test_keep_max_deletes_old_windows_after_an_idle_gap(redis_client: redis.Redis, clock: FakeClock) -> None:
    window = TimeWindow(redis_client, "hits", StepWindows(window_s=60, keep_max=2), clock=clock)
    window.increment()
    clock.advance(60 * 3)
    window.increment()
    assert [k.decode() for k in redis_client.scan_iter("hits:*")] == ["hits:2016-01-31_19:03:00"]


@pytest.mark.integration
def test_window_key_ttl_lasts_until_keep_max_windows_have_passed(
        redis_client: redis.Redis, clock: FakeClock) -> None:
    window = TimeWindow(redis_client, "hits", StepWindows(window_s=60, keep_max=2), clock=clock)
    window.increment()
    assert redis_client.ttl(window.get_key()) == 3 * 60 - 5


@pytest.mark.integration
def test_start_time_shifts_window_boundaries(redis_client: redis.Redis, clock: FakeClock) -> None:
    window = TimeWindow(redis_client, "hits",
                        StepWindows(window_s=SECONDS_1_HOUR, start_time_s=HOUR_START_S + 1800),
                        clock=clock)
    assert window.get_key() == "hits:2016-01-31_18:30:00"


@pytest.mark.integration
def test_roll_false_uses_the_plain_key_and_never_resets(redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = Counter(redis_client, "total", StepWindows(roll=False), clock=clock)
    counter.increment()
    clock.advance(SECONDS_30_DAY)
    counter.increment()
    assert (counter.get_key(), counter.value(), redis_client.ttl("total")) == ("total", 2, -1)


@pytest.mark.integration
def test_unique_counter_counts_each_item_once(redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = UniqueCounter(redis_client, "visitors", clock=clock)
    for item in ("a", "b", "a", "c", "b"):
        counter.increment(item)
    assert counter.value() == 3


@pytest.mark.integration
def test_unique_counter_starts_empty_in_a_new_window(redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = UniqueCounter(redis_client, "visitors", StepWindows(window_s=60), clock=clock)
    counter.increment("a")
    clock.advance(60)
    counter.increment("a")
    counter.increment("b")
    assert counter.value() == 2


@pytest.mark.integration
def test_hyperloglog_counter_estimates_distinct_items(redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = HyperLogLogCounter(redis_client, "ips", clock=clock)
    pipe = redis_client.pipeline(transaction=False)
    for item in range(10_000):
        counter.increment(f"10.0.{item // 256}.{item % 256}", pipe=pipe)
        counter.increment(f"10.0.{item // 256}.{item % 256}", pipe=pipe)
    pipe.execute()
    assert 9_700 <= counter.value() <= 10_300


@pytest.mark.integration
def test_bitmap_counter_counts_distinct_ids(redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = BitmapCounter(redis_client, "users", clock=clock)
    for index in (0, 7, 7, 1000):
        counter.increment(index)
    assert counter.value() == 3


def test_bitmap_counter_rejects_a_negative_index(clock: FakeClock) -> None:
    counter = BitmapCounter(redis.Redis(), "users", clock=clock)
    with pytest.raises(ValueError, match="bitmap index must be >= 0"):
        counter.increment(-1)


@pytest.mark.integration
def test_delete_key_removes_the_current_window(redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = Counter(redis_client, "counter", clock=clock)
    counter.increment()
    counter.delete_key()
    assert (redis_client.exists(counter.get_key()), counter.value()) == (0, 0)


@pytest.mark.integration
def test_step_counter_writes_nothing_before_the_callers_pipeline_executes(
        redis_client: redis.Redis, clock: FakeClock) -> None:
    counter = Counter(redis_client, "counter", clock=clock)
    pipe = redis_client.pipeline(transaction=False)
    counter.increment(pipe=pipe)
    written_early = redis_client.exists(counter.get_key())
    pipe.execute()
    assert (written_early, counter.value()) == (0, 1)


# --- rolling windows ----------------------------------------------------------

@pytest.mark.integration
def test_rolling_window_counts_hits_within_the_window(redis_client: redis.Redis, clock: FakeClock) -> None:
    window = RollingTimeWindow(redis_client, "rolling", window_s=60, bucket_s=1, clock=clock)
    for _ in range(4):
        window.increment()
        clock.advance(10)
    assert window.value() == 4


@pytest.mark.integration
def test_rolling_window_drops_hits_older_than_the_window(redis_client: redis.Redis, clock: FakeClock) -> None:
    window = RollingTimeWindow(redis_client, "rolling", window_s=60, bucket_s=1, clock=clock)
    window.increment(amount=5)
    clock.advance(30)
    window.increment(amount=2)
    clock.advance(31)
    assert window.value() == 2


@pytest.mark.integration
def test_rolling_window_far_edge_is_accurate_to_one_bucket(redis_client: redis.Redis, clock: FakeClock) -> None:
    window = RollingTimeWindow(redis_client, "rolling", window_s=60, bucket_s=10, clock=clock)
    clock.now_s = HOUR_START_S + 10  # start of a bucket
    window.increment()
    clock.advance(59.9)  # same hit is 59.9 s old, its bucket is still the oldest in the window
    inside = window.value()
    clock.advance(0.1)  # 60 s old: its bucket has left the window
    assert (inside, window.value()) == (1, 0)


@pytest.mark.integration
def test_rolling_window_removes_buckets_that_left_the_window(redis_client: redis.Redis, clock: FakeClock) -> None:
    window = RollingTimeWindow(redis_client, "rolling", window_s=60, bucket_s=10, clock=clock)
    for _ in range(20):
        window.increment()
        clock.advance(10)
    assert redis_client.hlen("rolling") == 6


@pytest.mark.integration
def test_rolling_window_key_expires_a_window_and_two_buckets_after_its_last_bucket_started(
        redis_client: redis.Redis, clock: FakeClock) -> None:
    window = RollingTimeWindow(redis_client, "rolling", window_s=600, bucket_s=10, clock=clock)
    window.increment()
    assert redis_client.ttl("rolling") == 620


@pytest.mark.integration
def test_rolling_increment_in_the_same_bucket_queues_one_command(
        redis_client: redis.Redis, clock: FakeClock) -> None:
    window = RollingTimeWindow(redis_client, "rolling", window_s=60, bucket_s=10, clock=clock)
    window.increment()
    pipe = redis_client.pipeline(transaction=False)
    window.increment(pipe=pipe)
    assert len(pipe) == 1


@pytest.mark.integration
@pytest.mark.slow
def test_one_week_rolling_window_memory_is_constant_over_a_million_increments(
        redis_client: redis.Redis, clock: FakeClock) -> None:
    window = RollingTimeWindow(redis_client, "stats:test:total:604800", window_s=SECONDS_1_WEEK, clock=clock)
    step_s = 3 * SECONDS_1_WEEK / 1_000_000  # a million hits spread over three simulated weeks
    memory_bytes = []
    for batch in range(100):
        pipe = redis_client.pipeline(transaction=False)
        for _ in range(10_000):
            window.queue_increment(pipe)
            clock.advance(step_s)
        pipe.execute()
        if batch >= 40:  # the window has been full since about batch 33
            memory_bytes.append(redis_client.memory_usage(window.get_key()))
    assert (min(memory_bytes), max(memory_bytes), redis_client.hlen(window.get_key())) == (
        memory_bytes[0], memory_bytes[0], 60)
    assert memory_bytes[0] < 1024


# --- WindowedStats ----------------------------------------------------------------

SETTINGS = {"STATS_TIMES": ["SECONDS_15_MINUTE", "SECONDS_1_HOUR"], "HEARTBEAT_TIMEOUT": 30}


@pytest.fixture
def stats(redis_client: redis.Redis, clock: FakeClock) -> WindowedStats:
    return WindowedStats.from_settings(SETTINGS, redis_client, key_prefix="stats:kafka-monitor", clock=clock)


@pytest.mark.integration
def test_windowed_stats_read_returns_every_window_and_lifetime(stats: WindowedStats) -> None:
    stats.increment("total")
    stats.increment("total", amount=2)
    assert stats.read("total") == {"900": 3, "3600": 3, "lifetime": 3}


@pytest.mark.integration
def test_windowed_stats_read_of_an_unknown_name_is_all_zero(stats: WindowedStats) -> None:
    assert stats.read("fail") == {"900": 0, "3600": 0, "lifetime": 0}


@pytest.mark.integration
def test_windowed_stats_keys_keep_the_seed_shape(stats: WindowedStats, redis_client: redis.Redis) -> None:
    stats.increment("plugin_a")
    assert sorted(k.decode() for k in redis_client.scan_iter("stats:kafka-monitor:plugin_a:*")) == [
        "stats:kafka-monitor:plugin_a:3600",
        "stats:kafka-monitor:plugin_a:900",
        "stats:kafka-monitor:plugin_a:lifetime",
    ]


@pytest.mark.integration
def test_windowed_stats_short_window_forgets_while_lifetime_keeps(
        stats: WindowedStats, clock: FakeClock) -> None:
    stats.increment("total")
    clock.advance(1200)
    stats.increment("total")
    assert stats.read("total") == {"900": 1, "3600": 2, "lifetime": 2}


@pytest.mark.integration
def test_windowed_stats_increment_rides_in_the_callers_pipeline(
        stats: WindowedStats, redis_client: redis.Redis) -> None:
    pipe = redis_client.pipeline(transaction=False)
    pipe.set("callers-own-write", 1)
    stats.increment("total", pipe=pipe)
    written_early = redis_client.exists("stats:kafka-monitor:total:lifetime")
    pipe.execute()
    assert (written_early, stats.read("total")["lifetime"]) == (0, 1)


@pytest.mark.integration
def test_windowed_stats_steady_state_increment_is_one_command_per_window_plus_lifetime(
        stats: WindowedStats, redis_client: redis.Redis) -> None:
    stats.increment("total")
    pipe = redis_client.pipeline(transaction=False)
    stats.increment("total", pipe=pipe)
    assert [command[0][0] for command in pipe.command_stack] == ["HINCRBY", "HINCRBY", "INCRBY"]


@pytest.mark.integration
def test_windowed_stats_read_many_reads_several_names(stats: WindowedStats) -> None:
    stats.increment("total")
    stats.increment("fail")
    assert stats.read_many(["total", "fail"]) == {
        "total": {"900": 1, "3600": 1, "lifetime": 1},
        "fail": {"900": 1, "3600": 1, "lifetime": 1},
    }


@pytest.mark.integration
def test_windowed_stats_names_lists_incremented_names(stats: WindowedStats) -> None:
    stats.increment("total")
    stats.increment("fail")
    stats.increment("total")
    assert stats.names() == ["fail", "total"]


@pytest.mark.integration
def test_heartbeat_writes_the_self_key_with_the_heartbeat_ttl(
        stats: WindowedStats, redis_client: redis.Redis, clock: FakeClock) -> None:
    key = stats.heartbeat("host1", "abc123")
    assert (key, float(redis_client.get(key)), redis_client.ttl(key)) == (
        "stats:kafka-monitor:self:host1:abc123", clock(), 30)


@pytest.mark.integration
def test_heartbeat_ttl_can_be_overridden(stats: WindowedStats, redis_client: redis.Redis) -> None:
    key = stats.heartbeat("host1", "spider", "abc123", ttl_s=5)
    assert (key, redis_client.ttl(key)) == ("stats:kafka-monitor:self:host1:spider:abc123", 5)


def test_windowed_stats_rejects_a_prefix_outside_the_stats_namespace() -> None:
    with pytest.raises(ValueError, match="key_prefix must start with 'stats:'"):
        WindowedStats(redis.Redis(), key_prefix="kafka-monitor", windows_s=[900])


def test_windowed_stats_from_settings_rejects_an_unknown_window_name() -> None:
    with pytest.raises(ValueError, match="unknown stats window 'SECONDS_1_EON'"):
        WindowedStats.from_settings({"STATS_TIMES": ["SECONDS_1_EON"]}, redis.Redis(), key_prefix="stats:x")


@pytest.mark.integration
def test_windowed_stats_keeps_counting_after_a_redis_restart(
        private_redis: RedisServer, clock: FakeClock) -> None:
    client = redis.Redis.from_url(private_redis.url)
    stats = WindowedStats(client, key_prefix="stats:redis-monitor", windows_s=[900], clock=clock)
    stats.increment("total")
    private_redis.restart()  # not persisted: the counts start again from zero
    stats.increment("total")
    assert stats.read("total") == {"900": 1, "lifetime": 1}
    client.close()


@pytest.mark.integration
def test_windowed_stats_increment_can_ride_in_an_asyncio_pipeline(
        redis_url: str, redis_client: redis.Redis, clock: FakeClock) -> None:
    import asyncio

    import redis.asyncio

    async def count_twice() -> None:
        async_client = redis.asyncio.Redis.from_url(redis_url)
        stats = WindowedStats(async_client, key_prefix="stats:crawler", windows_s=[900], clock=clock)  # type: ignore[arg-type]
        pipe = async_client.pipeline(transaction=False)
        stats.increment("host1:spider:200", pipe=pipe)
        stats.increment("host1:spider:200", pipe=pipe)
        await pipe.execute()
        await async_client.aclose()

    asyncio.run(count_twice())
    reader = WindowedStats(redis_client, key_prefix="stats:crawler", windows_s=[900], clock=clock)
    assert reader.read("host1:spider:200") == {"900": 2, "lifetime": 2}
