"""Limits in workflow code: ``acquire_slot`` / ``release_slot`` / ``with_limit`` / ``limit_slot``.

A slot lives in the store, not in the run: another workflow may release it, and ending a
run does not release a slot it holds. A run waiting for a slot stays ``running``; its step list shows
the hook step ``Esperando hueco · <limit>``, closed when the slot is confirmed, when the wait times
out (failed), or when the run ends while it waits (cancelled or failed, as the run). Labels are data
for people (Studio, CLI); duro never writes them to logs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import NoReturn, Protocol, TypeVar

from .._clock import Clock
from .._durations import Duration, to_ms
from .._errors import DuroError, RunCancelled, SlotTimeoutError, raised_at
from .._events import EventBus
from .._hooks import EngineHooks
from .._serde import describe_error, restore_error
from .._text import NO_NUL, NUL
from .._tracing import end_slot_wait, slot_wait_span
from ..definitions._config import LimitConfig, Workspace
from ..rules._slots import SWEEP_MS, SlotRow, slot_json
from ..run import _current
from ..run._cancel import after_call, cancelled
from ..run._context import RunContext
from ..store import (
    Claimer,
    ConfirmSlot,
    GiveUpSlot,
    OwnStep,
    ReleaseSlot,
    RequestSlot,
    RunRecord,
    SlotOutcome,
    StepRecord,
)
from ..worker._gateway import StoreGateway, store_trouble
from ..worker._wakeups import QueueWaits, Wakeups
from ._types import HOOK_PREFIX, Slot, SlotRelease, check_key, check_label, limit_config

T = TypeVar("T")
# A task being cancelled by its worker (shutdown, a run lost to another worker, a stale copy) must
# not record a release: the replay elsewhere would find a call the code did not make there.
_TEARDOWN = (asyncio.CancelledError,)


class RunLimits:
    """A worker's runs' side of limits: the durable calls ``acquire`` and ``release`` (each run's
    ``ctx.acquire_slot`` / ``ctx.release_slot``, and the module functions, come here)."""

    def __init__(
        self,
        *,
        workspace: Workspace,
        local: LocalSlots,
        gateway: StoreGateway,
        events: EventBus,
        wakeups: Wakeups,
    ) -> None:
        self._workspace = workspace
        self._local = local
        self._gateway = gateway
        self._events = events
        self._wakeups = wakeups

    async def acquire(
        self, ctx: RunContext, limit: str, label: str | None, timeout: Duration | None, key: str | None = None
    ) -> Slot:
        """Take a slot of ``limit`` for the run (of ``key``'s, on a keyed limit), waiting in the
        queue up to ``timeout``."""
        config = limit_config(self._workspace, limit)
        local = self._local
        label = check_label(limit, label)
        timeout_ms = None if timeout is None else to_ms(timeout, f"acquire_slot({limit!r}) timeout")
        name = f"{HOOK_PREFIX}{limit}"
        try:
            key = check_key(config, key)
            refused = None
        except DuroError as err:
            refused = err
        seq, rec = ctx.take_seq("hook", name)
        if refused is not None and rec is None:
            raise refused
        # a request recorded stands as it was made: per_key added or removed in duro.config.py since
        # (a reload, a deploy) never fails a run that asked before
        if rec is not None and rec.status == "completed":
            return Slot(**json.loads(rec.result or "{}"))
        if rec is not None and rec.status == "failed":
            raise raised_at(restore_error(rec.error), seq)
        slot_id = f"{ctx.run_id}.{seq}"
        if rec is not None and ctx.cancel is not None and ctx.cancel.stops_waits:
            await self._leave_cancelled(ctx, config, slot_id, rec)  # replayed to a cancel: it leaves
        if rec is None:
            now = ctx.now_ms()
            rec = StepRecord(
                seq,
                "hook",
                name,
                "waiting",
                now,
                wake_at=None if timeout_ms is None else now + timeout_ms,
                detail=json.dumps(
                    {"slot_id": slot_id, "limit": limit}
                    if key is None
                    else {"slot_id": slot_id, "limit": limit, "key": key}
                ),
            )
            requested: SlotOutcome = await ctx.apply(
                RequestSlot(config, slot_id, ctx.run_id, label, rec.wake_at, now, ctx.own(rec), key)
            )
            row, rec = requested.row, requested.step or rec
            ctx.recorded(rec)
            local.changed(None if row is None else row.due_at)
            position = requested.position
        else:  # a replay: the request is in the store, in its place
            row = await self._gateway.call(self._gateway.store.slots.get, slot_id)
            position = None
        if row is not None and row.state == "busy" and rec.status == "completed":
            # granted at once: the request closed its hook step in the same transaction
            return Slot(id=row.id, limit=row.limit, label=row.label, key=row.key)
        done = StepRecord(
            seq, "hook", name, "waiting", rec.started_at, wake_at=rec.wake_at, detail=rec.detail
        )
        waiter = local.wait(slot_id, ctx.own(done))
        span, outcome = slot_wait_span(limit, position), "suspended"  # suspended: still queued, run away
        try:
            while True:
                if row is None:
                    raise DuroError(f"slot {slot_id!r} of run {ctx.run_id!r} is missing from the store")
                if row.state == "reserved":  # handed to us: take it (or, too late, back to the queue)
                    ctx.checkpoint("slot.confirming")
                    confirmed: SlotOutcome = await ctx.apply(
                        ConfirmSlot(config, slot_id, ctx.now_ms(), ctx.own(done))
                    )
                    row, done = confirmed.row, confirmed.step or done
                    local.notify(confirmed.granted)
                    local.changed(None if row is None else row.due_at)  # its max_hold, on time
                    continue
                if row.state == "busy":
                    if done.status != "completed":  # granted, its hook step not written yet: ours to write
                        done = done._replace(status="completed", ended_at=ctx.now_ms(), result=slot_json(row))
                        await ctx.write(done)
                    ctx.recorded(done)
                    self._events.publish("slot.acquired", ctx.run_id, ctx.now_ms(), ctx.workflow, limit=limit)
                    outcome = "granted"
                    await ctx.resume()
                    return Slot(id=row.id, limit=row.limit, label=row.label, key=row.key)
                if row.state not in ("waiting", "timed_out"):  # taken off the queue: the run ended meanwhile
                    outcome = "left"
                    raise DuroError(
                        f"run {ctx.run_id!r} no longer waits for a slot of limit {limit!r}: its request "
                        f"{slot_id!r} left the queue ({row.state}, {row.reason or 'no reason given'})"
                    )
                if row.state == "timed_out" or (rec.wake_at is not None and ctx.now_ms() >= rec.wake_at):
                    error = SlotTimeoutError(limit, timeout)
                    failed = rec.ended("failed", ctx.now_ms(), error=describe_error(error))
                    gave_up: SlotOutcome = await ctx.apply(
                        GiveUpSlot(config, slot_id, ctx.now_ms(), ctx.own(failed))
                    )
                    row = gave_up.row
                    if row is not None and row.state in ("reserved", "busy"):
                        continue  # the slot arrived in time after all: take it
                    ctx.recorded(failed)
                    outcome = "timed_out"
                    await ctx.resume()
                    raise raised_at(error, seq)
                try:
                    await ctx.idle(
                        self._wakeups.wait_for(waiter.wait(), rec.wake_at), "slot", slot_id, rec.wake_at, None
                    )
                except RunCancelled:
                    outcome = "cancelled"
                    local.drop(slot_id, waiter)  # no local grant here any more: it is leaving
                    await self._leave_cancelled(ctx, config, slot_id, done)
                waiter.clear()
                delivered = local.delivered(slot_id)
                if delivered is None:
                    row = await self._gateway.call(self._gateway.store.slots.get, slot_id)
                else:  # a decision of this process: the row as committed, and our step if it wrote it
                    row, done = delivered[0], delivered[1] or done
        finally:
            local.drop(slot_id, waiter)
            if span is not None:
                end_slot_wait(span, outcome)

    async def _leave_cancelled(
        self, ctx: RunContext, config: LimitConfig, slot_id: str, rec: StepRecord
    ) -> NoReturn:
        """The run was cancelled while it waited for ``slot_id``: the request leaves the queue and
        its hook step is closed ``cancelled`` in one transaction; a slot reserved or handed to it
        meanwhile goes to the next run."""
        step = rec._replace(status="cancelled", ended_at=ctx.now_ms())
        left: SlotOutcome = await ctx.apply(GiveUpSlot(config, slot_id, ctx.now_ms(), ctx.own(step), True))
        ctx.recorded(step)
        self._local.notify(left.granted)
        for row in left.granted:
            self._local.changed(row.due_at)  # a reservation's expiry, on time
        assert ctx.cancel is not None
        ctx.cancel.delivered = True
        raise cancelled(ctx.run_id)

    async def release(self, ctx: RunContext, slot_id: str) -> SlotRelease:
        """The run releases ``slot_id`` (a step of its own, idempotent)."""
        if not isinstance(slot_id, str) or not slot_id or NUL in slot_id:
            raise DuroError(f"release_slot: slot id must be a non-empty string, got {slot_id!r}; {NO_NUL}")
        seq, rec = ctx.take_seq("release", "release_slot")
        if rec is not None:
            return SlotRelease(**json.loads(rec.result or '{"released": false}'))
        now = ctx.now_ms()
        step = StepRecord(
            seq, "release", "release_slot", "completed", now, now, detail=json.dumps({"slot_id": slot_id})
        )
        local = self._local
        outcome: SlotOutcome = await ctx.apply(
            ReleaseSlot(
                self._workspace.limits,
                slot_id,
                now,
                "release",
                ctx.own(step),
                local.local_waiters(),
                local.claimer() if local.grant_locally else None,
            )
        )
        released = outcome.released
        ctx.recorded(outcome.step or step)
        if outcome.claimed:
            local.on_claimed(outcome.claimed)
        local.notify(outcome.granted, outcome.handed)
        if released:
            self._events.publish("slot.released", ctx.run_id, now, ctx.workflow, slot_id=slot_id)
        if ctx.cancel is not None and ctx.cancel.pending:
            await after_call(ctx)  # released first: what the cancel wants done
        return SlotRelease(released)

    async def with_limit(
        self,
        ctx: RunContext,
        limit: str,
        fn: Callable[[], Awaitable[T]],
        label: str | None,
        timeout: Duration | None,
        key: str | None = None,
    ) -> T:
        """Take a slot of ``limit``, await ``fn()``, and release the slot on return or raise."""
        slot = await self.acquire(ctx, limit, label, timeout, key)
        try:
            result = await fn()
        except _TEARDOWN:
            raise  # the task is being torn down (shutdown, a lost or stale run): it records nothing more
        except BaseException:
            await self.release(ctx, slot.id)
            raise
        await self.release(ctx, slot.id)
        return result

    @asynccontextmanager
    async def limit_slot(
        self, ctx: RunContext, limit: str, label: str | None, timeout: Duration | None, key: str | None = None
    ) -> AsyncIterator[Slot]:
        """A slot of ``limit`` for the body of an ``async with``, released after it."""
        slot = await self.acquire(ctx, limit, label, timeout, key)
        try:
            yield slot
        except _TEARDOWN:
            raise  # see with_limit: a torn-down task writes no release the replay would not make
        except BaseException:
            await self.release(ctx, slot.id)
            raise
        await self.release(ctx, slot.id)


def _runtime_limits(run: _current.CurrentRun) -> tuple[RunContext, RunLimits]:
    """The current run as what it is (a worker executes only ``RunContext``s), and its limits."""
    assert isinstance(run, RunContext)
    slots = run.runtime.slots
    assert isinstance(slots, RunLimits)
    return run, slots


async def acquire_slot(
    limit: str, label: str | None = None, timeout: Duration | None = "24h", key: str | None = None
) -> Slot:
    """Take a slot of ``limit``, waiting in its durable FIFO queue up to ``timeout`` (24 h by
    default; ``None`` waits for ever): then :class:`SlotTimeoutError`. The run stays ``running``
    while it waits. On a keyed limit (``Limit(per_key=N)``) ``key`` is required: at most N slots
    per key, and the slot goes to the oldest waiter whose key has room.

    ``timeout=0`` is a try-acquire: a free slot is taken at once; if every slot is busy,
    :class:`SlotTimeoutError` is raised at once, without waiting, and the request leaves no entry
    in the queue (the hook step is recorded ``failed``, so a replay raises it again)."""
    ctx, limits = _runtime_limits(_current.run_or_raise("acquire_slot"))
    return await limits.acquire(ctx, limit, label, timeout, key)


async def release_slot(slot_id: str) -> SlotRelease:
    """Give a slot back, from any workflow (a step of its own, idempotent): ``released=False`` when it
    was already free or is unknown. Outside a workflow it releases at once on the current engine."""
    if not isinstance(slot_id, str) or not slot_id or NUL in slot_id:
        raise DuroError(f"release_slot: slot id must be a non-empty string, got {slot_id!r}; {NO_NUL}")
    run = _current.current_run.get()
    if run is None or _current.inside_step.get() is not None:
        engine = _current.resolve_engine()
        return SlotRelease(await engine.limits.release_quietly(slot_id))
    ctx, limits = _runtime_limits(run)
    return await limits.release(ctx, slot_id)


async def with_limit(
    limit: str,
    fn: Callable[[], Awaitable[T]],
    label: str | None = None,
    timeout: Duration | None = "24h",
    key: str | None = None,
) -> T:
    """Take a slot of ``limit`` (of ``key``'s, on a keyed limit), await ``fn()``, and release the
    slot on return or raise."""
    ctx, limits = _runtime_limits(_current.run_or_raise("with_limit"))
    return await limits.with_limit(ctx, limit, fn, label, timeout, key)


def limit_slot(
    limit: str, label: str | None = None, timeout: Duration | None = "24h", key: str | None = None
) -> AbstractAsyncContextManager[Slot]:
    """``async with limit_slot("partner-api") as slot:`` — a slot for the body, released after it
    (``key=`` on a keyed limit)."""
    ctx, limits = _runtime_limits(_current.run_or_raise("limit_slot"))
    return limits.limit_slot(ctx, limit, label, timeout, key)


# -- a run's slot waits in this process ------------------------------------------------------------
# The runs of this process waiting in a limit's queue, and the expiry pass that keeps slots moving.
#
# A run idle on its slot request waits on an event keyed by its slot id. It is woken by a decision
# made here (a release handing it the slot: the row as committed comes with the wake-up, see
# :meth:`LocalSlots.delivered`), by another process's notice, or by the worker's poll pass. Its hook step is
# offered to releases made in this process (:meth:`LocalSlots.local_waiters`): a release that frees a slot
# for it writes the step completed in its own transaction, so the run wakes holding the slot.


class SlotHost(Protocol):
    """The worker a process's slot waiters live in (``duro.worker._worker.Worker``)."""

    def wake(self) -> None:
        """Claim now: a slot went to a run of this worker that is not in memory."""

    def claimer(self) -> Claimer | None:
        """Who takes up an evicted head a release here hands a slot to (None: nobody now, no room)."""

    def take_up(self, runs: tuple[RunRecord, ...]) -> None:
        """Execute the runs a claimer took (see ``store.Claimer``)."""


class LocalSlots(QueueWaits[SlotRow]):
    """The slot waiters of one worker, by slot id, and the loop that applies expiries on time."""

    def __init__(
        self,
        *,
        host: SlotHost,
        workspace: Workspace,
        gateway: StoreGateway,
        clock: Clock,
        wakeups: Wakeups,
        hooks: EngineHooks,
    ) -> None:
        super().__init__()
        self._workspace = workspace
        self._gateway = gateway
        self._clock = clock
        self._wakeups = wakeups
        self._hooks = hooks
        # a slot handed to (or timed out for) a run not waiting in this process's memory: it was
        # evicted, and the store has it due now (its worker's claim pass)
        self.on_absent = host.wake
        self.claimer = host.claimer  # a release here takes up the evicted heads it hands slots to
        self.on_claimed = host.take_up

    # -- waiting runs ----------------------------------------------------------------------------

    def notify_slot(self, slot_id: str, row: SlotRow | None = None, step: StepRecord | None = None) -> None:
        """Wake the runs waiting on ``slot_id``; ``row``, when given, is its state as just committed
        (they need not read it again), and ``step`` its waiter's hook step if the store wrote it."""
        if row is not None and slot_id in self._waiting_here:
            self._delivered[slot_id] = (row, step)
        if slot_id in self._waiters:
            self._waiters.notify(slot_id)
        elif row is None or row.state != "waiting":
            self.on_absent()

    def notify(self, rows: Iterable[SlotRow], handed: Mapping[str, StepRecord] | None = None) -> None:
        """Wake the local runs waiting on these slots (granted, expired...); ``handed``: the hook
        steps a release wrote for the runs it handed a slot to (``SlotOutcome.handed``)."""
        for row in rows:
            self.notify_slot(row.id, row, handed.get(row.id) if handed else None)
            self.changed(row.due_at)

    @property
    def grant_locally(self) -> bool:
        """Whether a release here hands slots straight to this process's runs (off in the harness's
        crash tests of the confirming path)."""
        return self._hooks.grant_locally

    def local_waiters(self) -> Mapping[str, OwnStep]:
        """The runs idle here with their hook steps, for a release to hand a freed slot to."""
        return self._waiting_here if self._hooks.grant_locally else {}

    def changed(self, due: int | None = None) -> None:
        """A slot became active or changed: wake the expiry loop if it sleeps with nothing to do, or
        past ``due`` (the slot's next expiry)."""
        deadline = self._deadline
        if deadline is None or (due is not None and due < deadline):
            self._changed.set()

    # -- the expiry loop -------------------------------------------------------------------------

    async def expire_loop(self) -> None:
        """Apply slot expiries at their due time (max_hold, reservations, waiters' timeouts), and a
        safety pass every 15 s while any slot is active, for anything missed (a crash, a lost wakeup)."""
        store = self._gateway.store
        while True:
            self._changed.clear()
            now = self._clock.now_ms()
            try:
                changed, granted = await self._gateway.call(store.slots.expire, self._workspace.limits, now)
                for row in changed + granted:
                    self.notify_slot(row.id)
                next_due = await self._gateway.call(store.slots.next_due, now, list(self._workspace.limits))
            except Exception as err:  # noqa: BLE001 - the store out of reach for a moment: again soon
                store_trouble("the limits pass", err)
                next_due = now + 1000
            deadline = None
            if next_due is not None or self._waiters:
                deadline = now + SWEEP_MS if next_due is None else min(next_due, now + SWEEP_MS)
            self._deadline = deadline
            await self._wakeups.wait_for(self._changed.wait(), deadline)
