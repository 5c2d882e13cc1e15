"""What the endpoints declare in the OpenAPI document (``/openapi.json``, shown by ``/docs``):
the answer wrapper's and the index's schemas, and the request bodies of ``/feed`` and
``/poll`` (the schemas that validate them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scrapy_cluster.rest.wire import FAILURE, JSON_TYPE, SUCCESS

WRAPPER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": [SUCCESS, FAILURE]},
        "data": {},
        "error": {"anyOf": [{"type": "null"}, {
            "type": "object", "properties": {"message": {"type": "string"},
                                             "cause": {"type": "string"}},
            "required": ["message"]}]},
        "warnings": {"type": "array", "items": {"type": "string"},
                     "description": "Only when there is something to warn about, e.g. a crawl "
                                    "for a spider no live crawler runs (it is still queued)"},
    },
    "required": ["status", "data", "error"],
}
INDEX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"kafka_connected": {"type": "boolean"}, "redis_connected": {"type": "boolean"},
                   "my_id": {"type": "string"},
                   "node_health": {"type": "string", "enum": ["GREEN", "YELLOW", "RED"]},
                   "uptime_sec": {"type": "integer"}},
    "required": ["kafka_connected", "redis_connected", "my_id", "node_health", "uptime_sec"],
}
INDEX_RESPONSES: dict[int | str, dict[str, Any]] = {200: {
    "description": "Health of this Rest instance",
    "content": {JSON_TYPE: {"schema": INDEX_SCHEMA}}}}
WRAPPER_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {JSON_TYPE: {"schema": WRAPPER_SCHEMA}}}
    for code, text in ((200, "SUCCESS, with the answer or a poll id in data"),
                       (400, "Invalid JSON or schema failure (error.cause says why)"),
                       (401, "API key missing or wrong (when REST_API_KEYS is set)"),
                       (404, "Not found"), (413, "Payload too large"),
                       (503, "Redis or the bus is unreachable"))}
METRICS_RESPONSES: dict[int | str, dict[str, Any]] = {200: {
    "description": "Prometheus text exposition", "content": {"text/plain": {}}}}


def feed_body(schemas: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """``/feed``'s request body: the plugins' schemas (``(plugin, schema)``), one of them."""
    definitions = [definition for _, definition in schemas]
    return {"requestBody": {"required": True, "content": {JSON_TYPE: {"schema": {
        "oneOf": definitions} if len(definitions) > 1 else definitions[0]}}}}


def poll_body(definition: dict[str, Any]) -> dict[str, Any]:
    """``/poll``'s request body: ``definition``, the poll schema (``poll_schema``)."""
    return {"requestBody": {"required": True, "content": {JSON_TYPE: {"schema": definition}}}}
