"""Public names that load their module on first use (PEP 562), so that importing a package costs
nothing until one of its names is asked for. Each package lists the names under ``TYPE_CHECKING``
too, for type checkers; a unit test keeps the two lists equal."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    namespace: dict[str, Any], modules: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the module whose globals are ``namespace``: ``modules``
    maps each module (relative, as its own imports would name it) to the names it gives;
    ``"alias=name"`` gives the module's ``name`` as ``alias``."""
    where_from = namespace["__package__"]
    own_name = namespace["__name__"]
    home: dict[str, tuple[str, str]] = {}
    for module, names in modules.items():
        for entry in names:
            alias, _, name = entry.partition("=")
            home[alias] = (module, name or alias)

    def __getattr__(name: str) -> Any:
        where = home.get(name)
        if where is None:
            raise AttributeError(f"module {own_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[0], where_from), where[1])
        namespace[name] = value  # later lookups find it at once
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *home})

    return __getattr__, __dir__
