"""The run being executed, and the durable helpers workflow code calls.

Every durable call takes the run's next sequence number. If the run's history holds a record at that
number, the call returns (or raises) what was recorded, after checking the record is of the same
kind and name (otherwise :class:`NonDeterminismError`, which fails the run even if the workflow code
catches it). Otherwise it does the work and records the outcome before returning.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import _current, _limits
from ._batching import Pending
from ._clock import ms_to_datetime
from ._definitions import Concurrency, StepSpec
from ._durations import Duration, to_ms
from ._errors import (
    ChildWorkflowError,
    ConcurrencyLimitError,
    DuroError,
    NonDeterminismError,
    RunCancelled,
    RunIdConflictError,
)
from ._serde import Codec, describe_error, dump_json, restore_error
from ._text import NO_NUL, NUL
from .store import Command, Fenced, OwnStep, RecordStep, RunRecord, StepRecord, TakeSignal

if TYPE_CHECKING:
    from ._worker import Worker

_JSON = Codec(None)
_LAPSED = object()  # a sync step not started: the lease ran out before its thread got to it


class LostRun(BaseException):
    """Internal: this worker may no longer write the run (cancelled, or another worker took it)."""


class RunContext:
    """One run's execution state. The class form receives it as ``ctx``."""

    def __init__(self, worker: Worker, run: RunRecord) -> None:
        self.worker = worker
        self.engine = worker.engine
        self.run_id = run.id
        self.workflow = run.workflow
        self.record = run
        self._history: dict[int, StepRecord] = {}
        self._next_seq = 0
        # what ends the run whatever its code does next: a replay that diverged, or a write of the
        # run that did not take while it slept (another worker owns it: LostRun; the store failed)
        self.fatal: BaseException | None = None
        self._asleep = False
        self.cancel_reason: str | None = None
        self._now = worker.clock.now_ms  # the engine's clock, read often: bound once
        self._sleep_until = worker.clock.sleep_until

    def load_history(self, history: list[StepRecord]) -> None:
        self._history = {rec.seq: rec for rec in history}

    # -- plumbing --------------------------------------------------------------------------------

    def _take_seq(self, kind: str, name: str) -> tuple[int, StepRecord | None]:
        if self.fatal is not None:
            raise self.fatal
        seq = self._next_seq
        self._next_seq += 1
        rec = self._history.get(seq)
        if rec is not None and (rec.kind, rec.name) != (kind, name):
            self.fatal = NonDeterminismError(self.run_id, seq, f"{rec.kind} {rec.name!r}", f"{kind} {name!r}")
            raise self.fatal
        return seq, rec

    async def _write(
        self, step: StepRecord, run_status: str | None = None, wake_at: int | None = None
    ) -> None:
        ok = await self.engine.progress.write(
            RecordStep(self.run_id, self.worker.id, step, run_status, wake_at, self._now())
        )
        if not ok:
            raise LostRun(self.run_id)
        self._recorded(step)

    def own(self, step: StepRecord) -> OwnStep:
        """``step`` as a step of this run, to be written with a decision (fenced on our ownership)."""
        return OwnStep(self.run_id, self.worker.id, step)

    async def _store_call(self, command: Command) -> Any:
        """A command that writes this run's step, through the group commit (``engine.progress``:
        where the store batches its type, it shares one transaction with the other runs' writes of
        this loop turn; otherwise it is made alone). A fenced write means the run is not ours."""
        try:
            return await self.engine.progress.write(command)
        except Fenced:
            raise LostRun(self.run_id) from None

    def _recorded(self, step: StepRecord) -> None:
        """Announce a step written (by this run's own write, or inside another decision: a slot
        request, a release...). ``_history`` keeps only what the replay found: a live run never
        looks back at a call it has passed."""
        self.engine.events.emit(
            f"step.{step.status}",
            self.run_id,
            self._now(),
            self.workflow,
            seq=step.seq,
            step_kind=step.kind,
            name=step.name,
        )

    async def resume(self) -> None:
        """Before this run executes any more of its code — a step body, or workflow code after a
        sleep, a signal, a slot, a child or a retry delay — its worker must still own it. Past the
        worker's lease (frozen, or cut off from the store, for longer than it), another worker may
        have taken the run: wait until the store confirms the lease (``Worker.confirm``). A run that
        was lost meanwhile raises ``LostRun`` and runs nothing more here."""
        if self.fatal is not None:
            raise self.fatal
        if not self.worker.owns_runs():
            await self.worker.confirm()
            if self.fatal is not None:
                raise self.fatal

    # -- steps -----------------------------------------------------------------------------------

    async def run_step(self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            spec.signature.bind(*args, **kwargs)
        except TypeError as err:
            raise DuroError(
                f"step {spec.name!r} called with wrong arguments ({err}); its signature is "
                f"{spec.name}{spec.signature}"
            ) from None
        seq, rec = self._take_seq("step", spec.name)
        if rec is not None and rec.status == "completed":
            return spec.output.load(rec.result)
        if rec is not None and rec.status == "failed":
            raise restore_error(rec.error)
        started = self._now()
        attempt = 0
        while True:
            attempt += 1
            await self.resume()
            try:
                result = await self._call_step(spec, args, kwargs)
                self.engine.checkpoint("step.executed", self.run_id)
                text = self._dump_step_result(spec, result)
                value = spec.output.load(text)
            except Exception as err:
                if attempt <= spec.retries and not isinstance(err, DuroError):
                    delay = spec.retry_delay_ms * 2 ** (attempt - 1)
                    await self._sleep_until(self._now() + delay)
                    continue
                await self._write(
                    StepRecord(
                        seq,
                        "step",
                        spec.name,
                        "failed",
                        started,
                        self._now(),
                        error=describe_error(err),
                        detail=dump_json({"attempts": attempt}),
                    )
                )
                raise
            await self._write(
                StepRecord(
                    seq,
                    "step",
                    spec.name,
                    "completed",
                    started,
                    self._now(),
                    result=text,
                    detail=dump_json({"attempts": attempt}) if attempt > 1 else None,
                )
            )
            return value

    async def _call_step(self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        token = _current.inside_step.set(spec.name)
        try:
            if spec.is_async:
                return await spec.fn(*args, **kwargs)
            if self.engine.inline_sync_steps:
                return spec.fn(*args, **kwargs)
            context = contextvars.copy_context()
            loop = asyncio.get_running_loop()
            while True:
                # The lease is checked again in the step's thread, just before the body: a thread
                # may start the body long after it was handed the call (every step thread busy, or
                # the process frozen in between), and the check must be as late as the body's start.
                outcome = await loop.run_in_executor(
                    self.worker.step_executor, lambda: context.run(self._call_if_owned, spec, args, kwargs)
                )
                if outcome is not _LAPSED:
                    return outcome
                await self.resume()
        finally:
            _current.inside_step.reset(token)

    def _call_if_owned(self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """In a step thread: the body, unless the worker's lease ran out since the run checked it."""
        if not self.worker.owns_runs():
            return _LAPSED
        return spec.fn(*args, **kwargs)

    @staticmethod
    def _dump_step_result(spec: StepSpec, result: Any) -> str:
        try:
            return spec.output.dump(result)
        except Exception as err:  # noqa: BLE001
            raise DuroError(
                f"result of step {spec.name!r} cannot be stored: {' '.join(str(err).split())}; "
                f"return a JSON value, a pydantic model or a dataclass, and annotate the "
                f"return type"
            ) from None

    # -- time ------------------------------------------------------------------------------------

    async def sleep(self, duration: Duration) -> None:
        """Sleep durably: the run is ``suspended`` until the time passes, across restarts."""
        ms = to_ms(duration, "sleep duration")
        seq, rec = self._take_seq("sleep", "sleep")
        if rec is not None and rec.status == "completed":
            return
        recorded: Pending | None = None
        if rec is None:
            started = self._now()
            rec = StepRecord(seq, "sleep", "sleep", "waiting", started, wake_at=started + ms)
            # The sleep's record commits while the run sleeps (it waits anyway), and the run makes
            # sure it did when it wakes. A record that does not take ends the sleep at once, with why.
            recorded = self.engine.progress.write_nowait(
                RecordStep(self.run_id, self.worker.id, rec, "suspended", rec.wake_at, started),
                on_refused=self._refused,
            )
            self.engine.events.emit(
                "step.waiting", self.run_id, started, self.workflow, seq=seq, step_kind="sleep", name="sleep"
            )
        assert rec.wake_at is not None
        self._asleep = True
        try:
            await self._sleep_until(rec.wake_at)
        except asyncio.CancelledError:
            if self.fatal is not None:
                raise self.fatal from None
            raise
        finally:
            self._asleep = False
        if recorded is not None and not recorded.took and await recorded.outcome() is not True:
            raise LostRun(self.run_id)
        await self.resume()  # a run taken over while we slept stops here: our lease ran out first
        # The sleep's record is not rewritten (see settle_sleeps): only the run goes back to running.
        # Nothing later depends on that write: lost in a crash, the replay finds the sleep over (a
        # later record exists, or its time has passed) and goes on exactly as the run did. So the run
        # goes on while it commits; a write that does not take stops the run at once.
        woke = self._now()
        self.engine.progress.write_nowait(
            RecordStep(self.run_id, self.worker.id, None, "running", None, woke), on_refused=self._refused
        )
        self.engine.events.emit(
            "step.completed", self.run_id, woke, self.workflow, seq=seq, step_kind="sleep", name="sleep"
        )

    def _refused(self, why: Any) -> None:
        """A write the run did not wait for did not take (fenced: another worker owns the run, or it
        was cancelled; or the store failed it): the run stops with why — at once if it sleeps, else
        before any more of its code runs (``resume`` and every durable call raise ``fatal``)."""
        if self.fatal is None:
            self.fatal = why if isinstance(why, BaseException) else LostRun(self.run_id)
        live = self.worker.live.get(self.run_id)
        if self._asleep and live is not None and live[1] is self:
            live[0].cancel()

    async def now(self) -> datetime:
        """The current time, recorded: a replay sees the same instant."""
        seq, rec = self._take_seq("now", "now")
        if rec is not None:
            return ms_to_datetime(int(json.loads(rec.result or "0")))  # type: ignore[return-value]
        moment = self._now()
        await self._write(StepRecord(seq, "now", "now", "completed", moment, moment, result=str(moment)))
        return ms_to_datetime(moment)  # type: ignore[return-value]

    # -- signals ---------------------------------------------------------------------------------

    async def wait_for_signal(self, name: str, timeout: Duration | None = None) -> Any:
        """Wait (``suspended``) for signal ``name``; returns its payload, or ``None`` when ``timeout``
        passes first. Signals sent before the wait are buffered and consumed in order."""
        if not isinstance(name, str) or not name or NUL in name:
            raise DuroError(
                f"wait_for_signal: the signal name must be a non-empty string, got {name!r}; {NO_NUL}"
            )
        seq, rec = self._take_seq("signal", name)
        if rec is not None and rec.status == "completed":
            return _JSON.load(rec.result)
        if rec is None:
            started = self._now()
            deadline = None if timeout is None else started + to_ms(timeout, "wait_for_signal timeout")
            rec = StepRecord(seq, "signal", name, "waiting", started, wake_at=deadline)
        waiter = self.worker.signal_waiter(self.run_id, name)
        try:
            if seq not in self._history:
                found, payload = await self._take_signal(rec)
                if found:
                    return payload
                await self._write(rec, "suspended", rec.wake_at)
            while True:
                found, payload = await self._take_signal(rec)
                if found:
                    await self.resume()
                    return payload
                if rec.wake_at is not None and self._now() >= rec.wake_at:
                    await self._write(
                        StepRecord(
                            seq,
                            "signal",
                            name,
                            "completed",
                            rec.started_at,
                            self._now(),
                            wake_at=rec.wake_at,
                            result="null",
                            detail=dump_json({"timed_out": True}),
                        ),
                        "running",
                    )
                    await self.resume()
                    return None
                await self.worker.wait_for(waiter.wait(), rec.wake_at)
                waiter.clear()
        finally:
            self.worker.drop_signal_waiter(self.run_id, name, waiter)

    async def _take_signal(self, rec: StepRecord) -> tuple[bool, Any]:
        step = StepRecord(
            rec.seq, "signal", rec.name, "waiting", rec.started_at, self._now(), wake_at=rec.wake_at
        )
        taken = await self._store_call(TakeSignal(self.run_id, self.worker.id, rec.name, step))
        if taken is None:
            return False, None
        self._recorded(taken)
        return True, _JSON.load(taken.result)

    # -- children --------------------------------------------------------------------------------

    async def child(
        self, wf: Any, inp: Any = None, *, run_id: str | None = None, concurrency: Concurrency | None = None
    ) -> Any:
        """Start a child run and wait (``blocked``) for its result; a failed, cancelled or refused child
        raises :class:`ChildWorkflowError` with the reason as its cause."""
        spec = self.engine.spec_for(wf)
        seq, rec = self._take_seq("child", spec.name)
        if rec is not None and rec.status == "completed":
            return spec.output.load(rec.result)
        if rec is not None and rec.status == "failed":
            raise restore_error(rec.error)
        if rec is None:
            child_id = run_id or f"{self.run_id}.{seq}"
            rec = StepRecord(
                seq, "child", spec.name, "waiting", self._now(), detail=dump_json({"run_id": child_id})
            )
            await self._start_child_run(spec, inp, child_id, concurrency, rec)
        child_id = json.loads(rec.detail or "{}")["run_id"]
        waiter = self.worker.done_waiter(child_id)
        try:
            while True:
                child = await self.worker.db(self.worker.store.get_run, child_id)
                if child is not None and child.status in ("completed", "failed", "cancelled"):
                    break
                await waiter.wait()
                waiter.clear()
        finally:
            self.worker.drop_done_waiter(child_id, waiter)
        if child.status == "completed":
            await self._write(
                StepRecord(
                    seq,
                    "child",
                    spec.name,
                    "completed",
                    rec.started_at,
                    self._now(),
                    result=child.output,
                    detail=rec.detail,
                ),
                "running",
            )
            await self.resume()
            return spec.output.load(child.output)
        cause = restore_error(child.error) if child.error else RunCancelled(child_id)
        err = ChildWorkflowError(
            child_id,
            spec.name,
            cause if isinstance(cause, Exception) else None,
            f"child run {child_id!r} of workflow {spec.name!r} {child.status}"
            + (f": {cause}" if str(cause) else ""),
        )
        await self._write(
            StepRecord(
                seq,
                "child",
                spec.name,
                "failed",
                rec.started_at,
                self._now(),
                error=describe_error(err),
                detail=rec.detail,
            ),
            "running",
        )
        await self.resume()
        raise err

    async def start_child(
        self, wf: Any, inp: Any = None, *, run_id: str | None = None, concurrency: Concurrency | None = None
    ) -> Any:
        """Start a child run without waiting; returns its :class:`RunHandle`."""
        spec = self.engine.spec_for(wf)
        seq, rec = self._take_seq("start_child", spec.name)
        if rec is not None and rec.status == "failed":
            raise restore_error(rec.error)
        if rec is None:
            child_id = run_id or f"{self.run_id}.{seq}"
            now = self._now()
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
            await self._start_child_run(spec, inp, child_id, concurrency, rec)
        return self.engine.handle(json.loads(rec.detail or "{}")["run_id"])

    async def _start_child_run(
        self, spec: Any, inp: Any, child_id: str, concurrency: Concurrency | None, rec: StepRecord
    ) -> None:
        try:
            await self.engine.start_run(
                spec, inp, run_id=child_id, concurrency=concurrency, parent=self.own(rec)
            )
        except Fenced:
            raise LostRun(self.run_id) from None
        except (ConcurrencyLimitError, RunIdConflictError) as refused:
            err = ChildWorkflowError(
                child_id, spec.name, refused, f"child run of workflow {spec.name!r} was refused: {refused}"
            )
            await self._write(
                StepRecord(
                    rec.seq,
                    rec.kind,
                    spec.name,
                    "failed",
                    rec.started_at,
                    self._now(),
                    error=describe_error(err),
                    detail=rec.detail,
                )
            )
            raise err from refused
        self._recorded(rec)

    # -- limits (the class form's ctx offers every durable helper) -------------------------------

    async def acquire_slot(
        self, limit: str, label: str | None = None, timeout: Duration | None = "24h"
    ) -> Any:
        return await _limits._acquire(self, limit, label, timeout)

    async def release_slot(self, slot_id: str) -> Any:
        return await _limits.release_slot(slot_id)

    async def with_limit(
        self, limit: str, fn: Any, label: str | None = None, timeout: Duration | None = "24h"
    ) -> Any:
        return await _limits.with_limit(limit, fn, label=label, timeout=timeout)

    def limit_slot(self, limit: str, label: str | None = None, timeout: Duration | None = "24h") -> Any:
        return _limits.limit_slot(limit, label=label, timeout=timeout)


def sleep(duration: Duration) -> Coroutine[Any, Any, None]:
    """Sleep durably for ``duration`` (``"10s"``, ``"2h"``, ms, timedelta); the run is ``suspended``.

    Await it: ``await sleep("1h")``. (A plain function returning the run's own coroutine: sleeps are
    the hottest durable call, and this saves a frame on every wake-up.)"""
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
