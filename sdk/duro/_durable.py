"""The durable helpers workflow code calls (``duro.sleep``, ``now``, ``wait_for_signal``, ``child``,
``start_child``, ``patched``, ``deprecate_patch``): each finds the current run through a context variable and makes the call on it.
Called inside a step or outside any run, they raise a clear error."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import _current
from ._definitions import Concurrency
from ._durations import Duration


async def sleep(duration: Duration) -> None:
    """Sleep durably for ``duration`` (``"10s"``, ``"2h"``, ms, timedelta); the run is ``suspended``."""
    await _current.run_or_raise("sleep").sleep(duration)


async def now() -> datetime:
    """The current time (aware UTC), recorded so that a replay sees the same instant."""
    return await _current.run_or_raise("now").now()


async def wait_for_signal(name: str, timeout: Duration | None = None) -> Any:
    """Wait for signal ``name``; its payload, or ``None`` if ``timeout`` passes first."""
    return await _current.run_or_raise("wait_for_signal").wait_for_signal(name, timeout)


async def child(
    wf: Any, inp: Any = None, *, run_id: str | None = None, concurrency: Concurrency | None = None
) -> Any:
    """Start a child workflow run and return its result (the parent is ``blocked`` meanwhile)."""
    return await _current.run_or_raise("child").child(wf, inp, run_id=run_id, concurrency=concurrency)


async def start_child(
    wf: Any, inp: Any = None, *, run_id: str | None = None, concurrency: Concurrency | None = None
) -> Any:
    """Start a child workflow run and return its :class:`RunHandle` at once."""
    return await _current.run_or_raise("start_child").start_child(
        wf, inp, run_id=run_id, concurrency=concurrency
    )


async def patched(change_id: str) -> bool:
    """Whether this run takes the code behind patch ``change_id``: ``True`` for a run that reaches it
    for the first time (a marker is recorded), ``False`` when replaying a history recorded before the
    patch existed. The same answer for every call with this id in one run (docs/versioning.md)."""
    return await _current.run_or_raise("patched").patched(change_id)


async def deprecate_patch(change_id: str) -> None:
    """Where ``if await patched(change_id):`` was, once no run without its marker remains: a history
    with the marker still replays (the marker is passed over), and new runs record nothing."""
    await _current.run_or_raise("deprecate_patch").deprecate_patch(change_id)
