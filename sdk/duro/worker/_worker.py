"""The worker: executes runs, claims unowned ones, keeps its lease, and recovers dead workers' runs.

A worker is a row in ``duro_workers`` whose heartbeat is the lease on every run it owns. A run is
claimable when it is unfinished and has no owner, or its owner has no row: a claim deletes the rows
of workers it judged dead (see :mod:`duro.rules._lease`), and a worker whose process is gone from this
host is removed at once. Claiming is one conditional ``UPDATE``, with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so two live workers never execute the same run; every progress write is fenced on
ownership, so a worker that lost a run changes nothing; one whose lease ran out executes no run's
code until a heartbeat has gone through again (``RunContext.resume``).

A waiting run stays in memory a while, then is evicted (``_residents``); due work is claimed in
due order, in batches of free capacity. What other processes did arrives through the store's
``listen`` (LISTEN/NOTIFY, a SQLite file's ``data_version``), or the poll pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from .._clock import Clock
from .._errors import DuroError, EngineCrash, RunCancelled, raise_user_exit
from .._events import EventBus
from .._hooks import EngineHooks
from .._states import ENDED
from .._tracing import traced
from ..client._starts import Starter
from ..definitions._config import Workspace
from ..definitions._definitions import Registry, WorkflowSpec
from ..limits import Limits, LocalSlots, RunLimits
from ..rates import LocalRates, Rates, RunRates
from ..rules import _eviction as rules
from ..run import _current
from ..run._cancel import cancelled
from ..run._context import RunContext
from ..run._runtime import Evicted, LostRun, RetryPort, Runtime
from ..store import Claim, Claimer, Evict, RunRecord, Waiting, settle_sleeps
from ._gateway import StoreGateway, store_trouble
from ._heartbeat import Heartbeat
from ._options import WorkerOptions
from ._retention import Retention
from ._run_ends import RunEnds
from ._schedules import Schedules, fire_schedules
from ._wakeups import Wakeups

if TYPE_CHECKING:
    from ..run._context import RunContext
    from ..store._notify import Notice


log = logging.getLogger("duro")
CLAIM_BATCH = 100  # runs a claim takes at most (more room: the next batch at once; workers share a backlog)
CLAIM_BATCH_S = 0.02  # announced runs are claimed in batches at most this often (see _wake_for_claims)
LISTEN_READY_S = 5.0  # how long a starting worker waits for its LISTEN before it claims (then: polls)


class Worker:
    """Executes runs, claims unowned ones, keeps its lease, and recovers dead workers' runs."""

    def __init__(
        self,
        *,
        live: dict[str, RunContext],
        options: WorkerOptions,
        namespace: str,
        clock: Clock,
        gateway: StoreGateway,
        registry: Registry,
        events: EventBus,
        hooks: EngineHooks,
        starter: Starter,
        workspace: Workspace,
        limits: Limits,
        rates: Rates,
        retention: Retention,
        schedules: Schedules,
        handle: Callable[[str], Any],
        context_engine: object,
        redrive: RetryPort,
    ) -> None:
        self.options = options
        self.namespace = namespace
        self.clock = clock
        self.gateway = gateway
        self.db = gateway.call  # a store call, never blocking the loop
        self.store = gateway.store
        self.registry = registry
        self.events = events
        self.hooks = hooks
        self.limits = limits  # the operators' part: runs that end leave the queues through it
        self.schedules = schedules
        self.retention = retention
        self.workspace = workspace
        self._context_engine = context_engine  # what user code in a run finds as the current engine
        self.host = socket.gethostname()
        self.id = options.worker_id or f"{self.host[:32]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.live = live  # the runs executing here (each one's task on its ctx)
        self.step_executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="duro-step")
        self.wakeups = Wakeups(clock)  # runs idle on a signal, and waits for a run's end
        self.slots = LocalSlots(  # runs in a limit's queue
            host=self, workspace=workspace, gateway=gateway, clock=clock, wakeups=self.wakeups, hooks=hooks
        )
        self.rates = LocalRates(  # runs in a rate's queue
            workspace=workspace, gateway=gateway, clock=clock, wakeups=self.wakeups, on_absent=self.wake
        )
        self.lease_ms = options.lease_ms
        self.residents = Residents(
            worker_id=self.id,
            options=options,
            clock=clock,
            gateway=gateway,
            live=live,
            wake=self.wake,
            room_freed=self.room_freed,
        )
        self.ends = RunEnds(
            worker_id=self.id,
            options=options,
            clock=clock,
            gateway=gateway,
            events=events,
            limits=limits,
            rates=rates,
            residents=self.residents,
        )
        self._next_due: int | None = None  # the earliest due time of an unowned run (its last reading)
        self._swept = 0  # when runs of owners with no row were last handed back (once a lease)
        self._statuses_read = -1000  # when the poll pass last read the held runs' statuses
        self.heartbeat = Heartbeat(
            worker_id=self.id,
            namespace=namespace,
            host=self.host,
            lease_ms=self.lease_ms,
            clock=clock,
            gateway=gateway,
            drop_all=self.residents.lose_all,
            rejoined=self.wake,
        )
        self.runtime = Runtime(
            worker_id=self.id,
            clock=clock,
            gateway=gateway,
            events=events,
            registry=registry,
            starter=starter,
            wakeups=self.wakeups,
            lease=self.heartbeat,
            hooks=hooks,
            step_executor=self.step_executor,
            handle=handle,
            slots=RunLimits(
                workspace=workspace, local=self.slots, gateway=gateway, events=events, wakeups=self.wakeups
            ),
            rates=RunRates(
                workspace=workspace, local=self.rates, gateway=gateway, events=events, wakeups=self.wakeups
            ),
            residency=self.residents,
            redrive=redrive,
        )
        self._limits_task: asyncio.Task[None] | None = None
        self._rates_task: asyncio.Task[None] | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._wakeup, self._schedules_changed = asyncio.Event(), asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._schedule_task: asyncio.Task[None] | None = None
        self._listening = threading.Event()  # set: the LISTEN thread (PostgreSQL) stops
        self._claim_pending = False
        self._run_notice_queued = False  # a "run" notice is on its way from the listener to the loop
        self._full_pass, self.full_passes = False, 0  # the next pass looks at everything; how many did
        self._listener: threading.Thread | None = None
        self._monotonic = self.clock.monotonic_ms

    # -- I/O and wake-ups -------------------------------------------------------------------------

    def notify_signal(self, run_id: str, name: str) -> None:
        self.wakeups.signals.notify((run_id, name))
        if run_id not in self.live:
            self.wake()  # evicted: the store has it due now

    def notify_cancelled(self, run_ids: Sequence[str], ended: Sequence[str] = ()) -> None:
        """Cancels asked for (see ``_cancel``): the runs executing here get theirs; ``ended``, ended."""
        for run_id in run_ids:
            if (ctx := self.live.get(run_id)) is not None:
                self.ends.request(ctx)
        for run_id in ended:
            self.wakeups.run_ended(run_id)
        self.wake()  # one evicted (or its parent, evicted while it waits for it) is due now

    def schedules_changed(self) -> None:
        self._schedules_changed.set()

    def wake(self) -> None:
        """Ask the loop to look for claimable runs now (a client start, say)."""
        self._wakeup.set()

    # -- executing -------------------------------------------------------------------------------

    def claimer(self) -> Claimer | None:
        if not (self.heartbeat.running and self.has_room()):
            return None
        return Claimer(self.id, self.namespace, self.registry.local_names, self.registry.local_versions)

    def take_up(self, runs: tuple[RunRecord, ...]) -> None:
        for run in runs:
            self.launch(run)

    def room_freed(self) -> None:
        """Claim due work left for want of room: batched (CLAIM_BATCH_S); at once with no poll pass."""
        self.wake() if self.options.poll_interval_ms is None else self._wake_for_claims()

    def has_room(self) -> bool:
        """Whether this worker may execute one more run now (``max_concurrent_runs``)."""
        return self.residents.room() > 0

    def launch(self, run: RunRecord, fresh: bool = False, spec: WorkflowSpec | None = None) -> None:
        """Execute ``run`` (ours) in a task of its own; ``fresh``: no history; ``spec``: its code, if known."""
        if run.id in self.live:
            return
        ctx = RunContext(self.runtime, run)
        ctx.task = asyncio.get_running_loop().create_task(
            traced(partial(self._execute, ctx, fresh, spec), ctx),
            name=f"duro-run-{run.id}",
            context=contextvars.Context(),
        )
        self.live[run.id] = ctx

    async def _execute(self, ctx: RunContext, fresh: bool, known: WorkflowSpec | None) -> None:
        store, run = self.store, ctx.record
        try:
            if not fresh:
                ctx.load_history(settle_sleeps(await self.db(store.steps.of, run.id), run))
                await self.ends.suspects.enter(ctx)  # left by a dead worker: RunSetAsideError at the last
            if run.cancel_requested_at is not None:
                self.ends.request(ctx)  # delivered in its replay (see _cancel)
            _current.current_run.set(ctx)
            _current.current_engine.set(self._context_engine)
            await ctx.resume()  # claimed while our lease was in doubt: nothing of it runs until confirmed
            if ctx.cancel is not None and ctx.cancel.pending and not len(ctx.history):
                raise cancelled(run.id)  # nothing of it ran: it ends at once
            spec = known or self.registry.spec_for(run.workflow, run.version)  # its own version's code
            try:
                inp = spec.input.load(run.input) if spec.takes_input else None
            except Exception as err:  # noqa: BLE001
                raise DuroError(
                    f"stored input of run {run.id!r} no longer fits workflow {spec.name!r}: "
                    f"{' '.join(str(err).split())}"
                ) from None
            assert spec.invoke is not None  # a worker claims only the workflows it has the code of
            try:  # no wrapper coroutine: one frame less at every resume (a SystemExit fails the run)
                result = await spec.invoke(inp, ctx)
            except BaseException as err:
                raise_user_exit(err, f"workflow {spec.name!r}")
            if ctx.fatal is not None:
                raise ctx.fatal
            if self.ends.cancelled(ctx):
                raise cancelled(run.id)  # its code finished after its cancel came: it ends cancelled
            output = spec.dump_output(result)
            if self.hooks.checkpoints:
                self.hooks.checkpoint("run.finishing", run.id)
            await self.ends.complete(ctx, output)
        except (LostRun, EngineCrash, RunCancelled, asyncio.CancelledError) as stop:
            if self.ends.cancelled(ctx, stop):
                await self.ends.cancel(ctx)
            elif isinstance(stop, asyncio.CancelledError):
                raise  # engine shutdown: the run stays unfinished and is recovered later
        except Exception as err:  # noqa: BLE001 - a failed run records whatever ended it
            if self.ends.cancelled(ctx):
                await self.ends.cancel(ctx)
            else:
                await self.ends.fail(ctx, ctx.fatal if ctx.fatal is not None else err)
        finally:
            self.ends.forget(ctx)  # a run whose write the store failed is handed back, due at once
            self.live.pop(run.id, None)
            self.residents.idle.pop(run.id, None)
            if not isinstance(ctx.fatal, Evicted):
                self.wakeups.run_ended(run.id, ctx.ended)
                if run.parent_id is not None and run.parent_id not in self.live:
                    self.wake()  # its parent, evicted while it waited, is due now
            if self.heartbeat.running and self.registry.is_serial(run.workflow):
                self.wake()  # the next run of a serial workflow
            elif self.heartbeat.running and self.residents.backlog:
                self.room_freed()

    # -- the loop --------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.heartbeat.join()  # running from here until halted (Heartbeat.running)
        loop = asyncio.get_running_loop()
        if self.store.notifies and not (self.hooks.inline_store and self.store.dialect == "sqlite"):
            self._listening, ready = threading.Event(), threading.Event()
            self._listener = threading.Thread(
                target=self.store.listen,
                args=(partial(self._deliver, loop), self._listening, ready),
                name=f"duro-listen-{self.id}",
                daemon=True,
            )
            self._listener.start()
            # claims begin once notices are heard: a run started before is found by the first pass,
            # one started after by its notice (a server that cannot be reached: polls, at most 5 s on)
            await loop.run_in_executor(None, ready.wait, LISTEN_READY_S)
        self._loop_task = loop.create_task(self._loop(), name=f"duro-worker-{self.id}")
        self._schedule_task = loop.create_task(
            fire_schedules(
                self.schedules, self.wakeups, self._schedules_changed, self.options.poll_interval_ms
            ),
            name=f"duro-schedules-{self.id}",
        )
        self.heartbeat.start()
        if self.workspace.limits:
            self._limits_task = loop.create_task(self.slots.expire_loop(), name=f"duro-limits-{self.id}")
        if self.workspace.rates:
            self._rates_task = loop.create_task(self.rates.grant_loop(), name=f"duro-rates-{self.id}")
        if self.workspace.retention_ms is not None:
            self._retention_task = loop.create_task(
                self.retention.loop(self.workspace.retention_ms), name=f"duro-retention-{self.id}"
            )

    def _deliver(self, loop: asyncio.AbstractEventLoop, notice: Notice) -> None:
        """From the listener thread (none under the harness: no thread may wake its loop): hand a
        notice to the event loop, unless it has stopped. Runs to claim are announced once per start
        to every worker: one such notice on its way to the loop stands for those that follow it (its
        claim pass sees their runs too), and notices for other namespaces go no further."""
        if self._listening.is_set():
            return
        if notice["kind"] == "run":
            if notice["namespace"] not in (None, self.namespace):
                return  # a run to claim in another namespace
            if self._run_notice_queued:
                return
            self._run_notice_queued = True
        try:
            loop.call_soon_threadsafe(self._on_notice, notice)
        except RuntimeError:  # the loop closed under us: nobody is left to wake
            self._listening.set()

    async def stop(self) -> None:
        """Stop claiming, drop in-flight runs and hand them back (recovered by the next worker)."""
        if not self.heartbeat.running:
            return
        waits = self.residents.idle_waits()  # handed back as evicted: due when their waits end
        await self._halt("shutdown")
        try:
            await self.residents.give_up(waits)
            await self.db(self.store.workers.remove, self.id, self.clock.now_ms())
        except DuroError:
            pass

    async def abandon(self) -> None:
        """Stop as if the process died: runs stop where they are, nothing more is written, the row stays."""
        await self._halt("crash")

    async def _halt(self, reason: str) -> None:
        """Cancel every run task and background loop of this worker and wait for them to stop."""
        self.heartbeat.running = False  # a run confirming its lease stops waiting
        self._listening.set()  # the listener thread ends within its 0.1 s wait
        listener, self._listener = self._listener, None
        if listener is not None:
            await asyncio.get_running_loop().run_in_executor(None, listener.join, 5.0)
        for ctx in self.live.values():
            ctx.cancel_reason = reason
        tasks = [ctx.task for ctx in self.live.values() if ctx.task is not None]
        background = (
            self._loop_task,
            self._schedule_task,
            self._limits_task,
            self._rates_task,
            self._retention_task,
            self.heartbeat.task,
        )
        tasks += [task for task in background if task is not None]
        for task in tasks:
            task.cancel()
        self.residents.close()
        self.ends.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.heartbeat.stop()  # a beat in flight gives its connection back before the pool closes
        self.step_executor.shutdown(wait=False, cancel_futures=True)

    async def _loop(self) -> None:
        """A full pass every poll interval; in between, a wakeup (runs announced by a start, here or
        in another process) only claims: the rest of a pass (dead local workers, other processes'
        changes) is the fallback for what notifications missed, and costs a worker a third of its
        CPU when every start wakes every worker."""
        poll_ms = self.options.poll_interval_ms
        full_due = self.clock.now_ms()
        while True:
            self._wakeup.clear()
            now = self.clock.now_ms()
            full = poll_ms is None or self._full_pass or now >= full_due
            if full:
                self._full_pass = False
                full_due = now + (poll_ms or 0)
            try:
                await self.tick(full)
            except Exception as err:  # noqa: BLE001 - the store out of reach for a moment: the next pass
                store_trouble("the claim pass", err)
            deadline = None if poll_ms is None else full_due
            if self._next_due is not None and not self.residents.backlog:  # due work ahead: wake for it
                deadline = self._next_due if deadline is None else min(deadline, self._next_due)
            await self.wakeups.wait_for(self._wakeup.wait(), deadline)

    async def tick(self, full: bool = True) -> None:
        """One pass: heartbeat, reap dead local workers, claim runs, poll other processes' changes
        (``full=False``: the heartbeat if due and the claim only)."""
        now = self.clock.now_ms()
        heartbeat = self.heartbeat
        if heartbeat.task is None and now - heartbeat.last_sent >= self.lease_ms // 3:
            await heartbeat.beat()
        if not heartbeat.owns_runs():
            await heartbeat.confirm()  # claim nothing while our own lease is in doubt
        if full:
            await self.heartbeat.reap_local_dead()
        residents = self.residents
        if residents.retry_pending():
            await residents.give_up(())
        expired = heartbeat.watch.expired(self._monotonic())
        room = residents.room()
        claim = Claim(
            worker_id=self.id,
            namespace=self.namespace,
            workflows=self.registry.local_names,
            now=now,
            limit=min(room, CLAIM_BATCH),
            serial=self.registry.serial_names(),
            versions=self.registry.local_versions,
            expired=expired,
            orphans=full and now - self._swept >= self.lease_ms,
        )
        claimed = await self.db(self.store.runs.claim, claim) if room or expired or claim.orphans else []
        if claim.orphans:
            self._swept = now
        residents.backlog = room == 0 or len(claimed) == room  # more may be due: claim again when room frees
        if room > len(claimed) == claim.limit:
            self.wake()  # a full batch, and room for more: the next batch at once
        elif not residents.backlog:
            due = await self.db(self.store.runs.next_due, claim) if claim.workflows else None
            self._next_due = due if due is None or due > now else None  # due now: taken meanwhile
        for worker, _ in expired:
            heartbeat.watch.forget(worker)
        if expired:
            log.warning(
                "duro worker %s: took over from %s (no heartbeat for a lease: %d ms)",
                self.id,
                ", ".join(worker for worker, _ in expired),
                self.lease_ms,
            )
        # A claimed run still executing here was not ours a moment ago (our lease expired and we
        # joined again): another worker may have moved it on since. Drop it, replay from the store.
        stale = [
            task for run in claimed if run.id in self.live and (task := self.live[run.id].task) is not None
        ]
        for task in stale:
            task.cancel()
        if stale:
            await asyncio.gather(*stale, return_exceptions=True)
        for run in claimed:
            self.launch(run, fresh=run.fresh)
        if claimed:
            residents.make_room()
        if full:
            await self._poll_remote_changes()
            self.full_passes += 1

    # -- the lease: see Heartbeat -----------------------------------------------------------------

    def _on_notice(self, notice: Notice) -> None:
        """A change another process committed (see ``duro.store._notify``), on the event loop."""
        if notice["kind"] == "run":
            self._run_notice_queued = False  # later notices reach the loop again (see _deliver)
        if not self.heartbeat.running:
            return
        match notice["kind"]:
            case "run":  # for this namespace: _deliver let no other through
                self._wake_for_claims()
            case "slot":
                self.slots.notify_slot(str(notice["slot_id"]))
                self.slots.changed(notice["due_at"] if isinstance(notice["due_at"], int) else None)
            case "rate":
                self.rates.notify_wait(str(notice["wait_id"]))
            case "rates":
                self.rates.look_again()
            case "signal":
                self.notify_signal(str(notice["run_id"]), str(notice["name"]))
            case "cancel":
                self.notify_cancelled([str(notice["run_id"])])
            case "done":
                self.wakeups.run_ended(str(notice["run_id"]))
                self.wake()  # its parent may be due (evicted), or the next run of a serial workflow
            case "sched":
                self.schedules_changed()
            case "limits":
                self.slots.look_again()
            case "reconnected" | "changed":  # notices lost, or another process wrote: look again
                self._full_pass, self._statuses_read = True, -1000  # a cancel asked for elsewhere, say
                self.wake()
                self.schedules_changed()
                self.slots.look_again()
                self.rates.look_again()

    def _wake_for_claims(self) -> None:
        """Runs to claim, announced by other processes: one pass per ``CLAIM_BATCH_S`` at most, so a
        stream of starts is claimed in batches instead of every worker running a pass per start."""
        if self._claim_pending:
            return
        self._claim_pending = True
        asyncio.get_running_loop().call_later(CLAIM_BATCH_S, self._claim_now)

    def _claim_now(self) -> None:
        self._claim_pending = False
        self.wake()

    async def _poll_remote_changes(self) -> None:
        signals = self.wakeups.signals
        if signals:
            for run_id, name in await self.db(self.store.signals.signalled, {r for r, _ in signals.keys()}):
                self.notify_signal(run_id, name)
        waiting = self.slots.waiting()
        if waiting:
            states = await self.db(self.store.slots.states, waiting)
            for slot_id, state in states.items():
                if state != "waiting":
                    self.slots.notify_slot(slot_id)
        rate_waits = self.rates.waiting()
        if rate_waits:
            for wait_id, state in (await self.db(self.store.rates.wait_states, rate_waits)).items():
                if state != "waiting":
                    self.rates.notify_wait(wait_id)
        watched, now = set(self.wakeups.done.keys()), self._monotonic()
        if now - self._statuses_read >= 500:  # the held runs' statuses, twice a second at most
            self._statuses_read, watched = now, watched | set(self.live)
            unheard = [r for r, ctx in self.live.items() if ctx.cancel is None or not ctx.cancel.requested]
            if unheard and (asked := await self.db(self.store.runs.cancel_requested, unheard)):
                self.notify_cancelled(list(asked))  # asked for elsewhere, its notice lost (or none sent)
        if watched:
            statuses = await self.db(self.store.runs.statuses, watched)
            for run_id, status in statuses.items():
                if status in ENDED:
                    if run_id in self.live:
                        self.residents.lose([run_id])  # ended elsewhere
                    self.wakeups.run_ended(run_id)


# -- the runs held in memory -----------------------------------------------------------------------
# The runs a worker holds in memory, and the eviction of those that wait (the rules: ``_eviction``).
#
# A run goes idle at a wait (``RunContext.idle``) once the wait is written and checked. To evict it, the
# worker first lets any write of the run still in flight commit (a sleep's record is not awaited),
# then stops its task there (``Evicted``: no code of it runs on, nothing of it is written), and
# finally gives it up in the store (``store.Evict``): unowned, due when its wait ends, or at once if
# what it waits for happened meanwhile (a signal, a slot, a child's end: the check is in the same
# statement). A claim then brings it back by replay, here or on any worker. A hand-back that fails
# (the store out of reach) is tried again on the next pass; until then the run is still this
# worker's in the store, and a worker that dies meanwhile hands it back like any other.

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
        self.evict_after_ms = options.evict_after_ms
        self.clock = clock
        self._now, self._monotonic = clock.now_ms, clock.monotonic_ms  # read at every wait: bound once
        self.gateway = gateway
        self.live = live
        self._wake = wake  # the worker's loop: runs given up (some due now)
        self._room_freed = room_freed  # the worker's claims, batched: an idle run freed capacity
        self.idle: dict[str, rules.IdleWait] = {}  # in the order they went idle: the longest idle first
        self.evicted = 0  # runs given up so far (for tests and benchmarks)
        self.backlog = False  # due work was left in the store for want of capacity
        self._chosen: dict[str, None] = {}
        self._flushing: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._retry: list[Waiting] = []  # given up in memory, not yet in the store
        self._leaving: set[str] = set()  # idle runs chosen to leave memory, until they woke

    # -- the port a run reaches ----------------------------------------------------------------

    def went_idle(self, ctx: RunContext) -> None:
        wait = ctx.idle_wait
        assert wait is not None
        run_id = wait.run_id
        self.idle[run_id] = wait
        if self.backlog:
            self._room_freed()  # one more run may execute now
        after = self.evict_after_ms
        if after is not None and rules.evict_at_once(wait, self._now(), after):
            self._choose([run_id])
        elif len(self.live) > self.max_resident:
            self.make_room()
        elif self._timer is None and after is not None:
            self._arm()

    def woke(self, ctx: RunContext) -> None:
        self.idle.pop(ctx.run_id, None)
        if self._leaving:
            self._leaving.discard(ctx.run_id)  # woke (or was stopped): no longer on its way out

    def leaves_at_once(self, due_at: int) -> bool:
        """Whether a sleep until ``due_at`` that begins now leaves memory at once (the rule:
        ``_eviction.evict_at_once``, written out: every sleep asks)."""
        after = self.evict_after_ms
        return after is not None and due_at - self._now() > after

    # -- capacity ------------------------------------------------------------------------------

    def executing(self) -> int:
        """Runs in memory that are not idle (executing, or between two waits), and idle runs on
        their way out: until a run is out, it holds its memory, so it counts against
        ``max_concurrent_runs`` (what a worker claims while its evicts lag stays bounded)."""
        return len(self.live) - len(self.idle) + len(self._leaving)

    def room(self) -> int:
        """How many more runs this worker may start executing now."""
        return max(0, self.max_concurrent - self.executing())

    def make_room(self) -> None:
        """Evict the longest idle idle runs while more than ``max_resident`` are in memory."""
        self._choose(rules.over_capacity(self.idle.values(), len(self.live), self.max_resident))

    # -- eviction -----------------------------------------------------------------------------

    def _arm(self) -> None:
        deadline = rules.next_idle_deadline(self.idle.values(), self.evict_after_ms)
        if deadline is None:
            return
        delay = max(0, deadline - self.clock.monotonic_ms()) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay, self._idle_pass)

    def _idle_pass(self) -> None:
        self._timer = None
        now = self.clock.monotonic_ms()
        too_long = []
        for wait in self.idle.values():  # oldest first: stop at the first one not idle enough
            if not rules.idle_too_long(wait, now, self.evict_after_ms):
                break
            too_long.append(wait.run_id)
        self._choose(too_long)
        remaining = [p for p in self.idle.values() if p.run_id not in self._chosen]
        if remaining:
            delay = max(0, remaining[0].since + (self.evict_after_ms or 0) - now) / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._idle_pass)

    def _choose(self, run_ids: list[str]) -> None:
        if not run_ids:
            return
        self._chosen.update(dict.fromkeys(run_ids))
        self._leaving.update(run_ids)
        if self._flushing is None:
            self._flushing = asyncio.get_running_loop().create_task(self._flush(), name="duro-evict")

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # the runs that go idle in this loop turn go together
            while self._chosen:
                chosen, self._chosen = list(self._chosen), {}
                await self._evict(chosen)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - a run stays resident; the next choice tries again
            store_trouble("eviction waiting runs", err)
        finally:
            self._flushing = None

    async def _evict(self, run_ids: list[str]) -> None:
        runs = [ctx for ctx in map(self.live.get, run_ids) if ctx is not None and ctx.idle_wait is not None]
        for ctx in runs:  # its own write in flight commits first (a sleep's record: see sleep)
            if ctx.unsettled is not None and not ctx.unsettled.done:
                with contextlib.suppress(Exception):
                    await ctx.unsettled.outcome()
        runs = [
            ctx
            for ctx in runs
            if ctx.idle_wait is not None
            and ctx.fatal is None
            and ctx.cancel is None  # a cancelled run delivers its cancel first
            and ctx.task is not None
            and ctx.run_id in self.live
        ]
        if not runs:
            return
        waits = tuple(_waiting(ctx.idle_wait) for ctx in runs if ctx.idle_wait is not None)
        for ctx in runs:
            ctx.fatal = Evicted(ctx.run_id)
            ctx.cancel_reason = "evict"
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

            def evict(command: Evict) -> list[str]:
                return store.steps.apply(command)

            given = await self.gateway.call(evict, Evict(self.worker_id, waits, self.clock.now_ms()))
        except Exception as err:  # noqa: BLE001 - the store out of reach: again on the next pass
            self._retry = list(waits)
            store_trouble("handing evicted runs back", err)
            return
        self.evicted += len(given)
        self._wake()  # some may be due at once (what they wait for came meanwhile), and next_due moved

    def idle_waits(self) -> tuple[Waiting, ...]:
        """The waits of the idle runs whose own writes have all committed (a worker that stops
        hands these back as evicted, the rest as executing)."""
        return tuple(
            _waiting(ctx.idle_wait)
            for ctx in self.live.values()
            if ctx.idle_wait is not None
            and ctx.fatal is None
            and (ctx.unsettled is None or ctx.unsettled.took)
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


def _waiting(idle: rules.IdleWait) -> Waiting:
    """An idle run's wait, as the store takes it back."""
    return Waiting(idle.run_id, idle.kind, idle.key, idle.due_at)
