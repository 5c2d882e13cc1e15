"""The layering of ``src/scrapy_cluster`` (docs/architecture.md, "Layers").

Three checks, all read from the code's imports (function-level ones included):

- the import-linter contracts in ``.importlinter`` hold (``make lint`` runs them too);
- every room of the package is named in the layers contract, and every module directly in
  ``crawler/`` in the fast engine's contract, so a new room cannot slip in unchecked;
- no module takes part in an import cycle.
"""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "scrapy_cluster"
CONTRACTS = ROOT / ".importlinter"


def _layer_names() -> set[str]:
    config = configparser.ConfigParser()
    config.read(CONTRACTS)
    names: set[str] = set()
    for line in config["importlinter:contract:layers"]["layers"].split("\n"):
        for part in line.replace("|", " ").replace(":", " ").split():
            names.add(part.removeprefix("scrapy_cluster."))
    return names


def _fast_engine_forbidden() -> set[str]:
    config = configparser.ConfigParser()
    config.read(CONTRACTS)
    lines = config["importlinter:contract:fast-engine"]["forbidden_modules"].split()
    return {line.removeprefix("scrapy_cluster.crawler.") for line in lines}


def _rooms() -> set[str]:
    rooms = {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    rooms |= {path.name for path in PACKAGE.iterdir()
              if path.is_dir() and (path / "__init__.py").exists()}
    return rooms


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache", "--no-logo", str(CONTRACTS)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_every_room_is_layered() -> None:
    missing = sorted(_rooms() - _layer_names())
    assert missing == [], f"add these to the layers contract in .importlinter: {missing}"


def test_every_scrapy_adapter_is_kept_from_the_fast_engine() -> None:
    crawler = PACKAGE / "crawler"
    shared = {"__init__", "common", "fast", "settings"}
    modules = {path.stem for path in crawler.glob("*.py")}
    modules |= {path.name for path in crawler.iterdir() if (path / "__init__.py").exists()}
    missing = sorted(modules - shared - _fast_engine_forbidden())
    assert missing == [], f"add these to the fast-engine contract in .importlinter: {missing}"


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("scrapy_cluster", exclude_type_checking_imports=True,
                              cache_dir=None)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]
