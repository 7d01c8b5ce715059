"""The shape of the SDK's tree, read from its code: how to compare two layouts with figures.

    .venv/bin/python bench/layout.py                 # the checkout
    .venv/bin/python bench/layout.py --rev a406fbb   # a commit's sdk/ and docs/ (git archive)

Printed as JSON: the modules of ``sdk/duro`` and of ``sdk/duro/store``; their floors (the longest
chain of imports, read as ``tests/unit/test_import_graph.py`` reads them: ``tests/support/import_graph.py``); the store's classes that
inherit another class of the store; module sizes (largest, median, over 500 lines); the
glossary's terms; the top-level folders of ``sdk/duro``.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import tempfile
from functools import cache
from pathlib import Path

import _support as S

from tests.support import import_graph  # after _support: it puts the checkout on sys.path


def measure(root: Path) -> dict[str, object]:
    package = root / "sdk" / "duro"
    paths = import_graph.modules(package)
    graph = import_graph.graph(package)

    @cache
    def floor(name: str, within: str) -> int:
        deps = [d for d in graph[name] if d.startswith(within)]
        return 1 + max((floor(d, within) for d in deps), default=0)

    store = {n for n in paths if n.startswith("duro.store")}
    sizes = {n: len(p.read_text().splitlines()) for n, p in paths.items()}
    inherits = []
    for name in sorted(store):
        tree = ast.parse(paths[name].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                local = [b for b in bases if b.endswith(("Rows", "Part", "Store")) or b == "StorePart"]
                if local:
                    inherits.append(f"{node.name}({', '.join(local)})")
    glossary = root / "docs" / "glossary.md"
    terms = (
        sum(1 for line in glossary.read_text().splitlines() if line.startswith("- **"))
        if glossary.exists()
        else 0
    )
    return {
        "modules": len(paths),
        "floors": max(floor(n, "duro") for n in paths),
        "store_modules": len(store),
        "store_floors": max(floor(n, "duro.store") for n in store),
        "store_inheritance": inherits,
        "folders": sorted(p.name for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"),
        "flat_private_modules": sorted(p.name for p in package.glob("_*.py") if p.name != "__init__.py"),
        "largest": sorted(sizes.items(), key=lambda kv: -kv[1])[:5],
        "median_lines": statistics.median(sizes.values()),
        "over_500_lines": sum(1 for n in sizes.values() if n > 500),
        "glossary_terms": terms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="measure this commit's tree instead of the checkout")
    args = parser.parse_args()
    if args.rev is None:
        figures = measure(S.ROOT)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            S.export_tree(args.rev, ["sdk", "docs"], Path(tmp))
            figures = measure(Path(tmp))
    figures["flat_private_modules"] = len(figures["flat_private_modules"])  # type: ignore[arg-type]
    json.dump(figures, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
