"""The duro pytest plugin (registered through the ``pytest11`` entry point: no conftest needed).

- ``async def`` tests run on a fresh event loop with no other plugin or configuration (a test that
  another async plugin claims — pytest-asyncio, anyio — is left to it, and ``duro_env`` becomes an
  async fixture of that plugin, so it runs on the test's loop and async fixtures may take it).
- The ``duro_env`` fixture: the project's engine on a fresh SQLite store and a simulated clock.
  Its project is the marker's ``project`` (relative to the rootdir), else the nearest folder above
  the test file holding ``duro.config.py``, else the rootdir when it has one or a ``workflows/``.
- ``@pytest.mark.duro(project=..., start=..., config={"limits": {...}})`` sets those per test.

A test run that asks for no ``duro_env`` loads neither the harness nor the engine under it: they
load when a test first asks for the fixture.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import pytest

if TYPE_CHECKING:
    from ._env import DuroEnv

CONFIG_FILE = "duro.config.py"
_ENV_MODULE = "duro_harness._env"


def _is_env(value: object) -> TypeGuard[DuroEnv]:
    """Whether ``value`` is a ``DuroEnv`` (none can exist before the harness is loaded)."""
    module = sys.modules.get(_ENV_MODULE)
    return module is not None and isinstance(value, module.DuroEnv)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "duro(project=None, start=None, config=None, directory=None, io_timeout=30.0): the project "
        "directory (relative to the rootdir), the simulated start instant, config overrides "
        "({'limits': {...}}), a directory for the store's file (default: in memory) and how many "
        "seconds of real time a step awaiting real I/O may take, for the duro_env fixture",
    )


def _claimed_by_other_plugin(item: pytest.Item) -> bool:
    """pytest-asyncio's tests carry its marker (auto mode adds it), anyio's ask for ``anyio_backend``."""
    if "anyio_backend" in getattr(item, "fixturenames", ()):
        return True
    return any(item.get_closest_marker(name) is not None for name in ("asyncio", "anyio", "trio"))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    if not inspect.iscoroutinefunction(pyfuncitem.obj) or _claimed_by_other_plugin(pyfuncitem):
        return None
    import asyncio

    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}

    async def run() -> None:
        async with AsyncExitStack() as stack:
            for value in arguments.values():
                if _is_env(value):
                    await stack.enter_async_context(value)
            await pyfuncitem.obj(**arguments)

    asyncio.run(run())
    return True


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Any:
    """In a test another plugin runs, ``duro_env`` (this plugin's, or a conftest's returning a
    ``DuroEnv``) becomes an async fixture of that plugin: entered on the loop the test and its async
    fixtures run on, and left there after their teardown."""
    original = fixturedef.func
    if (
        fixturedef.argname != "duro_env"
        or not inspect.isfunction(original)
        or inspect.isgeneratorfunction(original)
        or inspect.iscoroutinefunction(original)
        or inspect.isasyncgenfunction(original)
        or not _claimed_by_other_plugin(request.node)
    ):
        yield
        return
    fixturedef.func = _on_the_tests_loop(original, request.node)
    try:
        yield
    finally:
        fixturedef.func = original


def _on_the_tests_loop(make: Any, item: pytest.Item) -> Any:
    @functools.wraps(make)
    async def duro_env(**kwargs: Any) -> AsyncIterator[Any]:
        import asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise pytest.UsageError(
                f"{item.nodeid}: duro_env runs on asyncio; with anyio, use the asyncio backend "
                '(an `anyio_backend` fixture returning "asyncio")'
            ) from None
        env = make(**kwargs)
        if not _is_env(env):
            yield env
            return
        async with env:
            yield env

    marker = item.get_closest_marker("asyncio")
    if marker is not None and item.config.pluginmanager.has_plugin("asyncio"):
        # what pytest-asyncio's own fixture decorator sets: run it on the loop of the test
        scope = marker.kwargs.get("loop_scope") or item.config.getini("asyncio_default_test_loop_scope")
        duro_env._force_asyncio_fixture = True  # type: ignore[attr-defined]
        duro_env._loop_scope = scope  # type: ignore[attr-defined]
    return duro_env


def _find_project(request: pytest.FixtureRequest) -> Path | None:
    rootdir = Path(request.config.rootpath)
    folder = Path(request.path).parent
    for candidate in (folder, *folder.parents):
        if (candidate / CONFIG_FILE).exists():
            return candidate
        if candidate == rootdir:
            break
    if (rootdir / CONFIG_FILE).exists() or (rootdir / "workflows").is_dir():
        return rootdir
    return None


@pytest.fixture
def duro_env(request: pytest.FixtureRequest) -> DuroEnv:
    """The project under simulated time (see ``duro_harness.DuroEnv``); needs an ``async def`` test."""
    if not inspect.iscoroutinefunction(getattr(request, "function", None)):
        raise pytest.UsageError("duro_env needs an `async def` test (the environment runs on its event loop)")
    return _new_env(request)


def _new_env(request: pytest.FixtureRequest) -> DuroEnv:
    from ._env import DuroEnv

    marker = request.node.get_closest_marker("duro")
    options = dict(marker.kwargs) if marker is not None else {}
    project = options.pop("project", None)
    if project is not None:
        project = Path(request.config.rootpath) / project
    else:
        project = _find_project(request)
    return DuroEnv(project=project, **options)  # its store in memory (``directory=`` on the marker: a file)
