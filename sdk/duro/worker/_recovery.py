"""Runs a dead worker left while executing them: which one crashed the process?

When a worker dies (SIGKILL, ``os._exit``, a segfault, the OOM killer), every run it was executing
is handed back with the length of its history then (``recovered_steps``, see the store's dead
hand-back). A run taken up again with its history still at that length is a *suspect*: it may be
the one whose next call kills the process. Every attempt at a suspect is counted (``recoveries``, in
the store) before its code runs, and the suspect leaves suspicion at its first recorded call, or
when it ends or leaves memory. The first attempt after a death runs at once, beside the others (most
runs a dead worker leaves are healthy, and one long step must not hold up the rest); a suspect
counted already, whose worker died again while it was in flight, runs only alone, one at a time, so
that each later death is counted against the one run executing. So a run that crashes its worker is
counted at every death, and a healthy run that shared the worker is counted at most once beyond
the attempts it executed alone; past ``WorkerOptions.max_recoveries`` attempts the run is failed
with :class:`RunSetAsideError` instead of being executed again.

A suspect whose replay reaches a wait it had already begun (a slot, a signal, a child) leaves
suspicion there too, and its count goes back to 0: its code up to the wait ran without killing the
worker, and none of it runs while it waits, so a worker that dies meanwhile (for whatever reason)
is not its doing. A wait that ends and leads into the crashing call is not replayed as a wait again,
so that run is still counted at every death.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._errors import RunSetAsideError
from .._events import STEP_EVENTS, EventBus, RunEvent
from ..run._runtime import LostRun
from ._gateway import StoreGateway

if TYPE_CHECKING:
    from ..run._context import RunContext

PROGRESS = tuple(STEP_EVENTS.values())  # a step written: the run made progress


class Suspects:
    def __init__(self, worker_id: str, max_recoveries: int, gateway: StoreGateway, events: EventBus) -> None:
        self.worker_id = worker_id
        self.max_recoveries = max_recoveries
        self.gateway = gateway
        self.events = events
        self._turn = asyncio.Lock()  # one suspect executes at a time
        self._leaving: dict[str, Callable[[], None]] = {}  # by run id: ends its turn

    async def enter(self, ctx: RunContext) -> None:
        """For a suspect (its history as long as when its worker died): wait for its turn, count the
        attempt, and raise :class:`RunSetAsideError` past ``max_recoveries``. Others pass at once."""
        run = ctx.record
        if run.recovered_steps is None or len(ctx.history) != run.recovered_steps:
            return
        store = self.gateway.store
        if await self.gateway.call(store.runs.count_first_recovery, run.id, self.worker_id):
            # its first attempt since the death, beside the others; at a wait it had begun, its
            # count goes back to 0 as for any suspect (a death while it waits is not its doing)
            async def cleared() -> None:
                ctx.suspect_waits = None
                await self.gateway.call(store.runs.clear_recoveries, run.id, self.worker_id)

            ctx.suspect_waits = cleared
            return
        await self._turn.acquire()
        ended = False

        def leave(event: RunEvent | None = None) -> None:
            nonlocal ended
            if ended or (event is not None and event.run_id != run.id):
                return
            ended = True
            unsubscribe()
            ctx.suspect_waits = None
            self._leaving.pop(run.id, None)
            self._turn.release()

        async def waits() -> None:
            leave()
            await self.gateway.call(self.gateway.store.runs.clear_recoveries, run.id, self.worker_id)

        unsubscribe = self.events.subscribe(leave, PROGRESS)
        self._leaving[run.id] = leave
        try:
            attempts = await self.gateway.call(self.gateway.store.runs.count_recovery, run.id, self.worker_id)
            if attempts is None:
                raise LostRun(run.id)
            if attempts > self.max_recoveries:
                raise RunSetAsideError(
                    run.id, attempts, run.recovered_steps
                )  # the first death, and one per attempt
        except BaseException:
            leave()
            raise
        ctx.suspect_waits = waits

    def leave(self, run_id: str) -> None:
        """The run ended or left this worker: its turn, if it had one, ends."""
        leaving = self._leaving.get(run_id)
        if leaving is not None:
            leaving()
