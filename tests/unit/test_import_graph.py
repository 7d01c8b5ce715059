"""The SDK's import graph has no circle, ``TYPE_CHECKING`` imports included: calls go one way (the
engine composes the parts, the parts talk to ports, the ports to the store; nothing calls back up)."""

from __future__ import annotations

import ast
from pathlib import Path

import duro

PACKAGE = Path(duro.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["duro", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every duro module ``path`` imports, at any level (function bodies and TYPE_CHECKING too)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("duro"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("duro"):
                continue
            found.add(target)
            for alias in node.names:  # `from . import _current` imports a module
                if f"{target}.{alias.name}" in MODULES:
                    found.add(f"{target}.{alias.name}")
    return {module for module in found if module in MODULES and module != name}


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _graph() -> dict[str, set[str]]:
    graph = {name: _imports(path) for name, path in MODULES.items()}
    # a package's __init__ re-exports its modules: importing a module of it runs the __init__ first,
    # which is not a call of the importer's making; leave those edges out of the cycle search
    return {
        name: {dep for dep in deps if not (name.startswith(dep + ".") and MODULES[dep].name == "__init__.py")}
        for name, deps in graph.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_sdk_imports_in_one_direction():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()) or [])


def test_no_part_imports_the_engine():
    importers = sorted(name for name, deps in _graph().items() if "duro.client._engine" in deps)
    assert importers == ["duro", "duro.tooling"], importers  # only the public faces (tooling: start_info)


def test_no_module_is_longer_than_about_1000_lines():
    """One concept per module, read top to bottom (starlette's largest is ~900 lines): a guide of
    about 1,000 lines, not a wall that splits a concept across files."""
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > 1000}
    assert long == {}, long
