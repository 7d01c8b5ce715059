"""The duro pytest plugin (registered through the ``pytest11`` entry point).

``async def`` tests run on a fresh event loop with no other plugin or configuration. When another
async plugin (pytest-asyncio, anyio) claims a test, this plugin leaves it alone.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest


def _claimed_by_other_plugin(item: pytest.Function) -> bool:
    return any(item.get_closest_marker(name) is not None for name in ("asyncio", "anyio", "trio"))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    if not inspect.iscoroutinefunction(pyfuncitem.obj) or _claimed_by_other_plugin(pyfuncitem):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**arguments))
    return True
