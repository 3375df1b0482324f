"""The import graph of ``hp_core`` and ``hp_plugins`` points one way.

Every ``import`` statement of every module is read (function-local ones
included, ``TYPE_CHECKING`` blocks excluded: they never run) and resolved to
the modules of the two packages it names. The graph must have no cycle, no
``hp_core`` module may import ``hp_plugins`` (the core reaches plugins only
through the registry; the manager names the built-ins as strings), below
the façade nothing imports ``hp_core.api``: only the command line and the
testing kit stand above it, and the engine (``hp_core.engine``) imports
neither the input/output modules (``hp_core.io``), the command line nor the
façade.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hp_core", "hp_plugins")
# What may import the façade: the command line and the testing kit stand above it, and the
# package itself re-exports its public names (imported on first use, not at import).
ABOVE_THE_FACADE = ("hp_core.cli", "hp_core.testing")
PACKAGE = "hp_core"


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules *name* imports (a ``from X import y`` names ``X.y`` when that is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node)
               for child in node.body for n in ast.walk(child)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # ``from pkg import sub`` imports the module ``pkg.sub``; ``from mod import name`` the module ``mod``.
            for alias in node.names:
                targets.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module)
    resolved = set()
    for target in targets:
        # The longest prefix that is a module of the packages.
        parts = target.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts:
            resolved.add(".".join(parts))
    resolved.discard(name)
    return resolved


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
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
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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


def test_the_graph_is_read():
    graph = _graph()
    # A known edge each way the reader must see: a top-level import and a function-local one.
    assert "hp_core.engine.prepare" in graph["hp_core.api"]
    assert "hp_core.models" in graph["hp_plugins.models.hf"]


def test_there_is_no_import_cycle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_core_imports_no_plugin():
    offenders = {name: sorted(t for t in targets if t.startswith("hp_plugins"))
                 for name, targets in _graph().items() if name.startswith("hp_core")}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_engine_imports_no_io_cli_or_facade():
    # The engine computes on specs; reading configs and writing output (hp_core.io), the command
    # line (hp_core.cli) and the façade (hp_core.api) all stand above it.
    above = ("hp_core.io", "hp_core.cli", "hp_core.api")
    graph = _graph()
    engine = sorted(name for name in graph if name == "hp_core.engine" or name.startswith("hp_core.engine."))
    assert "hp_core.engine.estimate" in engine and "hp_core.engine.search" in engine
    offenders = {name: sorted(t for t in graph[name] if any(t == a or t.startswith(f"{a}.") for a in above))
                 for name in engine}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_nothing_below_the_facade_imports_it():
    importers = sorted(name for name, targets in _graph().items()
                       if "hp_core.api" in targets and not name.startswith(ABOVE_THE_FACADE) and name != PACKAGE)
    assert importers == []


def test_nothing_below_the_facade_imports_the_package_itself():
    # The package re-exports the façade: a module below it importing ``hp_core`` (``from hp_core
    # import x``) would reach the façade through it.
    importers = sorted(name for name, targets in _graph().items()
                       if PACKAGE in targets and not name.startswith(ABOVE_THE_FACADE) and name != PACKAGE)
    assert importers == []


def test_no_module_is_above_500_lines():
    # One responsibility a file: a module past 500 lines holds several rooms (split it by responsibility).
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}
