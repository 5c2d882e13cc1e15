"""The layout of the tests: no module imports a test module.

A helper that more than one test file uses lives in ``tests/support/`` (docs/development.md,
"Layout of the tests"); a test module that imports another one runs the other's module code
(its fixtures, its ``pytestmark``) and ties the two files together. The check reads every
``tests/**/*.py`` with ``ast``, so imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def is_test_module(dotted: str) -> bool:
    """``tests.test_x``, ``tests.contract.test_x``, ``tests.reliability.test_x``, ...: a module
    under ``tests`` whose own name, or a package on its path, starts with ``test_``."""
    parts = dotted.split(".")
    return parts[0] == "tests" and any(part.startswith("test_") for part in parts[1:])


def imported_modules(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules an import statement loads: for ``from M import n``, ``M``, or when ``M`` is
    a package, ``M.n`` too (``n`` may be a submodule); relative imports resolved against
    ``package``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
    if is_test_module(base):
        return [base]
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def imports_of_test_modules(source: str, relative: str) -> list[str]:
    """``<relative>:<line> imports <module>`` for each import of a test module in ``source``."""
    package = ".".join(["tests", *Path(relative).parent.parts])
    return [f"{relative}:{node.lineno} imports {module}"
            for node in ast.walk(ast.parse(source, relative))
            if isinstance(node, ast.Import | ast.ImportFrom)
            for module in imported_modules(node, package) if is_test_module(module)]


def test_no_test_module_imports_another_test_module() -> None:
    found = [finding for path in sorted(TESTS.rglob("*.py"))
             for finding in imports_of_test_modules(path.read_text(),
                                                    path.relative_to(TESTS).as_posix())]
    assert found == []


@pytest.mark.parametrize(("source", "expected"), [
    ("from tests.test_rest_fuzz import crawl_requests", "tests.test_rest_fuzz"),
    ("import tests.reliability.test_faults", "tests.reliability.test_faults"),
    ("from tests.contract import test_crawl_contract", "tests.contract.test_crawl_contract"),
    ("from .test_crawl_contract import GRAPH_HOSTS", "tests.contract.test_crawl_contract"),
    ("from . import test_wire_gaps", "tests.contract.test_wire_gaps"),
    ("def f():\n    from tests.test_frontier_throttle import many", "tests.test_frontier_throttle"),
])
def test_the_check_finds_each_form_of_import(source: str, expected: str) -> None:
    line = source.count("\n") + 1
    assert imports_of_test_modules(source, "contract/test_x.py") == \
        [f"contract/test_x.py:{line} imports {expected}"]


@pytest.mark.parametrize("source", [
    "from tests.support.frontier import many",
    "import tests.support.cluster",
    "from tests.support import addresses",
    "from . import conftest",
    "from scrapy_cluster.crawler import test_spider",
])
def test_the_check_lets_other_imports_pass(source: str) -> None:
    assert imports_of_test_modules(source, "contract/test_x.py") == []
