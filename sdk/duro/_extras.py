"""Packages that an extra brings (``pip install 'duro[postgres]'``), and the one-line error that
names the extra when one is not installed."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ._errors import DuroError


def missing(extra: str, what: str) -> DuroError:
    return DuroError(f"{what} needs the {extra} extra: pip install 'duro[{extra}]'")


def require(module: str, extra: str, what: str) -> ModuleType:
    """``module``, imported; a :class:`DuroError` naming ``extra`` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name != module.partition(".")[0]:
            raise  # installed, but something it imports is not: not ours to explain
        raise missing(extra, what) from None


class NotInstalled(Exception):
    """A class no object is an instance of, and that nothing raises."""


class Absent:
    """Stands in for the module of an extra that is not installed, so that code which only checks
    against its names runs unchanged: ``isinstance(x, psycopg.Connection)`` and
    ``except psycopg.Error`` are simply false (a capitalised name is :class:`NotInstalled`); a
    lower-case name is another stand-in (a submodule or a function), and calling one raises the
    error that names the extra."""

    def __init__(self, extra: str, what: str) -> None:
        self._extra = extra
        self._what = what

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return NotInstalled if name[:1].isupper() else Absent(self._extra, self._what)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise missing(self._extra, self._what)


PSYCOPG = Absent("postgres", "PostgreSQL")
