"""The duro pytest plugin (registered through the ``pytest11`` entry point: no conftest needed).

- ``async def`` tests run on a fresh event loop with no other plugin or configuration (a test that
  another async plugin claims — pytest-asyncio, anyio — is left to it).
- The ``duro_env`` fixture: the project's engine on a fresh SQLite store and a simulated clock.
  Its project is the marker's ``project`` (relative to the rootdir), else the nearest folder above
  the test file holding ``duro.config.py``, else the rootdir when it has one or a ``workflows/``.
- ``@pytest.mark.duro(project=..., start=..., config={"limits": {...}})`` sets those per test.
"""

from __future__ import annotations

import asyncio
import inspect
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from ._env import DuroEnv

CONFIG_FILE = "duro.config.py"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "duro(project=None, start=None, config=None, directory=None): the project directory (relative to "
        "the rootdir), the simulated start instant, config overrides ({'limits': {...}}) and a directory "
        "for the store's file (default: in memory) for the duro_env fixture",
    )


def _claimed_by_other_plugin(item: pytest.Function) -> bool:
    return any(item.get_closest_marker(name) is not None for name in ("asyncio", "anyio", "trio"))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    if not inspect.iscoroutinefunction(pyfuncitem.obj) or _claimed_by_other_plugin(pyfuncitem):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}

    async def run() -> None:
        async with AsyncExitStack() as stack:
            for value in arguments.values():
                if isinstance(value, DuroEnv):
                    await stack.enter_async_context(value)
            await pyfuncitem.obj(**arguments)

    asyncio.run(run())
    return True


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
    marker = request.node.get_closest_marker("duro")
    options = dict(marker.kwargs) if marker is not None else {}
    project = options.pop("project", None)
    if project is not None:
        project = Path(request.config.rootpath) / project
    else:
        project = _find_project(request)
    return DuroEnv(project=project, **options)  # its store in memory (``directory=`` on the marker: a file)
