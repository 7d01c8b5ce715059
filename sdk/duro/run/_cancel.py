"""Cancelling delivered into a run's code: the run's side (its worker's side: ``duro.worker._worker``).

A cancel is a request stored on the run (``cancel_requested_at``). The worker holding the run hears
of it (at once in its own process; through the store's notices or its poll pass from another) or
finds it when it loads the run, and marks the run's :class:`Cancel`; the run's current durable
await, or its next one, raises :class:`RunCancelled`, and the delivery is recorded in the run's
history so that a replay raises it at the same call:

- a wait (a sleep, a signal, a slot, a child, a retry's delay) is interrupted: its own record is
  closed ``cancelled`` (a slot request also leaves its queue, in the same transaction);
- a call made after the request (or reached by a replay past its history) records itself
  ``cancelled`` and does nothing else;
- a step whose body was executing when the request came is not interrupted: its outcome is
  recorded, then a record of kind ``cancel`` takes the next sequence number, and the step's call
  raises ``RunCancelled`` instead of returning. A ``release_slot`` reached with the cancel pending
  does the same: it releases first (``try: ... finally: await release_slot(...)`` frees the slot
  however the cancel falls).

From then on the code's ``finally`` and ``except RunCancelled`` blocks run: calls that do not wait
(steps, ``release_slot``, ``now``...) are made and recorded as usual; a call that would wait records
itself ``cancelled`` and raises ``RunCancelled`` again at once.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import Any, Final, NoReturn, Protocol

from .._errors import RunCancelled
from .._states import RunState, StepKind
from ..rules._eviction import IdleWait
from ..store import RecordStep, StepRecord
from ._current import Replayed
from ._runtime import Runtime

CANCEL: Final = "cancel"  # the kind (and name) of the record of a cancel delivered as a call returned
WAITS = frozenset({"sleep", "signal", "hook", "child"})  # the calls a cancelled run may not make


class Cancel:
    """A run's cancellation (``RunContext.cancel``; ``None`` there: none, and none in its history).
    ``requested``: its worker holds a request not delivered yet; ``delivered``: ``RunCancelled`` was
    raised in the code (here, or in the history replayed); ``interrupting``: its worker stopped its
    wait to deliver it there."""

    __slots__ = ("requested", "delivered", "interrupting")

    def __init__(self) -> None:
        self.requested = False
        self.delivered = False
        self.interrupting = False

    @property
    def pending(self) -> bool:
        """Whether the next durable call, or the end of the current one, delivers it."""
        return self.requested and not self.delivered

    @property
    def stops_waits(self) -> bool:
        """Whether a wait must not begin: it delivers the cancel, or refuses (delivered already)."""
        return self.requested or self.delivered


class RunContext(Protocol):
    """The run a cancel is delivered to (``duro.run._context.RunContext``), as delivering uses it."""

    run_id: str
    owner: str
    runtime: Runtime

    @property
    def history(self) -> Replayed: ...

    cancel: Cancel | None
    idle_wait: IdleWait | None
    task: asyncio.Task[None] | None
    fatal: BaseException | None

    def now_ms(self) -> int: ...

    def recorded(self, step: StepRecord) -> None: ...

    def refused(self, why: Any) -> None: ...

    async def write(
        self, step: StepRecord, run_status: RunState | None = None, wake_at: int | None = None
    ) -> None: ...


def cancelled(run_id: str) -> RunCancelled:
    return RunCancelled(f"run {run_id!r} was cancelled")


def delivers(records: list[StepRecord]) -> bool:
    """Whether a history holds a cancel delivered (its replay raises it again)."""
    return any(rec.status == "cancelled" or rec.kind == CANCEL for rec in records)


def request(ctx: RunContext) -> bool:
    """The worker holding the run heard of its cancel: deliver it (at once if the run is idle at a
    wait, else at its next durable call or as its current one ends). False if it knew already."""
    state = ctx.cancel
    if state is None:
        state = ctx.cancel = Cancel()
    if state.requested or state.delivered:
        return False
    state.requested = True
    if ctx.idle_wait is not None and ctx.task is not None and ctx.fatal is None:
        state.interrupting = True  # the wait raises CancelledError, and idle delivers there
        ctx.task.cancel()
    return True


def at_call(
    ctx: RunContext, seq: int, kind: StepKind, name: str, rec: StepRecord | None
) -> tuple[int, StepRecord | None]:
    """``take_seq`` of a run with a cancel (requested, delivered, or in its history)."""
    state = ctx.cancel
    assert state is not None
    if rec is not None:
        if rec.status == "cancelled":  # delivered here before (or a wait it refused): again
            state.delivered = True
            raise cancelled(ctx.run_id)
        if rec.status in ("completed", "failed"):
            ahead = ctx.history.peek()
            if ahead is not None and ahead.kind == CANCEL:  # delivered as this call returned
                ctx.history.take(CANCEL, CANCEL)
                state.delivered = True
                raise cancelled(ctx.run_id)
            return seq, rec
    if not state.pending and not (state.delivered and kind in WAITS):
        return seq, rec
    if kind == "hook" and rec is not None:
        return seq, rec  # a slot request in its queue: acquire_slot takes it out as it delivers
    if kind == "release":
        return seq, rec  # what a cancel wants done: it releases, then delivers (after_call)
    now = ctx.now_ms()
    step = StepRecord(
        seq,
        kind,
        name,
        "cancelled",
        now if rec is None else rec.started_at,
        now,
        wake_at=None if rec is None else rec.wake_at,
        detail=None if rec is None else rec.detail,
    )
    # not awaited (take_seq is not): the code's next writes queue behind it, and a crash that loses
    # it has the replay deliver at this same call again (the request is stored)
    ctx.runtime.gateway.progress.write_nowait(
        RecordStep(ctx.run_id, ctx.owner, step, "running", None, now), on_refused=ctx.refused
    )
    ctx.recorded(step)
    state.delivered = True
    raise cancelled(ctx.run_id)


async def at_wait(ctx: RunContext, rec: StepRecord | None) -> NoReturn:
    """The run's wait was interrupted to deliver its cancel (``request``): ``rec``, the wait's record,
    is closed ``cancelled`` (``None``: the caller records the delivery, a slot request)."""
    state = ctx.cancel
    assert state is not None and ctx.task is not None
    state.interrupting = False
    ctx.task.uncancel()
    await _deliver_at(ctx, rec)


async def before_wait(ctx: RunContext, rec: StepRecord | None, wake: Awaitable[Any] | None) -> NoReturn:
    """A wait about to begin in a run whose cancel came meanwhile (its call began before): it
    delivers the cancel instead, as :func:`at_wait`; ``wake``, never awaited, is dropped."""
    _discard(wake)
    await _deliver_at(ctx, rec)


def _discard(wake: Awaitable[Any] | None) -> None:
    """Close a wait that will never be awaited, and the waits it was handed and has not started
    (``wakeups.wait_for(event.wait(), ...)``): a coroutine never awaited warns when collected."""
    if inspect.iscoroutine(wake):
        frame = wake.cr_frame
        handed = [] if frame is None else [v for v in frame.f_locals.values() if inspect.isawaitable(v)]
        wake.close()
        for inner in handed:
            _discard(inner)
    elif isinstance(wake, asyncio.Future):
        wake.cancel()


async def _deliver_at(ctx: RunContext, rec: StepRecord | None) -> NoReturn:
    state = ctx.cancel
    assert state is not None
    if rec is not None and not state.delivered:
        await ctx.write(rec._replace(status="cancelled", ended_at=ctx.now_ms()), "running")
    state.delivered = True
    raise cancelled(ctx.run_id) from None


def interrupted(ctx: RunContext) -> bool:
    """In a wait's ``except CancelledError``: whether the cancellation is a cancel to deliver."""
    state = ctx.cancel
    return state is not None and state.interrupting and ctx.fatal is None


async def after_call(ctx: RunContext) -> NoReturn:
    """A step whose body was executing when the cancel came ended (its outcome is recorded), or a
    release was made with it pending: the delivery takes the next sequence number, and the call
    raises ``RunCancelled``."""
    state = ctx.cancel
    assert state is not None
    seq, _ = ctx.history.take(CANCEL, CANCEL)
    now = ctx.now_ms()
    await ctx.write(StepRecord(seq, CANCEL, CANCEL, "cancelled", now, now), "running")
    state.delivered = True
    raise cancelled(ctx.run_id)
