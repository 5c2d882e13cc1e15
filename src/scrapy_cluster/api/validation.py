"""Matching an API request to the first plugin whose JSON Schema accepts it.

Schemas are compiled once (fastjsonschema) when a process starts (the Kafka Monitor, the
Rest service, ``feed``, ``migrate``). Matching costs no I/O. A request that matches no schema is explained by the schema it
came closest to: the one with most of its required properties present, then
most of its known properties present, then the lowest rank.

A plugin may add a check of its own for what a JSON Schema cannot say (``Check``, e.g. the
crawl request's ``recrawl.adaptive.min`` not above ``max``): it runs on a request its schema
accepted, and a reason it returns refuses the request as a schema failure would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastjsonschema

from scrapy_cluster.errors import PluginError

Validate = Callable[[Any], Any]
Check = Callable[[dict[str, Any]], str | None]
"""A plugin's own check of a request its schema accepted: the reason to refuse it, or None."""


@dataclass(frozen=True)
class Accepted:
    """A request some plugin accepts; ``message`` is a copy with the schema's defaults filled in."""

    plugin: str
    message: dict[str, Any]


@dataclass(frozen=True)
class Rejected:
    """A request no plugin accepts; ``reason`` names the offending field when there is one."""

    reason: str
    closest: str | None = None


@dataclass(frozen=True)
class CompiledSchema:
    """One plugin's schema, compiled, with what closeness scoring needs."""

    plugin: str
    definition: dict[str, Any]
    validate: Validate
    required: frozenset[str]
    properties: frozenset[str]
    check: Check | None = None

    @classmethod
    def compile(cls, plugin: str, definition: dict[str, Any],
                check: Check | None = None) -> CompiledSchema:
        try:
            validate = fastjsonschema.compile(definition, use_default=True)
        except fastjsonschema.JsonSchemaDefinitionException as exc:
            raise PluginError(f"schema of {plugin} does not compile: {exc}") from exc
        return cls(plugin, definition, validate,
                   frozenset(definition.get("required", ())),
                   frozenset(definition.get("properties", {})), check)

    def closeness(self, message: Mapping[str, Any]) -> tuple[int, int]:
        present = message.keys()
        return len(self.required & present), len(self.properties & present)

    def explain(self, error: fastjsonschema.JsonSchemaValueException) -> str:
        """A reason that names the field: ``priority must be smaller than or equal to 100``."""
        field = ".".join(str(part) for part in error.path[1:])
        text = error.message
        if error.rule == "anyOf" and _only_required(error.rule_definition):
            names = [name for branch in error.rule_definition for name in branch["required"]]
            return f"{field or 'request'} must have {' or '.join(names)}"
        if error.rule == "pattern" and field:
            described = _description(error.definition)
            if described:
                name = error.name or ""
                where = name[len("data."):] if name.startswith("data.") else field
                return f"{where} must be {described}"
        if text.startswith("data."):
            return text[len("data."):]
        if text.startswith("data "):
            return "request " + text[len("data "):]
        return text


class RequestValidator:
    """Validates requests against plugin schemas in rank order."""

    def __init__(self, schemas: Sequence[CompiledSchema]) -> None:
        if not schemas:
            raise PluginError("no Kafka Monitor plugin is enabled; check the PLUGINS setting")
        self.schemas = list(schemas)

    @classmethod
    def from_definitions(cls, definitions: Sequence[tuple[str, dict[str, Any]]],
                         checks: Mapping[str, Check] | None = None) -> RequestValidator:
        """``definitions``: ``(plugin name, schema)`` pairs, lowest rank first; ``checks``:
        the plugins' own checks by plugin name (see module docstring)."""
        checks = checks or {}
        return cls([CompiledSchema.compile(name, schema, checks.get(name))
                    for name, schema in definitions])

    @property
    def plugin_names(self) -> list[str]:
        return [schema.plugin for schema in self.schemas]

    def match(self, message: Any) -> Accepted | Rejected:
        """The first plugin accepting ``message`` (never modified), or why none does."""
        if not isinstance(message, dict):
            return Rejected(f"request must be a JSON object, not {_json_type(message)}")
        errors: list[fastjsonschema.JsonSchemaValueException] = []
        for schema in self.schemas:
            try:
                accepted = schema.validate(_copy(message))
            except fastjsonschema.JsonSchemaValueException as exc:
                errors.append(exc)
                continue
            reason = schema.check(accepted) if schema.check is not None else None
            if reason:
                return Rejected(f"{schema.plugin}: {reason}", schema.plugin)
            return Accepted(schema.plugin, accepted)
        return self._closest_rejection(message, errors)

    def _closest_rejection(self, message: Mapping[str, Any],
                           errors: Sequence[fastjsonschema.JsonSchemaValueException]) -> Rejected:
        ranked = sorted(range(len(self.schemas)),
                        key=lambda i: (self.schemas[i].closeness(message), -i), reverse=True)
        best = ranked[0]
        schema = self.schemas[best]
        return Rejected(f"{schema.plugin}: {schema.explain(errors[best])}", schema.plugin)


def _copy(message: Mapping[str, Any]) -> dict[str, Any]:
    """A copy the schema may fill defaults into: nested objects (``recrawl``) are copied too."""
    return {key: _copy(value) if isinstance(value, dict) else value
            for key, value in message.items()}


def _description(definition: Any) -> str | None:
    """The ``description`` of the schema a failed pattern belongs to (``url``, an item of
    ``sitemaps``)."""
    described = definition.get("description") if isinstance(definition, dict) else None
    return described if isinstance(described, str) else None


def _only_required(branches: Any) -> bool:
    """Whether an ``anyOf`` only lists alternative required properties."""
    return isinstance(branches, list) and bool(branches) and all(
        isinstance(branch, dict) and set(branch) == {"required"} for branch in branches)


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
