"""Wait on a condition with a bound (never a bare sleep)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any


async def eventually(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout}s")
        await asyncio.sleep(0.01)


def wait_until(
    condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition", interval: float = 0.02
) -> Any:
    """The synchronous twin of :func:`eventually`: poll ``condition`` until it is truthy, within a bound."""
    pause = threading.Event()
    deadline = time.perf_counter() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.perf_counter() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout}s")
        pause.wait(interval)
