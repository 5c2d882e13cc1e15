"""The body of ``POST /poll``: its JSON Schema (``api/schemas/poll_schema.json``), compiled once
(fastjsonschema, as the ``/feed`` schemas are), and the reason a refused body is given.
Checking a body costs no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fastjsonschema
import orjson

from scrapy_cluster.api import SCHEMA_DIR

POLL_SCHEMA_FILE = SCHEMA_DIR / "poll_schema.json"


class PollSchema:
    """``definition`` compiled; ``problem`` checks a body. The definition is also ``/poll``'s
    request body in the OpenAPI document."""

    def __init__(self, definition: dict[str, Any]) -> None:
        self.definition = definition
        self._validate = fastjsonschema.compile(definition)

    @classmethod
    def load(cls, path: Path = POLL_SCHEMA_FILE) -> PollSchema:
        return cls(orjson.loads(path.read_bytes()))

    def problem(self, message: Mapping[str, Any]) -> str | None:
        """Why ``message`` (a JSON object) is not a poll request, or None when it is one."""
        try:
            self._validate(message)
        except fastjsonschema.JsonSchemaValueException as exc:
            return self.explain(message, exc)
        return None

    def explain(self, message: Mapping[str, Any],
                error: fastjsonschema.JsonSchemaValueException) -> str:
        """The reason of a refusal. An unknown field is named first, whatever else is wrong:
        such a body is most likely not meant for ``/poll`` at all."""
        extra = sorted(set(message) - set(self.definition.get("properties", {})))
        if extra and self.definition.get("additionalProperties") is False:
            return f"Additional properties are not allowed ({', '.join(map(repr, extra))} " \
                   f"{'was' if len(extra) == 1 else 'were'} unexpected)"
        if error.rule == "required":
            missing = [name for name in self.definition["required"] if name not in message]
            return f"{missing[0]!r} is a required property"
        field = ".".join(str(part) for part in error.path[1:])
        rule = error.definition
        if error.rule == "type":
            return f"{field} must be a {rule['type']}"
        if error.rule in ("minLength", "maxLength"):
            return f"{field} must be {rule['minLength']} to {rule['maxLength']} characters long"
        return error.message.removeprefix("data.")
