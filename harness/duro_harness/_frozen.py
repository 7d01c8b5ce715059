"""freezegun's frozen time, so that user code reading the clock sees simulated time, without breaking
the classes of modules first imported while time is frozen.

freezegun swaps ``datetime.date`` and ``datetime.datetime`` for fakes with a metaclass of their own, so
a module imported under the freeze that subclasses them with another metaclass fails to import
(``pydantic.v1``, which FastAPI imports lazily: "metaclass conflict"), and its plain subclasses would
stay subclasses of the fakes after the test. While time is frozen, every import runs the module's body
on the real classes and only then binds the fakes to its names, as freezegun does for the modules
loaded before the freeze (and undoes for both when it stops).
"""

from __future__ import annotations

import datetime as _datetime
import importlib.abc
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from freezegun import freeze_time
from freezegun.api import FakeDate, FakeDatetime

# in a tuple: freezegun replaces every module-level name bound to a real class when it starts
_REAL = (_datetime.date, _datetime.datetime)
_FAKES: dict[int, Any] = {id(_REAL[0]): FakeDate, id(_REAL[1]): FakeDatetime}


class FrozenTime:
    """freezegun frozen at ``instant`` from :meth:`start` to :meth:`stop`; :meth:`move_to` moves it."""

    def __init__(self, instant: _datetime.datetime) -> None:
        self._freezer: Any = freeze_time(instant, real_asyncio=True)
        self._frozen: Any = None
        self._finder = _RealClassesFinder()

    def start(self) -> None:
        self._frozen = self._freezer.start()
        sys.meta_path.insert(0, self._finder)

    def move_to(self, instant: _datetime.datetime) -> None:
        self._frozen.move_to(instant)

    def stop(self) -> None:
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        if self._frozen is not None:
            self._frozen = None
            self._freezer.stop()


class _RealClassesFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` while frozen: finds each module with the finders after it and has
    it executed by a :class:`_RealClassesLoader`."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _RealClassesLoader(spec.loader, self)
            return spec
        return None


class _RealClassesLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, finder: _RealClassesFinder) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        # the module keeps its own loader (importlib.resources, inspect and reloads read it)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        with _real_classes:
            self._loader.exec_module(module)
        if self._finder in sys.meta_path:  # still frozen
            names = vars(module)
            for name, value in list(names.items()):
                fake = _FAKES.get(id(value))
                if fake is not None:
                    names[name] = fake

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _RealClasses:
    """``with``: ``datetime.date`` and ``datetime.datetime`` are the real classes (nested imports and
    imports in other threads included), and the fakes again once the outermost import is done."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._fakes: tuple[Any, Any] | None = None

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0 and _datetime.date is FakeDate:
                self._fakes = (_datetime.date, _datetime.datetime)
                _datetime.date, _datetime.datetime = _REAL  # type: ignore[misc]
            self._depth += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._fakes is not None:
                _datetime.date, _datetime.datetime = self._fakes  # type: ignore[misc]
                self._fakes = None


_real_classes = _RealClasses()
