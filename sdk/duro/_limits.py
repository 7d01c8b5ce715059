"""Limits at run time: ``acquire_slot`` / ``release_slot`` / ``with_limit`` / ``limit_slot`` in workflow
code, and the operators' ``engine.limits`` (list, slots, release, capacity and max-hold overrides).

A slot lives in the box (the store), not in the run: another workflow may release it, and ending a
run does not release a slot it holds. A run waiting for a slot stays ``running``; its step list shows
the hook step ``Esperando hueco · <limit>``, closed when the slot is confirmed, when the wait times
out (failed), or when the run ends while it waits (cancelled or failed, as the run). Labels are data
for people (Studio, CLI); duro never writes them to logs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from . import _current
from ._clock import ms_to_datetime
from ._config import LimitConfig, check_capacity, check_max_hold
from ._durations import Duration, format_ms, to_ms
from ._errors import ConfigError, DuroError, SlotTimeoutError
from ._serde import describe_error, restore_error
from ._slots import SlotRow
from ._text import NO_NUL, NUL, refuse_nul
from .store import ConfirmSlot, GiveUpSlot, OwnStep, ReleaseSlot, RequestSlot, SlotOutcome, StepRecord

if TYPE_CHECKING:
    from ._context import RunContext
    from ._engine import Engine

T = TypeVar("T")
# A task being cancelled by its worker (shutdown, a run lost to another worker, a stale copy) must
# not record a release: the replay elsewhere would find a call the code did not make there.
_TEARDOWN = (asyncio.CancelledError,)
HOOK_PREFIX = "Esperando hueco · "
MAX_LABEL = 200


@dataclass(frozen=True)
class Slot:
    """A slot of a limit, held by a run: ``id``, ``limit`` name and the ``label`` given at acquire."""

    id: str
    limit: str
    label: str | None = None


@dataclass(frozen=True)
class SlotRelease:
    """The outcome of ``release_slot``: ``released`` is False when the slot was already free
    (released before, taken back by ``max_hold``) or unknown."""

    released: bool


@dataclass(frozen=True)
class LimitInfo:
    """A limit for operators: declared and effective capacity and max hold, overrides, live counts."""

    name: str
    capacity: int
    effective_capacity: int
    max_hold: str
    effective_max_hold: str
    capacity_override: int | None
    max_hold_override: str | None
    busy: int
    reserved: int
    waiting: int


@dataclass(frozen=True)
class SlotInfo:
    """A slot of a limit: ``state`` waiting (with its queue ``position``), reserved or busy."""

    id: str
    limit: str
    state: str
    run_id: str | None
    label: str | None
    position: int | None
    enqueued_at: datetime
    waited: timedelta | None
    held_since: datetime | None
    expires_at: datetime | None
    reserved_until: datetime | None
    timeout_at: datetime | None


def _check_label(limit: str, label: Any) -> str | None:
    if label is None:
        return None
    if not isinstance(label, str) or len(label) > MAX_LABEL:
        raise DuroError(
            f"limit {limit!r}: label must be a string of at most {MAX_LABEL} characters, "
            f"got {type(label).__name__}" + (f" of {len(label)}" if isinstance(label, str) else "")
        )
    return refuse_nul(label, f"limit {limit!r}: the slot label")  # the label itself stays out of the message


def _slot_of(row: SlotRow) -> Slot:
    return Slot(id=row.id, limit=row.limit, label=row.label)


# -- in workflow code ----------------------------------------------------------------------------


async def _acquire(ctx: RunContext, limit: str, label: str | None, timeout: Duration | None) -> Slot:
    engine, worker = ctx.engine, ctx.worker
    config = engine.limit_config(limit)
    label = _check_label(limit, label)
    timeout_ms = None if timeout is None else to_ms(timeout, f"acquire_slot({limit!r}) timeout")
    name = f"{HOOK_PREFIX}{limit}"
    seq, rec = ctx._take_seq("hook", name)
    if rec is not None and rec.status == "completed":
        return Slot(**json.loads(rec.result or "{}"))
    if rec is not None and rec.status == "failed":
        raise restore_error(rec.error)
    slot_id = f"{ctx.run_id}.{seq}"
    if rec is None:
        now = ctx._now()
        rec = StepRecord(
            seq,
            "hook",
            name,
            "waiting",
            now,
            wake_at=None if timeout_ms is None else now + timeout_ms,
            detail=json.dumps({"slot_id": slot_id, "limit": limit}),
        )
        requested: SlotOutcome = await ctx._store_call(
            RequestSlot(config, slot_id, ctx.run_id, label, rec.wake_at, now, ctx.own(rec))
        )
        row, rec = requested.row, requested.step or rec
        ctx._recorded(rec)
        worker.limits_changed(None if row is None else row.due_at)
    else:  # a replay: the request is in the store, in its place
        row = await engine.db(engine.store.get_slot, slot_id)
    if row is not None and row.state == "busy" and rec.status == "completed":
        return _slot_of(row)  # granted at once: the request closed its hook step in the same transaction
    done = StepRecord(seq, "hook", name, "waiting", rec.started_at, wake_at=rec.wake_at, detail=rec.detail)
    waiter = worker.slot_waiter(slot_id, ctx.own(done))
    taken = False  # a release in this process handed the slot over and wrote ``done`` itself
    try:
        while True:
            if row is None:
                raise DuroError(f"slot {slot_id!r} of run {ctx.run_id!r} is missing from the store")
            if row.state == "reserved":  # handed to us: take it (or, too late, back to the queue)
                engine.checkpoint("slot.confirming", ctx.run_id)
                confirmed: SlotOutcome = await ctx._store_call(
                    ConfirmSlot(config, slot_id, ctx._now(), ctx.own(done))
                )
                row, done = confirmed.row, confirmed.step or done
                engine.limits.notify(confirmed.granted)
                continue
            if row.state == "busy":
                if done.status != "completed":  # taken for us here (a local hand-over), or not written yet
                    done = replace(
                        done,
                        status="completed",
                        ended_at=row.held_since if taken else ctx._now(),
                        result=json.dumps({"id": row.id, "limit": row.limit, "label": row.label}),
                    )
                    if not taken:
                        await ctx._write(done)
                ctx._recorded(done)
                engine.events.emit("slot.acquired", ctx.run_id, ctx._now(), ctx.workflow, limit=limit)
                await ctx.resume()
                return _slot_of(row)
            if row.state not in ("waiting", "timed_out"):  # taken off the queue: the run ended meanwhile
                raise DuroError(
                    f"run {ctx.run_id!r} no longer waits for a slot of limit {limit!r}: its request "
                    f"{slot_id!r} left the queue ({row.state}, {row.reason or 'no reason given'})"
                )
            if row.state == "timed_out" or (rec.wake_at is not None and ctx._now() >= rec.wake_at):
                error = SlotTimeoutError(limit, timeout)
                failed = StepRecord(
                    seq,
                    "hook",
                    name,
                    "failed",
                    rec.started_at,
                    ctx._now(),
                    wake_at=rec.wake_at,
                    error=describe_error(error),
                    detail=rec.detail,
                )
                gave_up: SlotOutcome = await ctx._store_call(
                    GiveUpSlot(config, slot_id, ctx._now(), ctx.own(failed))
                )
                row = gave_up.row
                if row is not None and row.state in ("reserved", "busy"):
                    continue  # the slot arrived in time after all: take it
                ctx._recorded(failed)
                await ctx.resume()
                raise error
            await worker.wait_for(waiter.wait(), rec.wake_at)
            waiter.clear()
            news = worker.slot_news(slot_id)
            taken = news is not None and news.state == "busy"  # only a local hand-over makes ours busy
            row = news if news is not None else await engine.db(engine.store.get_slot, slot_id)
    finally:
        worker.drop_slot_waiter(slot_id, waiter)


async def acquire_slot(limit: str, label: str | None = None, timeout: Duration | None = "24h") -> Slot:
    """Take a slot of ``limit``, waiting in its durable FIFO queue up to ``timeout`` (24 h by
    default): then :class:`SlotTimeoutError`. The run stays ``running`` while it waits."""
    return await _acquire(_current.run_or_raise("acquire_slot"), limit, label, timeout)


async def release_slot(slot_id: str) -> SlotRelease:
    """Give a slot back, from any workflow (a step of its own, idempotent): ``released=False`` when it
    was already free or is unknown. Outside a workflow it releases at once on the current engine."""
    if not isinstance(slot_id, str) or not slot_id or NUL in slot_id:
        raise DuroError(f"release_slot: slot id must be a non-empty string, got {slot_id!r}; {NO_NUL}")
    ctx = _current.current_run.get()
    if ctx is None or _current.inside_step.get() is not None:
        engine = _current.resolve_engine()
        return SlotRelease(await engine.limits.release_quietly(slot_id))
    seq, rec = ctx._take_seq("release", "release_slot")
    if rec is not None:
        return SlotRelease(**json.loads(rec.result or '{"released": false}'))
    now = ctx._now()
    step = StepRecord(
        seq, "release", "release_slot", "completed", now, now, detail=json.dumps({"slot_id": slot_id})
    )
    engine = ctx.engine
    outcome: SlotOutcome = await ctx._store_call(
        ReleaseSlot(engine.limit_configs(), slot_id, now, "release", ctx.own(step), engine.limits.hand_over())
    )
    released = outcome.released
    ctx._recorded(outcome.step or step)
    engine.limits.notify(outcome.granted)
    if released:
        engine.events.emit("slot.released", ctx.run_id, now, ctx.workflow, slot_id=slot_id)
    return SlotRelease(released)


async def with_limit(
    limit: str, fn: Callable[[], Awaitable[T]], label: str | None = None, timeout: Duration | None = "24h"
) -> T:
    """Take a slot of ``limit``, await ``fn()``, and release the slot on return or raise."""
    ctx = _current.run_or_raise("with_limit")
    slot = await _acquire(ctx, limit, label, timeout)
    try:
        result = await fn()
    except _TEARDOWN:
        raise  # the task is being torn down (shutdown, a lost or stale run): it records nothing more
    except BaseException:
        await release_slot(slot.id)
        raise
    await release_slot(slot.id)
    return result


@asynccontextmanager
async def limit_slot(
    limit: str, label: str | None = None, timeout: Duration | None = "24h"
) -> AsyncIterator[Slot]:
    """``async with limit_slot("partner-api") as slot:`` — a slot for the body, released after it."""
    ctx = _current.run_or_raise("limit_slot")
    slot = await _acquire(ctx, limit, label, timeout)
    try:
        yield slot
    except _TEARDOWN:
        raise  # see with_limit: a torn-down task writes no release the replay would not make
    except BaseException:
        await release_slot(slot.id)
        raise
    await release_slot(slot.id)


# -- operators -----------------------------------------------------------------------------------


class Limits:
    """``engine.limits``: what the dev server, Studio and the CLI call."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def notify(self, rows: Iterable[SlotRow]) -> None:
        """Wake the local runs waiting on these slots (granted, expired...)."""
        worker = self._engine.worker
        if worker is not None:
            for row in rows:
                worker.notify_slot(row.id, row)
                worker.limits_changed(row.due_at)

    def hand_over(self) -> Mapping[str, OwnStep]:
        """The runs parked in this process on a slot request, with their hook steps: a release hands
        a freed slot straight to one of them (see :class:`ReleaseSlot`)."""
        worker = self._engine.worker
        if worker is None or not self._engine.hand_over_locally:
            return {}
        return worker.slot_takers

    async def list(self) -> list[LimitInfo]:
        engine = self._engine
        states = await engine.db(engine.store.limit_states)
        infos = []
        for name, config in sorted(engine.limit_configs().items()):
            state = states.get(name)
            capacity_override = state.capacity_override if state else None
            hold_override = state.max_hold_override_ms if state else None
            infos.append(
                LimitInfo(
                    name=name,
                    capacity=config.capacity,
                    effective_capacity=capacity_override or config.capacity,
                    max_hold=format_ms(config.max_hold_ms),
                    effective_max_hold=format_ms(hold_override or config.max_hold_ms),
                    capacity_override=capacity_override,
                    max_hold_override=None if hold_override is None else format_ms(hold_override),
                    busy=state.busy if state else 0,
                    reserved=state.reserved if state else 0,
                    waiting=state.waiting if state else 0,
                )
            )
        return infos

    async def slots(self, name: str) -> list[SlotInfo]:
        """The limit's slots: busy (and reserved) first, then the queue in order."""
        engine = self._engine
        engine.limit_config(name)
        now = engine.clock.now_ms()
        rows = await engine.db(engine.store.limit_slots, name)
        infos, position = [], 0
        for row in rows:
            if row.state == "waiting":
                position += 1
            infos.append(
                SlotInfo(
                    id=row.id,
                    limit=row.limit,
                    state=row.state,
                    run_id=row.run_id,
                    label=row.label,
                    position=position if row.state == "waiting" else None,
                    enqueued_at=ms_to_datetime(row.enqueued_at),  # type: ignore[arg-type]
                    waited=timedelta(milliseconds=now - row.enqueued_at) if row.state == "waiting" else None,
                    held_since=ms_to_datetime(row.held_since),
                    expires_at=ms_to_datetime(row.expires_at),
                    reserved_until=ms_to_datetime(row.reserved_until),
                    timeout_at=ms_to_datetime(row.timeout_at),
                )
            )
        return infos

    async def _release(self, slot_id: str) -> tuple[SlotRow | None, bool]:
        engine = self._engine
        if NUL in slot_id:
            return None, False  # no slot has such an id (and PostgreSQL could not even be asked)
        outcome = await engine.db(
            engine.store.apply,
            ReleaseSlot(
                engine.limit_configs(), slot_id, engine.clock.now_ms(), "operator", None, self.hand_over()
            ),
        )
        self.notify(outcome.granted)
        return outcome.row, outcome.released

    async def release_quietly(self, slot_id: str) -> bool:
        """``release_slot`` outside a run: an unknown id is simply not released."""
        return (await self._release(slot_id))[1]

    async def release(self, slot_id: str) -> SlotRelease:
        """An operator's release: frees a busy slot, or a reserved one (its run goes back to the
        queue as if the reservation had lapsed: no timeout). An unknown id is an error."""
        row, released = await self._release(slot_id)
        if row is None:
            raise DuroError(
                f"slot {slot_id!r} does not exist; list a limit's slots with engine.limits.slots(name)"
            )
        return SlotRelease(released)

    async def set_capacity(self, name: str, capacity: int | None) -> LimitInfo:
        """Override the limit's capacity (1..100000) until reset with ``None``; survives restarts.
        Raising it hands slots to waiting runs at once; lowering it takes no slot back."""
        config = self._engine.limit_config(name)
        value = None if capacity is None else _as_duro(check_capacity, name, capacity)
        return await self._override(config, "capacity", value)

    async def set_max_hold(self, name: str, max_hold: Duration | None) -> LimitInfo:
        """Override the limit's max hold (at most 30 days) until reset with ``None``; applies to
        slots granted from now on."""
        config = self._engine.limit_config(name)
        value = None if max_hold is None else _as_duro(check_max_hold, name, max_hold)
        return await self._override(config, "max_hold", value)

    async def _override(self, config: LimitConfig, field: str, value: int | None) -> LimitInfo:
        engine = self._engine
        granted = await engine.db(
            engine.store.set_limit_override, config, field, value, engine.clock.now_ms()
        )
        self.notify(granted)
        return next(info for info in await self.list() if info.name == config.name)


def _as_duro(check: Callable[[str, Any], int], name: str, value: Any) -> int:
    try:
        return check(name, value)
    except ConfigError as err:
        raise DuroError(str(err)) from None
