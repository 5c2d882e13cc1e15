"""No constructor in the package takes more than six values besides ``self``: a wider one
takes a frozen policy dataclass (values read from settings, as ``FrontierPolicy``) or a parts
dataclass (collaborators, as ``PageParts``) instead. Exceptions are listed with their reason."""

from __future__ import annotations

import ast
from pathlib import Path

import scrapy_cluster

MAX_PARAMETERS = 6
"""Parameters of ``__init__`` besides ``self``; ``*args`` and ``**kwargs`` count one each."""

ALLOWED = {
    "ZookeeperWatcher": (9, "keeps the original system's public signature (hosts, filepath, "
                            "handlers, pointer, ensure, valid_init), documented in "
                            "docs/utilities.md"),
}
"""Class name -> (its parameter count, why it stays wider)."""

PACKAGE = Path(scrapy_cluster.__file__).parent


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    arguments = function.args
    named = len(arguments.posonlyargs) + len(arguments.args) + len(arguments.kwonlyargs)
    return named - 1 + (arguments.vararg is not None) + (arguments.kwarg is not None)


def constructor_widths() -> dict[str, int]:
    """``<module path>:<class>`` -> parameters of its ``__init__``, for every class of the
    package that defines one."""
    widths: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) \
                        and member.name == "__init__":
                    name = f"{path.relative_to(PACKAGE.parent).as_posix()}:{node.name}"
                    widths[name] = parameter_count(member)
    return widths


def test_no_constructor_takes_more_than_six_parameters() -> None:
    too_wide = {name: count for name, count in constructor_widths().items()
                if count > MAX_PARAMETERS and ALLOWED.get(name.rsplit(":", 1)[1],
                                                          (None, ""))[0] != count}
    named = ", ".join(f"{name} has {count}" for name, count in sorted(too_wide.items()))
    assert not too_wide, (f"constructors over {MAX_PARAMETERS} parameters besides self "
                          f"(take a policy or parts dataclass instead): {named}")


def test_every_allowed_constructor_still_exists_with_its_width() -> None:
    widths = {name.rsplit(":", 1)[1]: count for name, count in constructor_widths().items()}
    assert {name: widths.get(name) for name in ALLOWED} == {
        name: count for name, (count, _reason) in ALLOWED.items()}


def test_the_count_is_of_parameters_besides_self() -> None:
    source = "class A:\n    def __init__(self, a, b=1, *rest, c, d=2, **more): pass\n"
    init = ast.parse(source).body[0].body[0]  # type: ignore[attr-defined]
    assert parameter_count(init) == 6
