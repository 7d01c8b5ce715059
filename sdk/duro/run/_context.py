"""The run being executed, and the durable helpers workflow code calls.

Every durable call takes the run's next sequence number (:mod:`._replay`): a call the run made before
returns (or raises) what was recorded; a new one does its work and records the outcome before
returning. A run reaches everything else through its :class:`Runtime` (built once per worker): the
store gateway, the clock, the lease, the wake-ups, the registry and the start path, never the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from .._clock import ms_to_datetime
from .._durations import Duration, to_ms
from .._errors import (
    DuroError,
    NonDeterminismError,
    RateLimited,
    raise_user_exit,
    raised_at,
    retried,
    user_exit,
)
from .._events import STEP_EVENTS
from .._serde import Codec, describe_error, dump_json, restore_error
from .._states import RunState, StepKind
from .._tracing import active as tracing
from .._tracing import step_outcome, step_span
from ..definitions._definitions import Concurrency, StepSpec
from ..rules._eviction import IdleWait
from ..store import Command, Fenced, OwnStep, RecordStep, RunRecord, StepRecord
from ..worker._gateway import Pending
from . import _cancel, _children, _current, _patches, _signalling
from ._runtime import LostRun, Runtime, SlotCalls, StoreFailed, store_failed

T = TypeVar("T")
_JSON = Codec(None)
_LAPSED = object()
_tuple = tuple.__new__  # a record built without its named tuple's constructor frame (all fields given)
# a retry's delay at least this long is recorded (a waiting step), so that the run may leave memory
# while it waits; a shorter one stays in memory, where it costs less than the write
RECORDED_RETRY_MS = 1000


class RunContext(SlotCalls):
    """One run's execution state. The class form receives it as ``ctx`` (with the limits' calls)."""

    def __init__(self, runtime: Runtime, run: RunRecord) -> None:
        self.runtime = runtime
        self.run_id = run.id
        self.workflow = run.workflow
        self.record = run
        self.owner = runtime.worker_id
        self.history = History(run.id)
        # what ends the run whatever its code does next: a replay that diverged, or a write of the
        # run that did not take while it slept (another worker owns it: LostRun; the store failed)
        self.fatal: BaseException | None = None
        self._asleep = False
        self.idle_wait: IdleWait | None = None  # what the run waits for while it waits (see idle)
        # a run a dead worker left, until its first recorded call: at a wait, see duro.worker._recovery
        self.suspect_waits: Callable[[], Awaitable[None]] | None = None
        self.unsettled: Pending | None = None  # its sleep's record, not awaited (see sleep)
        self.cancel_reason: str | None = None
        self.cancel: _cancel.Cancel | None = None  # a cancel to deliver into its code (see _cancel)
        self.ended: RunRecord | None = None  # the run as its end left it, once written here
        self.patches: dict[str, bool] = {}  # each patch's answer in this run (see _patches)
        self.task: asyncio.Task[None] | None = None  # the task executing the run (set by its worker)
        self.now_ms = runtime.clock.now_ms  # the engine's clock, read often: bound once
        self._now = self.now_ms
        self._sleep_until = runtime.clock.sleep_until
        self._monotonic = runtime.clock.monotonic_ms
        self._own_lease = runtime.lease.lease  # read at every resume (owns_runs, written out)
        self._residency = runtime.residency
        self._gateway = runtime.gateway  # its .progress is replaced on abandon: read it at each write
        self._emit = runtime.events.publish

    def load_history(self, history: list[StepRecord]) -> None:
        self.history = History(self.run_id, history)
        if self.cancel is None and _cancel.delivers(history):
            self.cancel = _cancel.Cancel()  # its replay raises RunCancelled where it was delivered

    # -- what every durable call uses ---------------------------------------------------------

    def take_seq(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]:
        """The call's sequence number and its record, if the run made it before (see History.take)."""
        if self.fatal is not None:
            raise self.fatal
        try:
            seq, rec = self.history.take(kind, name)
        except NonDeterminismError as err:
            self.fatal = err  # fails the run even if the workflow code catches it
            raise
        return (seq, rec) if self.cancel is None else _cancel.at_call(self, seq, kind, name, rec)

    async def write(
        self, step: StepRecord, run_status: RunState | None = None, wake_at: int | None = None
    ) -> None:
        """Record ``step`` (and the run's status and timer), through the group commit."""
        if not await self._progress(
            RecordStep(self.run_id, self.owner, step, run_status, wake_at, self._now())
        ):
            raise LostRun(self.run_id)
        self.recorded(step)

    def call_id(self, seq: int) -> str:
        """The id of the call at ``seq`` of this attempt of the run, for what it asks of others (a
        rate's grant): an attempt after a retry asks anew, never under an earlier attempt's id."""
        attempt = self.record.attempt
        return f"{self.run_id}.{seq}" if attempt == 1 else f"{self.run_id}.{seq}~{attempt}"

    def own(self, step: StepRecord) -> OwnStep:
        """``step`` as a step of this run, to be written with a decision (fenced on our ownership)."""
        return OwnStep(self.run_id, self.owner, step)

    async def apply(self, command: Command) -> Any:
        """A command that writes this run's step, through the group commit (where the store batches
        its type, it shares one transaction with the other runs' writes of this loop turn; otherwise
        it is made alone). A fenced write means the run is not ours."""
        try:
            return await self._progress(command)
        except Fenced:
            raise LostRun(self.run_id) from None

    async def decide(self, fn: Callable[..., T], *args: Any) -> T:
        """A store decision that writes this run's step in its transaction (a rate's request, say),
        made off the event loop: fenced, the run is not ours (``LostRun``); a store failure stops
        the run as :meth:`_progress` does."""
        try:
            return await self._gateway.call(fn, *args)
        except Fenced:
            raise LostRun(self.run_id) from None
        except Exception as err:
            if not store_failed(err):
                raise
            self.fatal = StoreFailed(self.run_id)
            raise self.fatal from err

    async def _progress(self, command: Command) -> Any:
        """A write of this run through the group commit. One the store failed (disk full, the
        database gone) stops the run: ``StoreFailed``, and its worker hands it back (see RunEnds)."""
        try:
            return await self._gateway.progress.write(command)
        except Exception as err:
            if not store_failed(err):
                raise
            self.fatal = StoreFailed(self.run_id)
            raise self.fatal from err

    def recorded(self, step: StepRecord) -> None:
        """Announce a step written (by this run's own write, or inside another decision: a slot
        request, a release...)."""
        self._emit(
            STEP_EVENTS[step.status],
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
        good_until = self._own_lease.good_until
        if good_until is None or self._monotonic() >= good_until:
            await self.runtime.lease.confirm()
            if self.fatal is not None:
                raise self.fatal

    async def idle(
        self, wake: Awaitable[T], kind: str, key: str | None, due_at: int | None, record: StepRecord | None
    ) -> T:
        """Wait for ``wake`` idle: the run's wait is written and checked, and nothing but ``wake``
        moves it on, so its worker may evict it here (see ``duro.rules._eviction``) and replay it when
        the wait ends. ``kind``, ``key`` and ``due_at`` say what ends it (see ``store.Waiting``).
        A cancel ends the wait with ``RunCancelled``, ``record`` (the wait's) closed ``cancelled``."""
        if self.cancel is not None and self.cancel.stops_waits:  # it came as the wait began
            await _cancel.before_wait(self, record, wake)
        if self.suspect_waits is not None and (due_at is None or due_at > self._now()):
            await self.suspect_waits()  # a wait whose time is over leads straight on: still suspect
        self.idle_wait = IdleWait(self.run_id, self._monotonic(), kind, due_at, key)
        residency = self._residency
        residency.went_idle(self)
        try:
            return await wake
        except asyncio.CancelledError:
            if not _cancel.interrupted(self):
                raise
        finally:
            self.idle_wait = None
            residency.woke(self)
        await _cancel.at_wait(self, record)

    def checkpoint(self, point: str) -> None:
        """A named point of the run's work, for the harness (it may crash the engine here)."""
        hooks = self.runtime.hooks
        if hooks.checkpoints:  # only the harness sets any: no call on a run's path otherwise
            hooks.checkpoint(point, self.run_id)

    # -- steps -----------------------------------------------------------------------------------

    async def run_step(self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            if kwargs or len(args) != spec.arity:
                spec.signature.bind(*args, **kwargs)
        except TypeError as err:
            raise DuroError(
                f"step {spec.name!r} called with wrong arguments ({err}); its signature is "
                f"{spec.name}{spec.signature}"
            ) from None
        seq, rec = self.take_seq("step", spec.name)
        if rec is not None and rec.status == "completed":
            return spec.output.load(rec.result)
        if rec is not None and rec.status == "failed":
            raise raised_at(restore_error(rec.error), seq)
        started = self._now()
        attempt = tries = 0  # attempts counted against retries; tries: every attempt (see RateLimited)
        if rec is not None and rec.status == "waiting":
            detail = json.loads(rec.detail or "{}")
            started, attempt = rec.started_at, int(detail.get("attempts", 0))
            tries = int(detail.get("tries", attempt))
            if rec.wake_at is not None:
                await self._retry_wait(rec)  # a retry's delay, recorded before the run left memory
        while True:
            attempt += 1
            tries += 1
            await self.resume()
            try:
                if spec.rate is not None:  # each attempt takes a grant first (see duro.rates)
                    await self._step_grant(spec, seq, started, attempt, tries)
                result = await (
                    self._traced_step(spec, args, kwargs, attempt)
                    if tracing()
                    else self._call_step(spec, args, kwargs)
                )
                self.checkpoint("step.executed")
                text = spec.dump_result(result)
                value = spec.output.load(text)
            except Exception as err:
                if isinstance(err, RateLimited) and await self._rate_limited(
                    spec, seq, started, err, attempt, tries
                ):
                    attempt -= 1  # the pause's retry spends none of the step's retries
                    continue
                if attempt <= spec.retries and retried(err):
                    delay = spec.retry_delay_ms * 2 ** (attempt - 1)
                    if delay < RECORDED_RETRY_MS or self.cancel is not None:  # (cancelled: grace bounds it)
                        await self._sleep_until(self._now() + delay)
                        continue
                    await self._wait_to_retry(
                        spec, seq, started, self._now() + delay, _attempts(attempt, tries)
                    )
                    continue
                await self.write(
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
                if self.cancel is not None and self.cancel.pending:
                    await _cancel.after_call(self)
                raised_at(err, seq)
                raise
            await self.write(
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
            if self.cancel is not None and self.cancel.pending:  # it came while the body ran
                await _cancel.after_call(self)
            return value

    async def _step_grant(self, spec: StepSpec, seq: int, started: int, attempt: int, tries: int) -> None:
        """A grant of the step's rate for this attempt: while it waits, the step is recorded
        ``waiting`` with the attempts made so far."""
        assert spec.rate is not None
        waiting = StepRecord(
            seq,
            "step",
            spec.name,
            "waiting",
            started,
            detail=dump_json(_attempts(attempt - 1, tries - 1, spec.rate)),
        )
        await self.runtime.rates.for_step(self, spec.rate, f"{self.call_id(seq)}.{tries}", waiting)

    async def _rate_limited(
        self, spec: StepSpec, seq: int, started: int, err: RateLimited, attempt: int, tries: int
    ) -> bool:
        """The step said the downstream refused for now: the rate (or its key) is paused for
        everyone until ``retry_after`` has passed, durably, and the step waits as long, recorded
        ``waiting`` (the run may leave memory), before its next attempt. ``False``: the pause was
        refused (its reason noted on ``err``), and the step fails."""
        try:
            until = await self.runtime.rates.pause_for(self, err)
        except DuroError as refused:  # an unknown rate, a bad retry_after: the step fails with it
            err.add_note(str(refused))
            return False
        await self._wait_to_retry(spec, seq, started, until, _attempts(attempt - 1, tries))
        return True

    async def _wait_to_retry(
        self, spec: StepSpec, seq: int, started: int, due: int, attempts: dict[str, Any]
    ) -> None:
        """The step waits until ``due`` before its next attempt: recorded ``waiting`` with the
        attempts made so far (``suspended``), then :meth:`_retry_wait`."""
        waiting = StepRecord(
            seq, "step", spec.name, "waiting", started, wake_at=due, detail=dump_json(attempts)
        )
        await self.write(waiting, "suspended", due)
        await self._retry_wait(waiting)

    async def _retry_wait(self, waiting: StepRecord) -> None:
        """A retry's delay, recorded as the step ``waiting`` until its time with the attempts made
        so far (``suspended``): the run may leave memory meanwhile and comes back to the next attempt."""
        assert waiting.wake_at is not None
        await self.idle(self._sleep_until(waiting.wake_at), "sleep", None, waiting.wake_at, waiting)
        if not await self._progress(RecordStep(self.run_id, self.owner, None, "running", None, self._now())):
            raise LostRun(self.run_id)

    async def _traced_step(
        self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any], attempt: int
    ) -> Any:
        """``_call_step`` in a span of its own (duro._tracing)."""
        with step_span(spec.name, attempt) as span:
            try:
                result = await self._call_step(spec, args, kwargs)
            except Exception as err:
                retrying = attempt <= spec.retries and retried(err)
                step_outcome(span, "retrying" if retrying else "failed", err)
                raise
            step_outcome(span, "completed")
            return result

    async def _call_step(self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The step's body; a ``BaseException`` it raises that is not duro's own is its failure
        (``UserExitError``: retried like any error), never its worker's exit."""
        try:  # no wrapper coroutine: one frame less at every step
            return await self._call_body(spec, args, kwargs)
        except BaseException as err:
            raise_user_exit(err, f"step {spec.name!r}")

    async def _call_body(self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        token = _current.inside_step.set(spec.name)
        try:
            if spec.is_async:
                hooks = self.runtime.hooks
                if hooks.executing is None:  # nobody lists the steps executing (the harness may)
                    return await spec.fn(*args, **kwargs)
                with hooks.executing_step(self.run_id, spec.name):
                    return await spec.fn(*args, **kwargs)
            if self.runtime.hooks.inline_sync_steps:
                return spec.fn(*args, **kwargs)
            context = contextvars.copy_context()
            loop = asyncio.get_running_loop()
            while True:
                # The lease is checked again in the step's thread, just before the body: a thread
                # may start the body long after it was handed the call (every step thread busy, or
                # the process frozen in between), and the check must be as late as the body's start.
                outcome = await loop.run_in_executor(
                    self.runtime.step_executor, lambda: context.run(self._call_if_owned, spec, args, kwargs)
                )
                if outcome is not _LAPSED:
                    return outcome
                await self.resume()
        finally:
            _current.inside_step.reset(token)

    def _call_if_owned(self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """In a step thread: the body, unless the worker's lease ran out since the run checked it,
        or the run was lost meanwhile. Both are checked: a worker that finds itself taken over drops
        its runs (each one's ``fatal`` set) and then renews its lease by joining again, so a thread
        that reaches this point only after that sees a good lease, and must see the lost run too."""
        if self.fatal is not None or not self.runtime.lease.owns_runs():
            return _LAPSED
        try:
            return spec.fn(*args, **kwargs)
        except BaseException as err:  # converted here: a GeneratorExit must not reach the loop as one
            raise user_exit(err, f"step {spec.name!r}") from None

    # -- time ------------------------------------------------------------------------------------

    async def sleep(self, duration: Duration) -> None:
        """Sleep durably: the run is ``suspended`` until the time passes, across restarts."""
        ms = to_ms(duration, "sleep duration")
        seq, rec = self.take_seq("sleep", "sleep")
        if rec is not None and rec.status == "completed":
            return
        residency = self._residency
        recorded: Pending | None = None
        if rec is None:
            started = self._now()
            # the records built as tuples (a named tuple's own constructor is a Python frame)
            rec = _tuple(
                StepRecord, (seq, "sleep", "sleep", "waiting", started, None, started + ms, None, None, None)
            )
            # The sleep's record commits while the run sleeps (it waits anyway), and the run makes
            # sure it did when it wakes. A record that does not take ends the sleep at once, with why.
            recorded = self._gateway.progress.write_nowait(
                _tuple(RecordStep, (self.run_id, self.owner, rec, "suspended", rec.wake_at, started)),
                self.refused,
            )
            self._emit(
                "step.waiting", self.run_id, started, self.workflow, seq=seq, step_kind="sleep", name="sleep"
            )
            if residency.leaves_at_once(started + ms):
                # It leaves memory at once: its record goes in first, and until then the run counts as
                # executing, so what a worker claims stays bounded while its commits lag
                with contextlib.suppress(Exception):  # a failure is the run's fatal (see refused)
                    await recorded.outcome()
                if not recorded.took:
                    raise self.fatal or LostRun(self.run_id)
                recorded = None  # in
        assert rec.wake_at is not None
        if self.cancel is not None and self.cancel.stops_waits:  # it came while the record went in
            await _cancel.before_wait(self, rec, None)
        if self.suspect_waits is not None and rec.wake_at > self._now():
            await self.suspect_waits()  # a sleep already over leads straight on: still suspect
        self._asleep = True
        self.unsettled = recorded
        self.idle_wait = _tuple(
            IdleWait, (self.run_id, self._monotonic(), "sleep", rec.wake_at, None)
        )  # see idle
        residency.went_idle(self)
        try:
            await self._sleep_until(rec.wake_at)
        except asyncio.CancelledError:
            if self.fatal is not None:
                raise self.fatal from None
            if not _cancel.interrupted(self):
                raise
        finally:
            self.idle_wait = None
            residency.woke(self)
            self._asleep = False
            self.unsettled = None
        if self.cancel is not None and self.cancel.interrupting:
            await _cancel.at_wait(self, rec)
        if recorded is not None and not recorded.took and await recorded.outcome() is not True:
            raise LostRun(self.run_id)
        good_until = self._own_lease.good_until  # resume(), written out: every sleep asks
        if self.fatal is not None or good_until is None or self._monotonic() >= good_until:
            await self.resume()  # a run taken over while we slept stops here: our lease ran out first
        # Only the run goes back to running (see settle_sleeps), not awaited: lost in a crash, the
        # replay finds the sleep over and goes on as the run did; a write that does not take stops it.
        woke = self._now()
        self._gateway.progress.write_untracked(
            _tuple(RecordStep, (self.run_id, self.owner, None, "running", None, woke)), self.refused
        )
        self._emit(
            "step.completed", self.run_id, woke, self.workflow, seq=seq, step_kind="sleep", name="sleep"
        )

    def refused(self, why: Any) -> None:
        """A write the run did not wait for did not take (fenced: another worker owns the run, or it
        was cancelled; or the store failed it): the run stops with why — at once if it sleeps, else
        before any more of its code runs (``resume`` and every durable call raise ``fatal``)."""
        if self.fatal is None and isinstance(why, Exception) and store_failed(why):
            self.fatal = StoreFailed(self.run_id)
        elif self.fatal is None:
            self.fatal = why if isinstance(why, BaseException) else LostRun(self.run_id)
        if self._asleep and self.task is not None:
            self.task.cancel()

    async def now(self) -> datetime:
        """The current time, recorded: a replay sees the same instant."""
        seq, rec = self.take_seq("now", "now")
        if rec is not None:
            return ms_to_datetime(int(json.loads(rec.result or "0")))
        moment = self._now()
        await self.write(StepRecord(seq, "now", "now", "completed", moment, moment, result=str(moment)))
        return ms_to_datetime(moment)

    async def patched(self, change_id: str) -> bool:
        """See ``duro.patched``: whether this run takes the code behind patch ``change_id``."""
        return await _patches.patched(self, change_id)

    async def deprecate_patch(self, change_id: str) -> None:
        await _patches.deprecate_patch(self, change_id)

    # -- signals ---------------------------------------------------------------------------------

    async def wait_for_signal(self, name: str, timeout: Duration | None = None) -> Any:
        """Wait (``suspended``) for signal ``name``; returns its payload, or ``None`` when ``timeout``
        passes first. Signals sent before the wait are buffered and consumed in order."""
        return await _signalling.wait_for_signal(self, name, timeout)

    async def send_signal(self, run_id: str, name: str, payload: Any = None) -> None:
        """See :func:`duro.send_signal`: recorded, so a replay sends nothing again."""
        await _signalling.send_signal(self, run_id, name, payload)

    # -- children (see _children) ------------------------------------------------------------

    async def child(
        self, wf: Any, inp: Any = None, *, run_id: str | None = None, concurrency: Concurrency | None = None
    ) -> Any:
        """Start a child run and wait (``blocked``) for its result; a failed, cancelled or refused child
        raises :class:`ChildWorkflowError` with the reason as its cause."""
        return await _children.child(self, wf, inp, run_id, concurrency)

    async def start_child(
        self, wf: Any, inp: Any = None, *, run_id: str | None = None, concurrency: Concurrency | None = None
    ) -> Any:
        """Start a child run without waiting; returns its :class:`RunHandle`."""
        return await _children.start_child(self, wf, inp, run_id, concurrency)


def _attempts(attempts: int, tries: int, rate: str | None = None) -> dict[str, Any]:
    """A step's record of its attempts: ``tries`` too when a pause's retry made it differ, and the
    rate it waits for a grant of."""
    detail: dict[str, Any] = {"attempts": attempts}
    if tries != attempts:
        detail["tries"] = tries
    if rate is not None:
        detail["rate"] = rate
    return detail


# -- the history -----------------------------------------------------------------------------------
# Replay: a run's recorded durable calls, and the sequence number each new call takes.
#
# Every durable call takes the run's next sequence number. If the history holds a record at that
# number, the call returns (or raises) what was recorded, after checking the record is of the same
# kind and name; otherwise :class:`NonDeterminismError`. A run dropped from memory comes back by
# replaying its history from the store: nothing but this object is needed to put it where it was.


class History:
    """The recorded calls of one run by sequence number, and the next number to take."""

    __slots__ = ("run_id", "_records", "_next")

    def __init__(self, run_id: str, records: Iterable[StepRecord] = ()) -> None:
        self.run_id = run_id
        self._records = {rec.seq: rec for rec in records}
        self._next = 0

    def __len__(self) -> int:
        """How many calls are recorded (replayed, when the run is loaded from the store)."""
        return len(self._records)

    def take(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]:
        """The next sequence number, and its record if the run made this call before. A record of
        another call raises :class:`NonDeterminismError` (the code changed under a recorded run)."""
        seq = self._next
        self._next += 1
        rec = self._records.get(seq)
        if rec is not None and (rec.kind, rec.name) != (kind, name):
            raise NonDeterminismError(self.run_id, seq, f"{rec.kind} {rec.name!r}", f"{kind} {name!r}")
        return seq, rec

    @property
    def next_seq(self) -> int:
        """The sequence number the next durable call takes (how many calls were made so far)."""
        return self._next

    def peek(self) -> StepRecord | None:
        """The record at the next sequence number, without taking it (a patch marker's choice)."""
        return self._records.get(self._next)

    def recorded(self, seq: int) -> bool:
        """Whether the replay found a record at ``seq`` (a live run never looks back at a call it passed)."""
        return seq in self._records
