"""``POST /poll``'s body checked by its compiled JSON Schema (``poll_schema.json``): what is
accepted, what is refused and the reason given (the reasons of the checks it replaced)."""

from __future__ import annotations

from typing import Any

import pytest

from scrapy_cluster.rest.poll_schema import PollSchema

EXTRA_MORE = "Additional properties are not allowed ('more' was unexpected)"
REQUIRED = "'poll_id' is a required property"
NOT_A_STRING = "poll_id must be a string"
LENGTH = "poll_id must be 1 to 100 characters long"


@pytest.fixture(scope="module")
def schema() -> PollSchema:
    return PollSchema.load()


@pytest.mark.parametrize("body", [
    {"poll_id": "x"}, {"poll_id": "p" * 100}, {"poll_id": "é" * 100},
    {"poll_id": "\U0001f600" * 100}, {"poll_id": " "}])
def test_a_poll_id_of_1_to_100_characters_is_accepted(schema: PollSchema,
                                                      body: dict[str, Any]) -> None:
    assert schema.problem(body) is None


@pytest.mark.parametrize(("body", "reason"), [
    ({}, REQUIRED),
    ({"poll_id": ""}, LENGTH),
    ({"poll_id": "p" * 101}, LENGTH),
    ({"poll_id": "\U0001f600" * 101}, LENGTH),
    ({"poll_id": 7}, NOT_A_STRING),
    ({"poll_id": 1.5}, NOT_A_STRING),
    ({"poll_id": True}, NOT_A_STRING),
    ({"poll_id": ["a"]}, NOT_A_STRING),
    ({"poll_id": {}}, NOT_A_STRING),
    ({"poll_id": None}, NOT_A_STRING),
    ({"poll_id": "x", "more": 1}, EXTRA_MORE),
    ({"more": 1}, EXTRA_MORE),
    ({"poll_id": 7, "more": 1}, EXTRA_MORE),
    ({"pollid": "x"}, "Additional properties are not allowed ('pollid' was unexpected)"),
    ({"poll_id": "ok", "extra": 1, "b": 2},
     "Additional properties are not allowed ('b', 'extra' were unexpected)"),
])
def test_a_refused_body_gets_the_reason(schema: PollSchema, body: dict[str, Any],
                                        reason: str) -> None:
    assert schema.problem(body) == reason


def test_the_schema_asks_for_exactly_a_poll_id_of_1_to_100_characters(
        schema: PollSchema) -> None:
    definition = schema.definition
    assert (definition["type"], definition["required"], definition["additionalProperties"]) == (
        "object", ["poll_id"], False)
    assert definition["properties"] == {"poll_id": {
        "type": "string", "minLength": 1, "maxLength": 100,
        "description": "The poll id to retrieve"}}
