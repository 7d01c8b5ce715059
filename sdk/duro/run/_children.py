"""Child runs: ``child`` (start one and wait for its result) and ``start_child`` (start one and go
on), the durable calls behind ``RunContext.child`` / ``start_child`` and ``duro.child`` /
``duro.start_child``. A child's start is recorded as the parent's step in the child's own insert
(see ``store.runs.insert``), so a crash between the two leaves neither; the wait for its end is idle
the parent (``child``), which its worker may evict: the child's end makes it due again."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from .._errors import (
    ChildWorkflowError,
    ConcurrencyLimitError,
    RunCancelled,
    RunIdConflictError,
    RunStatusError,
    raised_at,
)
from .._serde import describe_error, dump_json, restore_error
from .._states import ENDED, RETRYABLE, RunState, StepKind
from ..definitions._definitions import Concurrency
from ..store import Fenced, OwnStep, RunRecord, StepRecord
from ._runtime import LostRun, Runtime

T = TypeVar("T")


class Parent(Protocol):
    """The run making the call (a ``RunContext``), as a child's calls use it."""

    runtime: Runtime
    run_id: str
    record: RunRecord  # the run as its worker took it (its attempt: see _start_child_run)

    def now_ms(self) -> int: ...

    def take_seq(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]: ...

    async def write(
        self, step: StepRecord, run_status: RunState | None = None, wake_at: int | None = None
    ) -> None: ...

    def own(self, step: StepRecord) -> OwnStep: ...

    def recorded(self, step: StepRecord) -> None: ...

    async def resume(self) -> None: ...

    async def idle(
        self, wake: Awaitable[T], kind: str, key: str | None, due_at: int | None, record: StepRecord | None
    ) -> T: ...


async def child(ctx: Parent, wf: Any, inp: Any, run_id: str | None, concurrency: Concurrency | None) -> Any:
    """Start a child run and wait (``blocked``) for its result; a failed, cancelled or refused child
    raises :class:`ChildWorkflowError` with the reason as its cause."""
    spec = ctx.runtime.registry.spec_for(wf)
    seq, rec = ctx.take_seq("child", spec.name)
    if rec is not None and rec.status == "completed":
        return spec.output.load(rec.result)
    if rec is not None and rec.status == "failed":
        raise raised_at(restore_error(rec.error), seq)
    if rec is None:
        child_id = run_id or f"{ctx.run_id}.{seq}"
        rec = StepRecord(
            seq, "child", spec.name, "waiting", ctx.now_ms(), detail=dump_json({"run_id": child_id})
        )
        await _start_child_run(ctx, spec, inp, child_id, concurrency, rec)
    child_id = json.loads(rec.detail or "{}")["run_id"]
    wakeups = ctx.runtime.wakeups
    waiter = wakeups.wait_end(child_id)
    try:
        while True:  # a child that ended here is read from its end as written
            child = wakeups.ended.get(child_id) or await ctx.runtime.gateway.call(
                ctx.runtime.gateway.store.runs.get, child_id
            )
            if child is not None and child.status in ENDED:
                break
            await ctx.idle(waiter.wait(), "child", child_id, None, rec)
            waiter.clear()
    finally:
        wakeups.stop_waiting(child_id, waiter)
    if child.status == "completed":
        await ctx.write(rec.ended("completed", ctx.now_ms(), result=child.output), "running")
        await ctx.resume()
        return spec.output.load(child.output)
    cause = restore_error(child.error) if child.error else RunCancelled(child_id)
    err = ChildWorkflowError(
        child_id,
        spec.name,
        cause if isinstance(cause, Exception) else None,
        f"child run {child_id!r} of workflow {spec.name!r} {child.status}"
        + (f": {cause}" if str(cause) else ""),
    )
    await ctx.write(rec.ended("failed", ctx.now_ms(), error=describe_error(err)), "running")
    await ctx.resume()
    raise raised_at(err, seq)


async def start_child(
    ctx: Parent, wf: Any, inp: Any, run_id: str | None, concurrency: Concurrency | None
) -> Any:
    """Start a child run without waiting; returns its :class:`RunHandle`."""
    spec = ctx.runtime.registry.spec_for(wf)
    seq, rec = ctx.take_seq("start_child", spec.name)
    if rec is not None and rec.status == "failed":
        raise raised_at(restore_error(rec.error), seq)
    if rec is None:
        child_id = run_id or f"{ctx.run_id}.{seq}"
        now = ctx.now_ms()
        rec = StepRecord(
            seq,
            "start_child",
            spec.name,
            "completed",
            now,
            now,
            result=dump_json(child_id),
            detail=dump_json({"run_id": child_id}),
        )
        await _start_child_run(ctx, spec, inp, child_id, concurrency, rec)
    return ctx.runtime.handle(json.loads(rec.detail or "{}")["run_id"])


async def _start_child_run(
    ctx: Parent, spec: Any, inp: Any, child_id: str, concurrency: Concurrency | None, rec: StepRecord
) -> None:
    try:
        found, created = await ctx.runtime.starter.start(
            spec, inp, run_id=child_id, concurrency=concurrency, parent=ctx.own(rec)
        )
        if not created and found.status in RETRYABLE and ctx.record.attempt > 1:
            # a retried parent runs its failed child call again: the child is retried with it (from
            # its own failing call, its completed steps kept), unless another retry took it first
            with contextlib.suppress(RunStatusError):
                await ctx.runtime.redrive.retry(found.id, None, found)
    except Fenced:
        raise LostRun(ctx.run_id) from None
    except (ConcurrencyLimitError, RunIdConflictError) as refused:
        err = ChildWorkflowError(
            child_id, spec.name, refused, f"child run of workflow {spec.name!r} was refused: {refused}"
        )
        await ctx.write(rec.ended("failed", ctx.now_ms(), error=describe_error(err)))
        raise raised_at(err, rec.seq) from refused
    ctx.recorded(rec)
