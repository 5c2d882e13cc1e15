"""The ``recrawl`` object of a crawl request: the checks JSON Schema cannot say, and the whole
validation for a ``recrawl`` that does not arrive in a request (the operators' per-domain
default in the domain configuration document).

The object's types, bounds and defaults live in ``schemas/scraper_schema.json`` (property
``recrawl``); ``problem`` adds what a schema cannot express: ``adaptive.min`` not above
``adaptive.max``, and ``until`` not in the past. See docs/api.md, "Re-crawls".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import fastjsonschema
import orjson

from scrapy_cluster.api import SCHEMA_DIR

FIELD = "recrawl"
"""The crawl request's field (``rc`` in queue items)."""


def problem(recrawl: Mapping[str, Any], *, now: float | None = None,
            field: str = FIELD) -> str | None:
    """What is wrong with a schema-valid ``recrawl`` object, or None. ``now``: epoch seconds
    (default the wall clock); ``until`` must be later. No I/O."""
    adaptive = recrawl.get("adaptive")
    if isinstance(adaptive, Mapping) and adaptive.get("min", 0) > adaptive.get("max", 0):
        return f"{field}.adaptive.min must not exceed max"
    until = recrawl.get("until")
    if until is not None and until <= (time.time() if now is None else now):
        return f"{field}.until is in the past"
    return None


def shape_problem(recrawl: Mapping[str, Any], *, field: str = FIELD) -> str | None:
    """``problem`` without the clock: what stays wrong whenever it is read (a stored
    document must stay readable after its ``until`` passed)."""
    return problem({key: value for key, value in recrawl.items() if key != "until"},
                   field=field)


def validated(value: Any, *, field: str = FIELD) -> dict[str, Any]:
    """``value`` checked against the schema's ``recrawl`` and ``shape_problem``, with the
    defaults filled in (a new dict). Raises ``ValueError`` naming the field:
    ``recrawl.interval must be bigger than or equal to 1``."""
    try:
        filled: dict[str, Any] = _compiled()(_copy(value))
    except fastjsonschema.JsonSchemaValueException as exc:
        raise ValueError(_reason(exc, field)) from exc
    reason = shape_problem(filled, field=field)
    if reason:
        raise ValueError(reason)
    return filled


def _copy(value: Any) -> Any:
    """A deep copy of plain data (the schema fills defaults in place)."""
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _reason(error: fastjsonschema.JsonSchemaValueException, field: str) -> str:
    text = error.message
    if error.rule == "anyOf":
        return f"{field} must have interval or adaptive"
    if text.startswith("data."):
        return f"{field}.{text[len('data.'):]}"
    if text.startswith("data "):
        return f"{field} {text[len('data '):]}"
    return f"{field}: {text}"


@lru_cache(maxsize=1)
def _compiled() -> Callable[[Any], Any]:
    schema = orjson.loads((SCHEMA_DIR / "scraper_schema.json").read_bytes())
    definition = dict(schema["properties"][FIELD])
    definition["$schema"] = schema["$schema"]
    validate: Callable[[Any], Any] = fastjsonschema.compile(definition, use_default=True)
    return validate
