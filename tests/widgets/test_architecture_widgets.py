"""The package has no import circles: every import counts, including those under
``TYPE_CHECKING`` and inside functions (a lazy import hides a circle, it does not remove it).

The graph is read from the source (AST), not from ``sys.modules``: nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import napari_gpuscope

PACKAGE = "napari_gpuscope"
ROOT = Path(napari_gpuscope.__file__).parent


def _modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (every import statement in its file).

    ``from a import b`` counts as importing ``a.b`` when that is a module, else ``a``. A
    package's ``__init__`` is not counted as imported by its own submodules' relative
    imports unless they name it.
    """
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")
                    base = base if is_package else base[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [f"{module}.{alias.name}" for alias in node.names] or [module]
            for target in targets:
                if not target.startswith(PACKAGE):
                    continue
                resolved = _resolve(target, modules)
                assert resolved is not None, f"{name}: cannot resolve import of {target}"
                if resolved != name:
                    graph[name].add(resolved)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    # a TYPE_CHECKING import and a lazy (function-level) import are edges too
    assert "napari_gpuscope.compute.results" in graph["napari_gpuscope.widgets.tv.dock"]
    widgets = [targets for name, targets in graph.items() if name.startswith(f"{PACKAGE}.widgets")]
    assert "napari_gpuscope.export.commands" in set().union(*widgets)


def test_no_import_circles_in_the_package():
    found = cycles(import_graph())
    assert found == [], "import circles (TYPE_CHECKING and lazy imports included):\n" + "\n".join(
        " <-> ".join(component) for component in found
    )
