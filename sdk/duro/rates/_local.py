"""The runs of this process waiting for a rate's grant, and the pass that grants on time.

A run waiting for a grant waits on an event keyed by its request's id. It is woken by a grant made
here (its own request's decision, or this process's pass: the request as committed comes with the
wake-up, and the pass writes its hook step completed in the grant's transaction), by another
process's notice, or by the worker's poll pass. The pass decides every queue whose head is due: one timer per process, at the
earliest ``next_due`` of the rates it declares (a queue's next due is written with each decision,
so the timer never polls), and a safety pass every 15 s while a run of this process waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from .._clock import Clock
from ..definitions._config import Workspace
from ..rules._slots import SWEEP_MS
from ..store import OwnStep, RateWaitRow, StepRecord
from ..worker._gateway import StoreGateway, store_trouble
from ..worker._wakeups import Waiters, Wakeups

PRUNE_EVERY_MS = 60_000


class LocalRates:
    """The rate waiters of one worker, by request id, and the loop that grants on time."""

    def __init__(
        self,
        *,
        workspace: Workspace,
        gateway: StoreGateway,
        clock: Clock,
        wakeups: Wakeups,
        on_absent: Callable[[], None],
    ) -> None:
        self._workspace = workspace
        self._gateway = gateway
        self._clock = clock
        self._wakeups = wakeups
        self._waiters: Waiters[str] = Waiters()
        self._takers: dict[str, OwnStep] = {}  # the waiters' hook steps, by request id
        self._delivered: dict[str, tuple[RateWaitRow, StepRecord | None]] = {}
        self._changed = asyncio.Event()
        self._deadline: int | None = None  # when the loop wakes next (None: it sleeps idle)
        self._pruned = -PRUNE_EVERY_MS  # when the loop last pruned the ended waits
        # a grant for a run not waiting in this process's memory: it was unloaded, and the store
        # has it due now (its worker's claim pass)
        self._on_absent = on_absent

    def wait(self, wait_id: str, taker: OwnStep | None = None) -> asyncio.Event:
        """Park a run on its request; ``taker``, its hook step, lets a grant made in this process
        write it completed in the grant's own transaction (see ``store.RatePass``)."""
        event = self._waiters.add(wait_id)
        if taker is not None:
            self._takers[wait_id] = taker
        self.changed()  # the safety pass runs while anyone waits
        return event

    def drop(self, wait_id: str, event: asyncio.Event) -> None:
        self._waiters.drop(wait_id, event)
        self._takers.pop(wait_id, None)
        self._delivered.pop(wait_id, None)

    def hand_over(self) -> Mapping[str, OwnStep]:
        """The runs waiting here with their hook steps, for a grant to write completed."""
        return self._takers

    def notify_wait(
        self, wait_id: str, row: RateWaitRow | None = None, step: StepRecord | None = None
    ) -> None:
        """The request ``wait_id`` changed (granted, timed out): wake its run if it waits here;
        ``row``, when given, is the request as just committed and ``step`` its hook step if the
        grant wrote it (the run reads neither again)."""
        if wait_id in self._waiters:
            if row is not None:
                self._delivered[wait_id] = (row, step)
            self._waiters.notify(wait_id)
        else:
            self._on_absent()

    def notify(self, rows: Iterable[RateWaitRow], handed: Mapping[str, StepRecord] | None = None) -> None:
        for row in rows:
            self.notify_wait(row.id, row, handed.get(row.id) if handed else None)

    def delivered(self, wait_id: str) -> tuple[RateWaitRow, StepRecord | None] | None:
        """The request as the grant that woke its run committed it (and the hook step it wrote), once."""
        return self._delivered.pop(wait_id, None)

    def waiting(self) -> list[str]:
        """The request ids runs of this process wait on (the poll pass reads their states)."""
        return self._waiters.keys()

    def changed(self, due: int | None = None) -> None:
        """A queue changed: wake the loop when ``due`` (a queue's next due instant) comes before its
        deadline; without one, only to begin the safety pass for a run that now waits here (a
        request granted at once changes nothing the loop must look at)."""
        deadline = self._deadline
        if due is None:
            if deadline is None and self._waiters:
                self._changed.set()
        elif deadline is None or due < deadline:
            self._changed.set()

    def look_again(self) -> None:
        """Wake the loop now (a change elsewhere, a reconnection)."""
        self._changed.set()

    async def grant_loop(self) -> None:
        """Grant each queue's head at its due instant and time out waiters at theirs; a safety pass
        every 15 s while a run of this process waits, for anything missed (a crash, a lost notice);
        once a minute at most, the ended waits past every window are pruned."""
        store = self._gateway.store
        while True:
            self._changed.clear()
            now = self._clock.now_ms()
            rates = self._workspace.rates
            try:
                made = await self._gateway.call(store.rates.due, rates, now, self.hand_over())
                self.notify(made.granted, made.handed)
                if now >= self._pruned + PRUNE_EVERY_MS:  # the ended waits past every window
                    self._pruned = now
                    await self._gateway.call(store.rates.prune, rates, now)
                next_due = await self._gateway.call(store.rates.next_due, list(rates))
            except Exception as err:  # noqa: BLE001 - the store out of reach for a moment: again soon
                store_trouble("the rates pass", err)
                next_due = now + 1000
            deadline = None
            if next_due is not None or self._waiters:
                deadline = now + SWEEP_MS if next_due is None else min(next_due, now + SWEEP_MS)
            self._deadline = deadline
            await self._wakeups.wait_for(self._changed.wait(), deadline)
