"""How a run executing in a worker ends: ``completed``, ``failed`` or ``cancelled``; and the
worker's side of cancelling (the run's side: ``duro.run._cancel``): a cancel reaching a run it
executes, and its grace period.

A run whose cancel reached its worker ends ``cancelled`` once its code finishes, however it
finishes (``RunCancelled`` raised again, another error, or a return), or when
``WorkerOptions.cancel_grace`` has passed since the cancel reached the worker, whatever the code is
doing then: its task is stopped, nothing more of it is recorded, and the run ends. The end closes
the calls it still waited on (``store.FinishRun``) and takes it out of any limit's queue.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from .._clock import Clock
from .._errors import EngineCrash, RunCancelled, call_seq
from .._events import EventBus
from .._serde import describe_error
from ..limits import Limits
from ..rates import Rates
from ..run import _cancel
from ..run._runtime import LostRun, StoreFailed, store_failed
from ..store import FinishRun, Waiting
from ._gateway import StoreGateway, store_trouble
from ._options import WorkerOptions
from ._recovery import Suspects

if TYPE_CHECKING:
    from ..run._context import RunContext


class GivesUp(Protocol):
    """Where the runs this worker stopped at a wait go back to the store (``Residents.give_up``)."""

    async def give_up(self, waits: tuple[Waiting, ...]) -> None: ...


class RunEnds:
    """The ends of the runs one worker executes, and their cancels."""

    def __init__(
        self,
        *,
        worker_id: str,
        options: WorkerOptions,
        clock: Clock,
        gateway: StoreGateway,
        events: EventBus,
        limits: Limits,
        rates: Rates,
        residents: GivesUp,
    ) -> None:
        self.worker_id = worker_id
        self.residents = residents
        # see duro.worker._recovery
        self.suspects = Suspects(worker_id, options.max_recoveries, gateway, events)
        self.grace_ms = options.cancel_grace_ms
        self.clock = clock
        self.gateway = gateway
        self.events = events
        self.limits = limits
        self.rates = rates
        self._graces: dict[str, asyncio.Task[None]] = {}  # by run id: the end of its grace period
        self._handing_back: set[asyncio.Task[None]] = set()

    def request(self, ctx: RunContext) -> None:
        """The run's cancel reached this worker: deliver it, and stop the run after the grace period."""
        if _cancel.request(ctx) and ctx.run_id not in self._graces:
            self._graces[ctx.run_id] = asyncio.get_running_loop().create_task(
                self._grace(ctx), name=f"duro-cancel-grace-{ctx.run_id}"
            )

    async def _grace(self, ctx: RunContext) -> None:
        await self.clock.sleep_until(self.clock.now_ms() + self.grace_ms)
        self._graces.pop(ctx.run_id, None)
        task = ctx.task
        if task is None or task.done() or ctx.ended is not None:
            return
        ctx.cancel_reason = "grace"
        if ctx.fatal is None:
            ctx.fatal = LostRun(ctx.run_id)  # nothing more of its code is recorded
        task.cancel()  # the run's task ends it (see cancelled)

    def cancelled(self, ctx: RunContext, stop: BaseException | None = None) -> bool:
        """Whether the run, its code finished (or stopped by ``stop``), ends ``cancelled``."""
        if ctx.cancel_reason == "grace":
            return True
        if isinstance(stop, LostRun | EngineCrash | asyncio.CancelledError):
            return False  # not ours any more, the engine crashing, or its worker stopping: no end here
        state = ctx.cancel
        return isinstance(stop, RunCancelled) or (state is not None and state.stops_waits)

    async def complete(self, ctx: RunContext, output: str | None) -> None:
        """End the run ``completed`` (each end is fenced on this worker's ownership)."""
        run, ended = ctx.record, self.clock.now_ms()
        end = FinishRun(run.id, self.worker_id, "completed", output, None, ended, run.parent_id)
        if await self._end(ctx, end):
            self.events.publish("run.completed", run.id, ended, run.workflow, created_at=run.created_at)

    async def fail(self, ctx: RunContext, cause: BaseException) -> None:
        """End the run ``failed`` with ``cause``; it leaves any limit's queue."""
        run, ended = ctx.record, self.clock.now_ms()
        error = describe_error(cause, call_seq(cause))  # where a retry resumes (duro.rules._resume)
        end = FinishRun(run.id, self.worker_id, "failed", None, error, ended, run.parent_id)
        if await self._end(ctx, end):
            error, created = type(cause).__name__, run.created_at
            self.events.publish("run.failed", run.id, ended, run.workflow, error=error, created_at=created)
            await self.limits.leave_queues([run.id], ended)
            await self.rates.leave_queues([run.id], ended)

    async def cancel(self, ctx: RunContext) -> None:
        """End the run ``cancelled``: the calls it still waited on close with it (``FinishRun``),
        and it leaves any limit's queue."""
        run, ended = ctx.record, self.clock.now_ms()
        error = describe_error(_cancel.cancelled(run.id))
        end = FinishRun(run.id, self.worker_id, "cancelled", None, error, ended, run.parent_id)
        if await self._end(ctx, end):
            self.events.publish("run.cancelled", run.id, ended, run.workflow, created_at=run.created_at)
            await self.limits.leave_queues_of_cancelled(run.id)
            await self.rates.leave_queues([run.id])

    async def _end(self, ctx: RunContext, end: FinishRun) -> bool:
        """Write the run's end; ``False`` if fenced, or if the store failed it (then ``fatal`` is
        ``StoreFailed``, and the run is handed back when it leaves: see :meth:`forget`)."""
        try:
            if not await self.gateway.progress.write(end):
                return False
        except Exception as err:
            if not store_failed(err):
                raise
            store_trouble(f"writing the end of run {ctx.run_id!r}", err)
            ctx.fatal = StoreFailed(ctx.run_id)
            return False
        ctx.ended = ctx.record._replace(
            status=end.status, output=end.output, error=end.error, ended_at=end.now, updated_at=end.now
        )
        return True

    def forget(self, ctx: RunContext) -> None:
        """The run left this worker (ended, evicted, lost): its grace period ends with it, and its
        turn as a suspect (see duro.worker._recovery). One the store failed a write of (``StoreFailed``:
        disk full, the database gone) is handed back unowned and due at once, so that this or
        another worker takes it up when the store takes writes again: tried now, and again at each
        pass of the worker while the store refuses (``Residents.give_up``)."""
        run_id = ctx.run_id
        self.suspects.leave(run_id)
        if isinstance(ctx.fatal, StoreFailed) and ctx.ended is None:
            now = self.clock.now_ms()
            waiting = Waiting(run_id, "sleep", None, now)
            task = asyncio.get_running_loop().create_task(self.residents.give_up((waiting,)))
            self._handing_back.add(task)
            task.add_done_callback(self._handing_back.discard)
        grace = self._graces.pop(run_id, None)
        if grace is not None:
            grace.cancel()

    def close(self) -> None:
        for grace in self._graces.values():
            grace.cancel()
        self._graces.clear()
