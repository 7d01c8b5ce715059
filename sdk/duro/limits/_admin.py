"""The operators' side of limits: ``engine.limits`` (list, slots, release, capacity and max-hold
overrides), what the dev server, Studio and the CLI call."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from .._clock import Clock, ms_to_datetime
from .._durations import Duration, format_ms, to_ms
from .._errors import ConfigError, DuroError
from .._text import NUL, decode_cursor, encode_cursor, foreign_cursor, refuse_nul
from ..definitions._config import LimitConfig, Workspace, check_capacity, check_max_hold
from ..rules._slots import SlotRow
from ..store import LimitState, OwnStep, ReleaseSlot, StepRecord
from ..worker._gateway import StoreGateway, store_trouble
from ._acquire import LocalSlots
from ._types import LimitInfo, LimitKey, SlotInfo, SlotRelease, SlotsPage, check_key, limit_config


def _slot_info(row: SlotRow, position: int, now: int) -> SlotInfo:
    """A slot as listed; ``position`` its place in the queue when it waits."""
    return SlotInfo(
        id=row.id,
        limit=row.limit,
        state=row.state,
        run_id=row.run_id,
        label=row.label,
        position=position if row.state == "waiting" else None,
        enqueued_at=ms_to_datetime(row.enqueued_at),
        waited=timedelta(milliseconds=now - row.enqueued_at) if row.state == "waiting" else None,
        held_since=ms_to_datetime(row.held_since),
        expires_at=ms_to_datetime(row.expires_at),
        reserved_until=ms_to_datetime(row.reserved_until),
        timeout_at=ms_to_datetime(row.timeout_at),
        key=row.key,
    )


def _slots_after(cursor: str | None) -> tuple[tuple[int, int, str] | None, int]:
    """The slot a cursor stands for (its state's rank, pos and id) and the queue positions before it."""
    if cursor is None:
        return None, 0
    (rank, pos, position), slot_id = decode_cursor(cursor, "slots", 3)
    if not 0 <= rank <= 2 or position < 0:
        raise foreign_cursor(cursor, "slots")
    return (rank, pos, slot_id), position


@dataclass(frozen=True)
class LimitStats:
    """A limit's figures over a recent window (``engine.limits.stats``): how many slots became held
    (``granted``: at once or after a wait in the queue) and the nearest-rank percentiles of their
    waits, enqueue to held, in seconds (``None`` when no slot was granted); ``expired``: slots
    ``max_hold`` took back (each one a ``release_slot`` that never happened); ``timed_out``: runs
    whose ``timeout`` passed in the queue."""

    window_s: float
    granted: int
    wait_p50_s: float | None
    wait_p90_s: float | None
    wait_p99_s: float | None
    expired: int
    timed_out: int


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


class Limits:
    """``engine.limits``: what the dev server, Studio and the CLI call."""

    def __init__(
        self,
        *,
        workspace: Workspace,
        gateway: StoreGateway,
        clock: Clock,
        local: Callable[[], LocalSlots | None],
    ) -> None:
        self._workspace = workspace
        self._gateway = gateway
        self._clock = clock
        self._local = local  # this process's waiters, while the engine is entered

    def _notify(self, rows: Iterable[SlotRow], handed: Mapping[str, StepRecord] | None = None) -> None:
        local = self._local()
        if local is not None:
            local.notify(rows, handed)

    def _local_waiters(self) -> Mapping[str, OwnStep]:
        local = self._local()
        return {} if local is None else local.local_waiters()

    async def leave_queues(self, run_ids: builtins.list[str], now: int | None = None) -> None:
        """Runs that ended (at ``now``) leave the limits' queues they wait in (slots they hold stay
        held); the hook steps they were waiting on close then, with the run's end as their status."""
        if run_ids and self._workspace.limits:
            granted = await self._gateway.call(
                self._gateway.store.slots.leave,
                self._workspace.limits,
                run_ids,
                self._clock.now_ms() if now is None else now,
            )
            self._notify(granted)

    async def leave_queues_of_cancelled(self, run_id: str) -> None:
        """A run that ended cancelled leaves the queues here, in its worker (whoever cancelled it, a
        client engine that knows no limits too): a dead waiter must not hold up the queue. When the
        delivery took it out already, nothing is left to leave."""
        try:
            await self.leave_queues([run_id])
        except Exception as err:  # noqa: BLE001 - the store out of reach: the waiter times out in the end
            store_trouble("taking a cancelled run out of the limits' queues", err)

    async def _config(self, name: str) -> LimitConfig:
        """The limit ``name`` as this engine's workspace declares it, else as the store knows it (a
        client engine without the project), else a clear error listing both."""
        if isinstance(name, str) and name in self._workspace.limits:
            return self._workspace.limits[name]
        states = await self._gateway.call(self._gateway.store.limits.states)
        stored = _declared(self._workspace, states)
        if isinstance(name, str) and name in stored:
            return stored[name]
        return limit_config(replace(self._workspace, limits=stored), name)  # its error names them all

    async def list(self) -> builtins.list[LimitInfo]:
        """Every limit declared in this engine's workspace, and every other limit the store knows
        (as the last worker to start with it declared it: what a client engine ``Engine(url)``
        without the project lists): capacity and max hold (declared, overridden, effective) and
        counts."""
        states = await self._gateway.call(self._gateway.store.limits.states)
        infos = []
        for name, config in sorted(_declared(self._workspace, states).items()):
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
                    per_key=config.per_key,
                )
            )
        return infos

    async def slots(self, name: str, key: str | None = None) -> builtins.list[SlotInfo]:
        """The limit's slots: busy (and reserved) first, then the queue in order; ``key``: of that
        key alone (a keyed limit), positions counted in its key's queue. A long queue is better
        read a page at a time (:meth:`slots_page`)."""
        await self._config(name)
        now = self._clock.now_ms()
        rows = await self._gateway.call(self._gateway.store.limits.slots, name)
        infos, position = [], 0
        for row in rows:
            if key is not None and row.key != key:
                continue
            if row.state == "waiting":
                position += 1
            infos.append(_slot_info(row, position, now))
        return infos

    async def slots_page(
        self, name: str, key: str | None = None, cursor: str | None = None, limit: int = 100
    ) -> SlotsPage:
        """A page of :meth:`slots` after ``cursor`` (``None``: from the first), and the cursor of the
        next page: a queue of 100,000 costs a page what the page holds."""
        await self._config(name)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= SlotsPage.MAX_LIMIT:
            raise DuroError(
                f"limit {limit!r} is not a page size; give a whole number from 1 to {SlotsPage.MAX_LIMIT}"
            )
        if key is not None:
            refuse_nul(key, f"limit {name!r}: the key filter")
        after, position = _slots_after(cursor)
        now = self._clock.now_ms()
        found = await self._gateway.call(self._gateway.store.limits.slots_page, name, key, after, limit + 1)
        infos = []
        for _, row in found[:limit]:
            position += row.state == "waiting"
            infos.append(_slot_info(row, position, now))
        next_cursor = None
        if len(found) > limit:
            rank, row = found[limit - 1]
            next_cursor = encode_cursor(rank, row.pos, position, row.id)
        return SlotsPage(infos, next_cursor)

    async def stats(self, name: str, window: Duration = "1h") -> LimitStats:
        """The limit's figures over the last ``window`` (a duration, by default an hour) on the
        engine's clock: grants and their waits' p50/p90/p99, expiries and timeouts. One query."""
        await self._config(name)
        window_ms = to_ms(window, "window")
        if window_ms <= 0:
            raise DuroError(f"limit {name!r}: the stats window must be longer than 0, got {window!r}")
        figures = await self._gateway.call(
            self._gateway.store.limits.stats, name, self._clock.now_ms() - window_ms
        )
        return LimitStats(
            window_s=window_ms / 1000,
            granted=figures.granted,
            wait_p50_s=_seconds(figures.wait_p50_ms),
            wait_p90_s=_seconds(figures.wait_p90_ms),
            wait_p99_s=_seconds(figures.wait_p99_ms),
            expired=figures.expired,
            timed_out=figures.timed_out,
        )

    async def queued_for(self, run_ids: Iterable[str]) -> dict[str, str]:
        """The limit whose queue each of these runs waits in (its slot waiting, or reserved for it and
        not yet confirmed), by run id; runs that wait in no queue are left out. One query."""
        ids = [run_id for run_id in run_ids if NUL not in run_id]  # no run has such an id
        if not ids:
            return {}
        return await self._gateway.call(self._gateway.store.limits.queued, ids)

    async def _release(self, slot_id: str) -> tuple[SlotRow | None, bool]:
        if NUL in slot_id:
            return None, False  # no slot has such an id (and PostgreSQL could not even be asked)
        configs: Mapping[str, LimitConfig] = self._workspace.limits
        if not configs:  # a client engine: the limits as the store knows them
            configs = _declared(self._workspace, await self._gateway.call(self._gateway.store.limits.states))
        outcome = await self._gateway.apply(
            ReleaseSlot(configs, slot_id, self._clock.now_ms(), "operator", None, self._local_waiters()),
        )
        self._notify(outcome.granted, outcome.handed)
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
        config = await self._config(name)
        value = None if capacity is None else _as_duro(check_capacity, name, capacity)
        return await self._override(config, "capacity", value)

    async def set_max_hold(self, name: str, max_hold: Duration | None) -> LimitInfo:
        """Override the limit's max hold (at most 30 days) until reset with ``None``; applies to
        slots granted from now on."""
        config = await self._config(name)
        value = None if max_hold is None else _as_duro(check_max_hold, name, max_hold)
        return await self._override(config, "max_hold", value)

    async def keys(self, name: str, limit: int = 50, search: str | None = None) -> builtins.list[LimitKey]:
        """A keyed limit's keys with anything busy, reserved or waiting, and every key with an
        override: busiest first (busy + reserved, then waiting), at most ``limit`` of them;
        ``search``: only the keys that contain it (case-sensitive)."""
        config = await self._keyed(name)
        found = await self._gateway.call(self._gateway.store.limits.keys, config, int(limit), search)
        return [LimitKey(*row) for row in found]

    async def set_key_capacity(self, name: str, key: str, capacity: int | None) -> LimitKey:
        """Override the capacity of one key of a keyed limit (1..100000; it may exceed ``per_key``,
        never the limit's capacity in effect) until reset with ``None``; survives restarts. Raising
        it grants that key's waiters at once; lowering it takes no slot back."""
        config = await self._keyed(name)
        checked = check_key(config, key)
        assert checked is not None  # a keyed limit's key is never None
        key = checked
        value = None if capacity is None else _as_duro(check_capacity, name, capacity)
        granted = await self._gateway.call(
            self._gateway.store.slots.set_key_override, config, key, value, self._clock.now_ms()
        )
        self._notify(granted)
        return LimitKey(*await self._gateway.call(self._gateway.store.limits.key, config, key))

    async def _keyed(self, name: str) -> LimitConfig:
        config = await self._config(name)
        if config.per_key is None:
            raise DuroError(
                f"limit {name!r} has no keys: declare it keyed with Limit(capacity=..., max_hold=..., "
                f"per_key=N) in duro.config.py"
            )
        return config

    async def _override(self, config: LimitConfig, field: str, value: int | None) -> LimitInfo:
        granted = await self._gateway.call(
            self._gateway.store.slots.set_override, config, field, value, self._clock.now_ms()
        )
        self._notify(granted)
        return next(info for info in await self.list() if info.name == config.name)


def _declared(workspace: Workspace, states: Mapping[str, LimitState]) -> dict[str, LimitConfig]:
    """The workspace's limits, and those the store knows the declaration of that it lacks."""
    configs = {
        name: LimitConfig(name, state.capacity, state.max_hold_ms, state.per_key)
        for name, state in states.items()
        if state.capacity is not None and state.max_hold_ms is not None
    }
    return {**configs, **workspace.limits}


def _as_duro(check: Callable[[str, Any], int], name: str, value: Any) -> int:
    try:
        return check(name, value)
    except ConfigError as err:
        raise DuroError(str(err)) from None
