"""The runs of this process waiting in a limit's queue, and the expiry pass that keeps slots moving.

A run parked on its slot request waits on an event keyed by its slot id. It is woken by a decision
made here (a release handing it the slot: the row as committed comes with the wake-up, see
:meth:`LocalSlots.delivered`), by another process's notice, or by the worker's poll pass. Its hook step is
offered to releases made in this process (:meth:`LocalSlots.hand_over`): a release that frees a slot
for it writes the step completed in its own transaction, so the run wakes holding the slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Protocol

from .._clock import Clock
from .._hooks import EngineHooks
from ..definitions._config import Workspace
from ..rules._slots import SWEEP_MS, SlotRow
from ..store import Adopter, OwnStep, RunRecord, StepRecord
from ..worker._gateway import StoreGateway, store_trouble
from ..worker._wakeups import Waiters, Wakeups


class SlotHost(Protocol):
    """The worker a process's slot waiters live in (``duro.worker._worker.Worker``)."""

    def wake(self) -> None:
        """Claim now: a slot went to a run of this worker that is not in memory."""

    def adopter(self) -> Adopter | None:
        """Who takes up an unloaded head a release here hands a slot to (None: nobody now, no room)."""

    def take_up(self, runs: tuple[RunRecord, ...]) -> None:
        """Execute the runs an adopter took (see ``store.Adopter``)."""


class LocalSlots:
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
        self._workspace = workspace
        self._gateway = gateway
        self._clock = clock
        self._wakeups = wakeups
        self._hooks = hooks
        self._waiters: Waiters[str] = Waiters()
        self._takers: dict[str, OwnStep] = {}  # the waiters' hook steps, by slot id
        # rows delivered with a wake-up, with the hook step a local hand-over wrote
        self._delivered: dict[str, tuple[SlotRow, StepRecord | None]] = {}
        self._changed = asyncio.Event()
        self._deadline: int | None = None  # when the expiry loop wakes next (None: it sleeps idle)
        # a slot handed to (or timed out for) a run not waiting in this process's memory: it was
        # unloaded, and the store has it due now (its worker's claim pass)
        self.on_absent = host.wake
        self.adopter = host.adopter  # a release here takes up the unloaded heads it hands slots to
        self.on_adopted = host.take_up

    # -- waiting runs ----------------------------------------------------------------------------

    def wait(self, slot_id: str, taker: OwnStep | None = None) -> asyncio.Event:
        """Park a run on its slot request; ``taker``, its hook step, lets a release made in this
        process hand the slot over at once (see :class:`duro.store.ReleaseSlot`)."""
        event = self._waiters.add(slot_id)
        if taker is not None:
            self._takers[slot_id] = taker
        self.changed()  # the safety pass runs while anyone waits
        return event

    def drop(self, slot_id: str, event: asyncio.Event) -> None:
        self._waiters.drop(slot_id, event)
        self._takers.pop(slot_id, None)
        self._delivered.pop(slot_id, None)

    def notify_slot(self, slot_id: str, row: SlotRow | None = None, step: StepRecord | None = None) -> None:
        """Wake the runs waiting on ``slot_id``; ``row``, when given, is its state as just committed
        (they need not read it again), and ``step`` its waiter's hook step if the store wrote it."""
        if row is not None and slot_id in self._takers:
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

    def delivered(self, slot_id: str) -> tuple[SlotRow, StepRecord | None] | None:
        """The row a local decision delivered with the last wake-up of ``slot_id``'s waiter (and its
        hook step, if the decision wrote it), once."""
        return self._delivered.pop(slot_id, None)

    @property
    def hand_over_locally(self) -> bool:
        """Whether a release here hands slots straight to this process's runs (off in the harness's
        crash tests of the confirming path)."""
        return self._hooks.hand_over_locally

    def hand_over(self) -> Mapping[str, OwnStep]:
        """The runs parked here with their hook steps, for a release to hand a freed slot to."""
        return self._takers if self._hooks.hand_over_locally else {}

    def waiting(self) -> list[str]:
        """The slot ids runs of this process wait on (the poll pass reads their states)."""
        return self._waiters.keys()

    def changed(self, due: int | None = None) -> None:
        """A slot became active or changed: wake the expiry loop if it sleeps with nothing to do, or
        past ``due`` (the slot's next expiry)."""
        deadline = self._deadline
        if deadline is None or (due is not None and due < deadline):
            self._changed.set()

    def look_again(self) -> None:
        """Wake the expiry loop now (a change of the limits elsewhere, a reconnection)."""
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
