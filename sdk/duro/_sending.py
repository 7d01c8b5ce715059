"""Signalling another run from workflow code (``duro.send_signal``): a durable call.

The send takes the run's next sequence number and is recorded as a step of kind ``send_signal``
named by the signal, in the same transaction as the signal it buffers for the target run
(:class:`~duro.store.SendSignal`): either both are written or neither is, so a crash can neither
lose a send the run goes on from nor make a replay send it again. A replay returns at the record.
A target that does not exist or has ended fails the call, and that failure is recorded too: a
replay raises the same error without asking the store again.
"""

from __future__ import annotations

from typing import Any, Protocol

from ._errors import DuroError, StoreUnavailable
from ._runtime import Runtime
from ._serde import describe_error, dump_json, restore_error
from ._text import NO_NUL, NUL
from .store import Command, StepRecord
from .store import SendSignal as SendCommand

SEND = "send_signal"  # the kind of a send's step record


class SendingRun(Protocol):
    """What a send needs of its run (``duro._context.RunContext``)."""

    run_id: str
    owner: str
    runtime: Runtime

    def take_seq(self, kind: str, name: str) -> tuple[int, StepRecord | None]: ...

    def now_ms(self) -> int: ...

    async def apply(self, command: Command) -> Any: ...

    async def write(
        self, step: StepRecord, run_status: str | None = None, wake_at: int | None = None
    ) -> None: ...

    def recorded(self, step: StepRecord) -> None: ...

    def checkpoint(self, point: str) -> None: ...


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


async def send_signal(ctx: SendingRun, run_id: str, name: str, payload: Any) -> None:
    """Send signal ``name`` to run ``run_id`` from ``ctx``'s code."""
    text = signal_text(run_id, name, payload)
    seq, rec = ctx.take_seq(SEND, name)
    if rec is not None:  # sent before this replay (or refused then: the same error again)
        if rec.status == "failed":
            raise restore_error(rec.error)
        return
    moment = ctx.now_ms()
    step = StepRecord(seq, SEND, name, "completed", moment, moment, detail=dump_json({"run_id": run_id}))
    try:
        await ctx.apply(SendCommand(ctx.run_id, ctx.owner, run_id, name, text, step))
    except StoreUnavailable:
        raise  # nothing was decided: the run fails or is retried as with any write
    except DuroError as refused:  # no such run, or it has ended: nothing was sent
        await ctx.write(step._replace(status="failed", error=describe_error(refused)))
        raise
    ctx.checkpoint("signal.sent")  # the harness may crash the box here: the send is recorded already
    ctx.recorded(step)
    ctx.runtime.events.publish("signal.sent", run_id, moment, None, name=name)
    wakeups, worker = ctx.runtime.wakeups, ctx.runtime.starter.worker
    if (run_id, name) in wakeups.signals:
        wakeups.signals.notify((run_id, name))  # it waits in this process
    elif worker is not None:
        worker.wake()  # it may wait unloaded: the store has it due now (another process hears a notice)
