"""The import graph of a package's tree, read from its code (``TYPE_CHECKING`` and function-level
imports included): what ``tests/unit/test_import_graph.py`` checks and ``bench/layout.py`` measures."""

from __future__ import annotations

import ast
from pathlib import Path


def module_name(package: Path, path: Path) -> str:
    """``duro.store._slots`` for ``package/store/_slots.py``; a package's ``__init__`` is the package."""
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path) -> dict[str, Path]:
    return {module_name(package, path): path for path in package.rglob("*.py")}


def imports(package: Path, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of ``known`` that ``path`` imports, at any level."""
    name = module_name(package, path)
    own = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = own.split(".")
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # `from . import _x`
    return {module for module in found if module in known and module != name}


def graph(package: Path) -> dict[str, set[str]]:
    """Each module's imports. A package's ``__init__`` re-exports its modules: importing a module of
    it runs the ``__init__`` first, which is not a call of the importer's making; those edges are
    left out."""
    known = modules(package)
    return {
        name: {
            dep
            for dep in imports(package, path, known)
            if not (name.startswith(dep + ".") and known[dep].name == "__init__.py")
        }
        for name, path in known.items()
    }
