"""Redis queue utilities: ordering, blocking pops, JSON round trip, pluggable encoding, no pickle."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from scrapy_cluster.errors import EncodingError
from scrapy_cluster.queues import JsonEncoding, RedisPriorityQueue, RedisQueue, RedisStack

pytestmark = pytest.mark.integration


class UpperTextEncoding:
    """A caller-supplied encoding: stores text upper-cased."""

    def dumps(self, item: Any) -> str:
        return str(item).upper()

    def loads(self, data: bytes) -> Any:
        return data.decode()


def test_queue_pops_in_push_order(redis_client: redis.Redis) -> None:
    queue = RedisQueue(redis_client, "q")
    for item in ("a", "b", "c"):
        queue.push(item)
    assert [queue.pop() for _ in range(3)] == ["a", "b", "c"]


def test_stack_pops_last_pushed_first(redis_client: redis.Redis) -> None:
    stack = RedisStack(redis_client, "s")
    for item in ("a", "b", "c"):
        stack.push(item)
    assert [stack.pop() for _ in range(3)] == ["c", "b", "a"]


def test_priority_queue_pops_highest_priority_first(redis_client: redis.Redis) -> None:
    queue = RedisPriorityQueue(redis_client, "pq")
    queue.push("low", priority=1)
    queue.push("high", priority=10)
    queue.push("negative", priority=-5)
    assert [queue.pop() for _ in range(3)] == ["high", "low", "negative"]


def test_priority_queue_is_first_in_first_out_among_equal_priorities(redis_client: redis.Redis) -> None:
    queue = RedisPriorityQueue(redis_client, "pq")
    for index in range(50):
        queue.push({"n": index}, priority=3)
    assert [queue.pop()["n"] for _ in range(50)] == list(range(50))


def test_priority_queue_keeps_identical_items_pushed_twice(redis_client: redis.Redis) -> None:
    queue = RedisPriorityQueue(redis_client, "pq")
    queue.push("same", priority=1)
    queue.push("same", priority=1)
    assert len(queue) == 2


def test_priority_queue_rejects_a_non_integer_priority(redis_client: redis.Redis) -> None:
    queue = RedisPriorityQueue(redis_client, "pq")
    with pytest.raises(TypeError, match="priority must be an int"):
        queue.push("x", priority=1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("pop", [{}, {"timeout_s": 0.01}], ids=["pop", "blocking-pop"])
@pytest.mark.parametrize("queue_class", [RedisQueue, RedisStack, RedisPriorityQueue])
def test_pop_of_an_empty_container_returns_none(redis_client: redis.Redis, queue_class: type,
                                                pop: dict[str, float]) -> None:
    assert queue_class(redis_client, "empty").pop(**pop) is None


@pytest.mark.parametrize("queue_class", [RedisQueue, RedisStack, RedisPriorityQueue])
def test_blocking_pop_returns_an_item_already_there(redis_client: redis.Redis, queue_class: type) -> None:
    queue = queue_class(redis_client, "k")
    queue.push("ready")
    assert queue.pop(timeout_s=0.1) == "ready"


@pytest.mark.parametrize(("queue_class", "expected"), [
    (RedisQueue, "first"), (RedisStack, "second"), (RedisPriorityQueue, "first")])
def test_peek_returns_the_next_item_without_removing_it(
        redis_client: redis.Redis, queue_class: type, expected: str) -> None:
    queue = queue_class(redis_client, "k")
    queue.push("first")
    queue.push("second")
    assert (queue.peek(), len(queue)) == (expected, 2)


@pytest.mark.parametrize("queue_class", [RedisQueue, RedisStack, RedisPriorityQueue])
def test_len_counts_items_and_clear_removes_them(redis_client: redis.Redis, queue_class: type) -> None:
    queue = queue_class(redis_client, "k")
    for item in range(4):
        queue.push(item)
    before = len(queue)
    queue.clear()
    assert (before, len(queue), redis_client.exists("k")) == (4, 0, 0)


@pytest.mark.parametrize("queue_class", [RedisQueue, RedisStack, RedisPriorityQueue])
def test_json_values_round_trip(redis_client: redis.Redis, queue_class: type) -> None:
    item = {"url": "http://example.com/ü", "meta": {"depth": 2, "tags": ["a", None, True]}, "score": 1.5}
    queue = queue_class(redis_client, "k")
    queue.push(item)
    assert queue.pop() == item


def test_default_encoding_stores_json_not_pickle(redis_client: redis.Redis) -> None:
    queue = RedisQueue(redis_client, "q")
    queue.push({"a": [1, 2]})
    assert redis_client.lindex("q", 0) == b'{"a":[1,2]}'


def test_pushing_an_unencodable_item_raises_encoding_error_and_stores_nothing(
        redis_client: redis.Redis) -> None:
    queue = RedisQueue(redis_client, "q")
    with pytest.raises(EncodingError, match="cannot encode item for 'q'"):
        queue.push({"not-json": object()})
    assert len(queue) == 0


def test_popping_an_undecodable_item_raises_with_the_raw_bytes(redis_client: redis.Redis) -> None:
    redis_client.lpush("q", b"\x80\x04not json")
    with pytest.raises(EncodingError, match="cannot decode item from 'q'") as caught:
        RedisQueue(redis_client, "q").pop()
    assert caught.value.raw == b"\x80\x04not json"


def test_a_custom_encoding_is_used_for_both_directions(redis_client: redis.Redis) -> None:
    stack = RedisStack(redis_client, "s", encoding=UpperTextEncoding())
    stack.push("hello")
    stored = redis_client.lindex("s", 0)
    assert (stored, stack.pop()) == (b"HELLO", "HELLO")


def test_priority_queue_decodes_through_a_custom_encoding(redis_client: redis.Redis) -> None:
    queue = RedisPriorityQueue(redis_client, "pq", encoding=UpperTextEncoding())
    queue.push("hello", priority=2)
    assert queue.pop() == "HELLO"


def test_json_encoding_rejects_bytes_values() -> None:
    with pytest.raises(TypeError):
        JsonEncoding().dumps(b"raw")


def test_queues_module_never_imports_pickle() -> None:
    import scrapy_cluster.queues as queues_module

    with open(queues_module.__file__, encoding="utf-8") as module_file:
        source = module_file.read()
    assert "import pickle" not in source and "pickle." not in source
