"""Each module whose public names load on first use says them three times: under ``TYPE_CHECKING``
(for type checkers), in the table given to ``lazy_names`` (at run time) and in ``__all__``. The
three agree, and every name resolves to what its module defines."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

import duro
from duro.tooling import lazy_names

LAZY = ["duro", "duro.store", "duro.limits", "duro.tooling", "duro_harness"]


def _type_checking_names(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """``exported name: (module, its name there)`` of the imports under ``if TYPE_CHECKING:``."""
    names: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for sub in node.body:
                assert isinstance(sub, ast.ImportFrom), ast.unparse(sub)
                module = "." * sub.level + (sub.module or "")
                for alias in sub.names:
                    names[alias.asname or alias.name] = (module, alias.name)
    return names


def _table(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """The same, from the table given to ``lazy_names``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "lazy_names":
            table = ast.literal_eval(node.args[1])
            found: dict[str, tuple[str, str]] = {}
            for module, entries in table.items():
                for entry in entries:
                    alias, _, name = entry.partition("=")
                    found[alias] = (module, name or alias)
            return found
    raise AssertionError("no lazy_names(...) call")


@pytest.mark.parametrize("name", LAZY)
def test_the_three_lists_agree_and_every_name_resolves(name: str):
    module = importlib.import_module(name)
    tree = ast.parse(inspect.getsource(module))
    declared = _type_checking_names(tree)
    table = _table(tree)
    assert declared == table
    eager = {
        n for n in module.__all__ if n in vars(module) and n not in table
    }  # defined in the module itself
    assert set(module.__all__) == set(table) | eager
    assert len(module.__all__) == len(set(module.__all__))
    for public, (where, attr) in table.items():
        expected = getattr(importlib.import_module(where, module.__package__), attr)
        assert getattr(module, public) is expected, public
    assert set(module.__all__) <= set(dir(module))


def test_an_unknown_name_is_an_attribute_error_naming_the_module():
    with pytest.raises(AttributeError, match="module 'duro' has no attribute 'Engin'"):
        duro.Engin  # noqa: B018


def test_a_name_once_loaded_is_a_plain_global():
    namespace = {"__name__": "pkg", "__package__": "duro"}
    getattr_, _ = lazy_names(namespace, {"._durations": ("to_ms", "ms=to_ms")})
    assert getattr_("ms") is getattr_("to_ms")
    assert namespace["ms"] is namespace["to_ms"]
