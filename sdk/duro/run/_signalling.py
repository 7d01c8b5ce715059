"""Signals in workflow code: waiting for one (``duro.wait_for_signal``) and sending one to another
run (``duro.send_signal``), both durable calls.

A wait takes the signal the store buffered for the run, oldest first, in the transaction that
records it as the wait's result; with none buffered it waits idle until one comes (or its timeout).

The send takes the run's next sequence number and is recorded as a step of kind ``send_signal``
named by the signal, in the same transaction as the signal it buffers for the target run
(:class:`~duro.store.SendSignal`): either both are written or neither is, so a crash can neither
lose a send the run goes on from nor make a replay send it again. A replay returns at the record.
A target that does not exist or has ended fails the call, and that failure is recorded too: a
replay raises the same error without asking the store again.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Final, Protocol, TypeVar

from .._durations import Duration, to_ms
from .._errors import DuroError, StoreUnavailable, raised_at
from .._serde import Codec, describe_error, dump_json, restore_error
from .._states import RunState, StepKind
from .._text import NO_NUL, NUL
from ..store import Command, StepRecord, TakeSignal
from ..store import SendSignal as SendCommand
from ._current import Replayed
from ._runtime import Runtime

SEND: Final = "send_signal"  # the kind of a send's step record
T = TypeVar("T")
_JSON = Codec(None)


class SignallingRun(Protocol):
    """What a wait or a send needs of its run (``duro.run._context.RunContext``)."""

    run_id: str
    owner: str
    runtime: Runtime

    @property
    def history(self) -> Replayed: ...

    def take_seq(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]: ...

    def now_ms(self) -> int: ...

    async def apply(self, command: Command) -> Any: ...

    async def write(
        self, step: StepRecord, run_status: RunState | None = None, wake_at: int | None = None
    ) -> None: ...

    def recorded(self, step: StepRecord) -> None: ...

    def checkpoint(self, point: str) -> None: ...

    async def resume(self) -> None: ...

    async def idle(
        self, wake: Awaitable[T], kind: str, key: str | None, due_at: int | None, record: StepRecord | None
    ) -> T: ...


def signal_text(run_id: object, name: object, payload: Any) -> str:
    """The payload as JSON text, once the target's id and the signal's name are known good."""
    if not isinstance(run_id, str) or not run_id or NUL in run_id:
        raise DuroError(f"send_signal: the run id must be a non-empty string, got {run_id!r}; {NO_NUL}")
    if not isinstance(name, str) or not 0 < len(name) <= 200 or NUL in name:
        raise DuroError(f"signal name {name!r} is invalid: use a string of 1 to 200 characters; {NO_NUL}")
    try:
        return dump_json(payload)
    except (TypeError, ValueError) as err:
        raise DuroError(f"payload of signal {name!r} to run {run_id!r} is not JSON: {err}") from None


async def send_signal(ctx: SignallingRun, run_id: str, name: str, payload: Any) -> None:
    """Send signal ``name`` to run ``run_id`` from ``ctx``'s code."""
    text = signal_text(run_id, name, payload)
    seq, rec = ctx.take_seq(SEND, name)
    if rec is not None:  # sent before this replay (or refused then: the same error again)
        if rec.status == "failed":
            raise raised_at(restore_error(rec.error), seq)
        return
    moment = ctx.now_ms()
    step = StepRecord(seq, SEND, name, "completed", moment, moment, detail=dump_json({"run_id": run_id}))
    try:
        await ctx.apply(SendCommand(ctx.run_id, ctx.owner, run_id, name, text, step))
    except StoreUnavailable:
        raise  # nothing was decided: the run fails or is retried as with any write
    except DuroError as refused:  # no such run, or it has ended: nothing was sent
        await ctx.write(step._replace(status="failed", error=describe_error(refused)))
        raised_at(refused, seq)
        raise
    ctx.checkpoint("signal.sent")  # the harness may crash the engine here: the send is recorded already
    ctx.recorded(step)
    ctx.runtime.events.publish("signal.sent", run_id, moment, None, name=name)
    wakeups, worker = ctx.runtime.wakeups, ctx.runtime.starter.worker
    if (run_id, name) in wakeups.signals:
        wakeups.signals.notify((run_id, name))  # it waits in this process
    elif worker is not None:
        worker.wake()  # it may wait evicted: the store has it due now (another process hears a notice)


async def wait_for_signal(ctx: SignallingRun, name: str, timeout: Duration | None) -> Any:
    """Wait (``suspended``) for signal ``name`` in ``ctx``'s code (``duro.wait_for_signal``)."""
    if not isinstance(name, str) or not name or NUL in name:
        raise DuroError(
            f"wait_for_signal: the signal name must be a non-empty string, got {name!r}; {NO_NUL}"
        )
    seq, rec = ctx.take_seq("signal", name)
    if rec is not None and rec.status == "completed":
        return _JSON.load(rec.result)
    if rec is None:
        started = ctx.now_ms()
        deadline = None if timeout is None else started + to_ms(timeout, "wait_for_signal timeout")
        rec = StepRecord(seq, "signal", name, "waiting", started, wake_at=deadline)
    waiter = ctx.runtime.wakeups.signals.add((ctx.run_id, name))
    try:
        if not ctx.history.recorded(seq):
            found, payload = await _take_signal(ctx, rec)
            if found:
                return payload
            await ctx.write(rec, "suspended", rec.wake_at)
        while True:
            found, payload = await _take_signal(ctx, rec)
            if found:
                await ctx.resume()
                return payload
            if rec.wake_at is not None and ctx.now_ms() >= rec.wake_at:
                await ctx.write(
                    StepRecord(
                        seq,
                        "signal",
                        name,
                        "completed",
                        rec.started_at,
                        ctx.now_ms(),
                        wake_at=rec.wake_at,
                        result="null",
                        detail=dump_json({"timed_out": True}),
                    ),
                    "running",
                )
                await ctx.resume()
                return None
            await ctx.idle(
                ctx.runtime.wakeups.wait_for(waiter.wait(), rec.wake_at),
                "signal",
                name,
                rec.wake_at,
                rec,
            )
            waiter.clear()
    finally:
        ctx.runtime.wakeups.signals.drop((ctx.run_id, name), waiter)


async def _take_signal(ctx: SignallingRun, rec: StepRecord) -> tuple[bool, Any]:
    step = StepRecord(
        rec.seq, "signal", rec.name, "waiting", rec.started_at, ctx.now_ms(), wake_at=rec.wake_at
    )
    taken = await ctx.apply(TakeSignal(ctx.run_id, ctx.owner, rec.name, step))
    if taken is None:
        return False, None
    ctx.recorded(taken)
    return True, _JSON.load(taken.result)
