"""Tests mirror the code: a unit test of one module is named for it (``test_slots.py`` tests a module
named ``_slots.py`` or ``slots.py``), so a module's tests are found by its name; the checks that
span the tree are listed here by name."""

from __future__ import annotations

from pathlib import Path

import duro
import duro_devserver
import duro_harness

UNIT = Path(__file__).parent
ACROSS = {  # checks of the whole tree, of the docs, or of one promise across modules
    "test_docs",
    "test_grafana_dashboard",
    "test_import_graph",
    "test_layout",
    "test_public_surface",
    "test_startup_imports",
    "test_store_unavailable",
    "test_stored_data",
    "test_cli_format",
    "test_cli_target",
}


def _modules() -> set[str]:
    names = set()
    for package in (duro, duro_devserver, duro_harness):
        for path in Path(package.__file__).parent.rglob("*.py"):
            names.add(path.stem.lstrip("_"))
    return names


def test_every_unit_test_is_named_for_its_module_or_listed_as_a_check_across_it():
    modules = _modules()
    unnamed = sorted(
        path.stem
        for path in UNIT.glob("test_*.py")
        if path.stem not in ACROSS and path.stem.removeprefix("test_") not in modules
    )
    assert unnamed == [], f"name these for the module they test, or list them in ACROSS: {unnamed}"
