"""The durable helpers workflow code calls (``duro.sleep``, ``now``, ``wait_for_signal``, ``child``,
``start_child``, ``patched``, ``deprecate_patch``, ``send_signal``): each finds the current run
through a context variable and makes the call on it. Called inside a step or outside any run, they
raise a clear error (``send_signal`` and ``current_run`` excepted: see each)."""

from __future__ import annotations

from collections.abc import Coroutine
from datetime import datetime
from typing import Any, NamedTuple

from .._durations import Duration
from .._errors import DuroError
from ..definitions._definitions import Concurrency
from . import _current


def sleep(duration: Duration) -> Coroutine[Any, Any, None]:
    """Sleep durably for ``duration`` (``"10s"``, ``"2h"``, ms, timedelta); the run is ``suspended``.

    Await it: ``await sleep("1h")``. A plain function returning the run's own coroutine: sleeps are
    the hottest durable call, and one frame less on every wake-up counts."""
    return _current.run_or_raise("sleep").sleep(duration)


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


class CurrentRun(NamedTuple):
    """The run whose code is executing, as :func:`current_run` returns it: its ``id``, its
    ``workflow`` name, the ``version`` of the code it executes on, and its engine's ``namespace``.
    Immutable; read from memory, never from the store (``engine.get_run(id)`` reads the stored run)."""

    id: str
    workflow: str
    version: str
    namespace: str


def current_run() -> CurrentRun:
    """The run executing this code: in workflow code (function or class form) and inside its
    steps (sync steps too, in their threads). Anywhere else a :class:`DuroError` says so."""
    run = _current.current_run.get()
    if run is None:
        raise DuroError(
            "current_run() was called outside any workflow run: call it from a @workflow function "
            "(or a step it calls) started through an engine"
        )
    record = run.record
    return CurrentRun(record.id, record.workflow, record.version, record.namespace)


async def send_signal(run_id: str, name: str, payload: Any = None) -> None:
    """Send signal ``name`` with a JSON ``payload`` to run ``run_id`` (buffered until that run waits
    for it with ``wait_for_signal``).

    In workflow code it is a durable call: recorded with the signal in one transaction, so a replay
    sends nothing again, and a run that does not exist or has ended raises the same error on every
    replay. Outside any run, and inside a step, it signals at once on the current engine (the one
    entered with ``async with engine:``, the harness's, or the dev server's), like
    ``engine.signal``; a step that is retried, or whose worker dies before its result is recorded,
    sends again: make the target tolerate a repeat, or send from the workflow."""
    run = _current.current_run.get()
    if run is None or _current.inside_step.get() is not None:
        await _current.resolve_engine().signal(run_id, name, payload)
        return
    await run.send_signal(run_id, name, payload)
