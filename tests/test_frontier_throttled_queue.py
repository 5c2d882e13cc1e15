"""RedisThrottledQueue over the project's Redis queues, with an injected clock."""

from __future__ import annotations

import pytest
import redis

from scrapy_cluster.frontier.throttled_queue import QueueThrottle, RedisThrottledQueue
from scrapy_cluster.queues import RedisPriorityQueue, RedisQueue
from tests.support.frontier import ManualClock

pytestmark = pytest.mark.integration


def throttled(client: redis.Redis, clock: ManualClock, *,
              moderate: bool = False) -> RedisThrottledQueue:
    return RedisThrottledQueue(client, RedisPriorityQueue(client, "tq"),
                               QueueThrottle(10, 2, moderate=moderate), clock=clock)


def test_pops_in_priority_order_up_to_the_limit(redis_client: redis.Redis) -> None:
    queue = throttled(redis_client, ManualClock())
    for priority, item in ((1, "low"), (9, "high"), (5, "mid")):
        queue.push(item, priority)
    assert [queue.pop(), queue.pop(), queue.pop()] == ["high", "mid", None]
    assert (queue.last_wait_s, len(queue)) == (10.0, 1)


def test_sliding_window_frees_a_slot_after_the_window(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    queue = throttled(redis_client, clock)
    for i in range(4):
        queue.push(f"item{i}", 0)
    queue.pop(), queue.pop()
    clock.advance(9_999)
    assert queue.pop() is None
    clock.advance(1)
    assert queue.pop() == "item2"


def test_moderated_spaces_pops(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    queue = throttled(redis_client, clock, moderate=True)
    for i in range(3):
        queue.push(f"item{i}", 0)
    assert queue.pop() == "item0"
    assert queue.pop() is None and queue.last_wait_s == 5.0
    clock.advance(5_000)
    assert queue.pop() == "item1"


def test_elastic_catches_up_but_never_beyond_the_limit(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    queue = RedisThrottledQueue(redis_client, RedisQueue(redis_client, "tq"),
                                QueueThrottle(10, 4, moderate=True, elastic=True), clock=clock)
    for i in range(10):
        queue.push(f"item{i}")
    popped = [queue.pop() for _ in range(10)]
    assert sum(item is not None for item in popped) == 4


def test_empty_queue_takes_no_slot(redis_client: redis.Redis) -> None:
    clock = ManualClock()
    queue = throttled(redis_client, clock, moderate=True)
    assert queue.pop() is None and queue.last_wait_s is None
    queue.push("late", 0)
    assert queue.pop() == "late"


def test_clear_removes_items_and_throttle_state(redis_client: redis.Redis) -> None:
    queue = throttled(redis_client, ManualClock())
    queue.push("a", 0)
    queue.pop()
    queue.push("b", 0)
    queue.clear()
    assert len(queue) == 0
    assert not redis_client.exists("tq:throttle_window", "tq:throttle_time")
