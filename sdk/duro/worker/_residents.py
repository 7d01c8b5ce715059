"""The runs a worker holds in memory, and the unloading of those that wait (the rules: ``_unloading``).

A run parks at a wait (``RunContext.park``) once the wait is written and checked. To unload it, the
worker first lets any write of the run still in flight commit (a sleep's record is not awaited),
then stops its task there (``Unloaded``: no code of it runs on, nothing of it is written), and
finally gives it up in the store (``store.Unload``): unowned, due when its wait ends, or at once if
what it waits for happened meanwhile (a signal, a slot, a child's end: the check is in the same
statement). A claim then brings it back by replay, here or on any worker. A hand-back that fails
(the store out of reach) is tried again on the next pass; until then the run is still this
worker's in the store, and a worker that dies meanwhile hands it back like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._clock import Clock
from ..rules import _unloading as rules
from ..run._runtime import LostRun, Unloaded
from ..store import Unload, Waiting
from ._gateway import StoreGateway, store_trouble
from ._options import WorkerOptions

if TYPE_CHECKING:
    from ..run._context import RunContext

log = logging.getLogger("duro")


class Residents:
    """Implements the ``Residency`` port for a worker's runs (``live``: the runs it holds)."""

    def __init__(
        self,
        *,
        worker_id: str,
        options: WorkerOptions,
        clock: Clock,
        gateway: StoreGateway,
        live: dict[str, RunContext],
        wake: Callable[[], None],
        room_freed: Callable[[], None],
    ) -> None:
        self.worker_id = worker_id
        self.max_resident = options.max_resident_runs
        self.max_concurrent = options.max_concurrent_runs
        self.unload_after_ms = options.unload_after_ms
        self.clock = clock
        self._now, self._monotonic = clock.now_ms, clock.monotonic_ms  # read at every park: bound once
        self.gateway = gateway
        self.live = live
        self._wake = wake  # the worker's loop: runs given up (some due now)
        self._room_freed = room_freed  # the worker's claims, batched: a parked run freed capacity
        self.parked: dict[str, rules.Parked] = {}  # in the order they parked: the longest idle first
        self.unloaded = 0  # runs given up so far (for tests and benchmarks)
        self.backlog = False  # due work was left in the store for want of capacity
        self._chosen: dict[str, None] = {}
        self._flushing: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._retry: list[Waiting] = []  # given up in memory, not yet in the store
        self._leaving: set[str] = set()  # parked runs chosen to leave memory, until they unpark

    # -- the port a run reaches ----------------------------------------------------------------

    def park(self, ctx: RunContext) -> None:
        parked = ctx.parked
        assert parked is not None
        run_id = parked.run_id
        self.parked[run_id] = parked
        if self.backlog:
            self._room_freed()  # one more run may execute now
        after = self.unload_after_ms
        if after is not None and rules.unload_at_once(parked, self._now(), after):
            self._choose([run_id])
        elif len(self.live) > self.max_resident:
            self.make_room()
        elif self._timer is None and after is not None:
            self._arm()

    def unpark(self, ctx: RunContext) -> None:
        self.parked.pop(ctx.run_id, None)
        if self._leaving:
            self._leaving.discard(ctx.run_id)  # woke (or was stopped): no longer on its way out

    def leaves_at_once(self, due_at: int) -> bool:
        """Whether a sleep until ``due_at`` that parks now leaves memory at once (the rule:
        ``_unloading.unload_at_once``, written out: every sleep asks)."""
        after = self.unload_after_ms
        return after is not None and due_at - self._now() > after

    # -- capacity ------------------------------------------------------------------------------

    def executing(self) -> int:
        """Runs in memory that are not parked (executing, or between two waits), and parked runs on
        their way out: until a run is out, it holds its memory, so it counts against
        ``max_concurrent_runs`` (what a worker claims while its unloads lag stays bounded)."""
        return len(self.live) - len(self.parked) + len(self._leaving)

    def room(self) -> int:
        """How many more runs this worker may start executing now."""
        return max(0, self.max_concurrent - self.executing())

    def make_room(self) -> None:
        """Unload the longest idle parked runs while more than ``max_resident`` are in memory."""
        self._choose(rules.over_capacity(self.parked.values(), len(self.live), self.max_resident))

    # -- unloading -----------------------------------------------------------------------------

    def _arm(self) -> None:
        deadline = rules.next_idle_deadline(self.parked.values(), self.unload_after_ms)
        if deadline is None:
            return
        delay = max(0, deadline - self.clock.monotonic_ms()) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay, self._idle_pass)

    def _idle_pass(self) -> None:
        self._timer = None
        now = self.clock.monotonic_ms()
        idle = []
        for parked in self.parked.values():  # oldest first: stop at the first one not idle enough
            if not rules.idle_too_long(parked, now, self.unload_after_ms):
                break
            idle.append(parked.run_id)
        self._choose(idle)
        remaining = [p for p in self.parked.values() if p.run_id not in self._chosen]
        if remaining:
            delay = max(0, remaining[0].since + (self.unload_after_ms or 0) - now) / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._idle_pass)

    def _choose(self, run_ids: list[str]) -> None:
        if not run_ids:
            return
        self._chosen.update(dict.fromkeys(run_ids))
        self._leaving.update(run_ids)
        if self._flushing is None:
            self._flushing = asyncio.get_running_loop().create_task(self._flush(), name="duro-unload")

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # the runs that park in this loop turn go together
            while self._chosen:
                chosen, self._chosen = list(self._chosen), {}
                await self._unload(chosen)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - a run stays resident; the next choice tries again
            store_trouble("unloading waiting runs", err)
        finally:
            self._flushing = None

    async def _unload(self, run_ids: list[str]) -> None:
        runs = [ctx for ctx in map(self.live.get, run_ids) if ctx is not None and ctx.parked is not None]
        for ctx in runs:  # its own write in flight commits first (a sleep's record: see sleep)
            if ctx.unsettled is not None and not ctx.unsettled.done:
                with contextlib.suppress(Exception):
                    await ctx.unsettled.outcome()
        runs = [
            ctx
            for ctx in runs
            if ctx.parked is not None
            and ctx.fatal is None
            and ctx.cancel is None  # a cancelled run delivers its cancel first
            and ctx.task is not None
            and ctx.run_id in self.live
        ]
        if not runs:
            return
        waits = tuple(_waiting(ctx.parked) for ctx in runs if ctx.parked is not None)
        for ctx in runs:
            ctx.fatal = Unloaded(ctx.run_id)
            ctx.cancel_reason = "unload"
            assert ctx.task is not None
            ctx.task.cancel()
        await asyncio.gather(*(ctx.task for ctx in runs if ctx.task is not None), return_exceptions=True)
        await self.give_up(waits)

    async def give_up(self, waits: tuple[Waiting, ...]) -> None:
        """Hand these runs (stopped here) back to the store, due when their waits end."""
        waits = (*self._retry, *waits)
        self._retry = []
        if not waits:
            return
        try:
            store = self.gateway.store

            def unload(command: Unload) -> list[str]:
                return store.steps.apply(command)

            given = await self.gateway.call(unload, Unload(self.worker_id, waits, self.clock.now_ms()))
        except Exception as err:  # noqa: BLE001 - the store out of reach: again on the next pass
            self._retry = list(waits)
            store_trouble("handing unloaded runs back", err)
            return
        self.unloaded += len(given)
        self._wake()  # some may be due at once (what they wait for came meanwhile), and next_due moved

    def parked_waits(self) -> tuple[Waiting, ...]:
        """The waits of the parked runs whose own writes have all committed (a worker that stops
        hands these back as unloaded, the rest as executing)."""
        return tuple(
            _waiting(ctx.parked)
            for ctx in self.live.values()
            if ctx.parked is not None and ctx.fatal is None and (ctx.unsettled is None or ctx.unsettled.took)
        )

    def retry_pending(self) -> bool:
        """Whether a hand-back waits to be tried again."""
        return bool(self._retry)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            self._flushing.cancel()

    # -- runs lost ---------------------------------------------------------------------------------

    def lose(self, run_ids: list[str]) -> None:
        """These runs are no longer ours (ended elsewhere, or taken over): they stop at once and run
        no more code here (their next durable call, or the end of their wait, raises ``LostRun``)."""
        for run_id in run_ids:
            ctx = self.live.get(run_id)
            if ctx is not None:
                if ctx.fatal is None:
                    ctx.fatal = LostRun(run_id)
                if ctx.task is not None:
                    ctx.task.cancel()

    def lose_all(self) -> int:
        """Stop every run this worker executes, at once (see :meth:`lose`); how many there were."""
        held = list(self.live)
        self.lose(held)
        return len(held)


def _waiting(parked: rules.Parked) -> Waiting:
    """A parked run's wait, as the store takes it back."""
    return Waiting(parked.run_id, parked.kind, parked.key, parked.due_at)
