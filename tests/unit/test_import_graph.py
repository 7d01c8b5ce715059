"""The SDK's import graph has no circle, ``TYPE_CHECKING`` imports included: calls go one way (the
engine composes the parts, the parts talk to ports, the ports to the store; nothing calls back up)."""

from __future__ import annotations

from pathlib import Path

import duro
from tests.support import import_graph

PACKAGE = Path(duro.__file__).parent
MODULES = import_graph.modules(PACKAGE)


def _graph() -> dict[str, set[str]]:
    return import_graph.graph(PACKAGE)


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
