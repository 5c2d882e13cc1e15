"""Redis key names are spelled in ``keys.py`` and nowhere else in the package.

The namespaces ``keys.py`` owns (``stats:``, ``frontier:``, ``bus:``, ...) are read from its own
string constants: the text before the first ``:`` of each key it builds. Every other module of
``src/scrapy_cluster`` is read with ``ast`` (string constants only: docstrings, comments and
prose never count) and a constant that starts with one of those namespaces and contains no
whitespace is a key literal out of place. Whitespace tells a key from a message (``"info: %s"``
is log text, not a key).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "scrapy_cluster"
KEYS_MODULE = "keys.py"
NAMESPACE = re.compile(r"^([a-z][a-z-]*):")


def _string_constants(tree: ast.AST) -> Iterator[ast.Constant]:
    """String constants that begin a value: standalone ones and the first piece of an f-string,
    docstrings left out."""
    docstrings: set[int] = set()
    inner: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            docstrings.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            inner.update(id(piece) for piece in node.values[1:])
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings and id(node) not in inner:
            yield node


def key_namespaces(package: Path = PACKAGE) -> set[str]:
    """``{"stats:", "frontier:", ...}``: the first part of every key name ``keys.py`` spells."""
    tree = ast.parse((package / KEYS_MODULE).read_text(encoding="utf-8"))
    found = set()
    for node in _string_constants(tree):
        match = NAMESPACE.match(node.value)
        if match and not any(char.isspace() for char in node.value):
            found.add(match.group(0))
    return found


def key_literals_outside_keys(package: Path = PACKAGE) -> list[str]:
    """``file:line: 'literal'`` for each key literal outside ``keys.py``."""
    namespaces = tuple(sorted(key_namespaces(package)))
    found = []
    for path in sorted(package.rglob("*.py")):
        if path == package / KEYS_MODULE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _string_constants(tree):
            text = node.value
            if text.startswith(namespaces) and not any(char.isspace() for char in text):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {text!r}")
    return found


def test_keys_module_owns_the_key_namespaces() -> None:
    assert {"stats:", "frontier:", "bus:", "domain-config:", "redis-monitor:", "timeout:",
            "crawler:", "circuit-breaker:", "migrate:"} <= key_namespaces()


def test_no_redis_key_literal_outside_keys_module() -> None:
    found = key_literals_outside_keys()
    assert not found, "Redis key literals outside keys.py (build them in keys.py):\n" + \
        "\n".join(found)
