"""The worker: executes runs, claims unowned ones, keeps its lease, and recovers dead workers' runs.

A worker is a row in ``duro_workers`` whose heartbeat is the lease on every run it owns. A run is
claimable when it is unfinished and has no owner, or its owner has no row: a claim deletes the rows
of workers it judged dead (see :mod:`duro._lease`), and a worker whose process is gone from this
host is removed at once. Claiming is one conditional ``UPDATE``, with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so two live workers never execute the same run; every progress write is fenced on
ownership, so a worker that lost a run changes nothing; and a worker whose own lease ran out
executes no code of any run until a heartbeat has gone through again (``RunContext.resume``), so a
worker that lost a run never runs its code again.

Runs wait in memory (a sleeping run is a suspended coroutine); the store holds enough to replay
them anywhere. Wakeups are local events; what other processes did (a run to claim, a slot handed
to one of our waiters, a signal, a child finished, a run cancelled) arrives through the store's
``listen`` (PostgreSQL ``LISTEN/NOTIFY``) at once, and through the poll pass (every
``poll_interval``) when a notification is lost.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import threading
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import _current
from ._context import LostRun, RunContext
from ._errors import DuroError, EngineCrash, RunCancelled
from ._lease import OwnLease, Watch
from ._schedules import fire_due
from ._serde import describe_error
from ._slots import SWEEP_MS
from .store import Claim, FinishRun, OwnStep, RunRecord, settle_sleeps

if TYPE_CHECKING:
    from ._engine import Engine
    from ._slots import SlotRow

T = TypeVar("T")
K = TypeVar("K")
log = logging.getLogger("duro")
CLAIM_BATCH_S = 0.02  # announced runs are claimed in batches at most this often (see _wake_for_claims)
TERMINAL = ("completed", "failed", "cancelled")


def _store_trouble(where: str, err: Exception) -> None:
    """A background pass failed (the database restarting, say); it runs again. The log line names
    the error's type and the driver's first line only: SQL parameters (labels, payloads) stay out."""
    cause = getattr(err, "orig", None) or err
    first = (str(cause).strip().splitlines() or [""])[0][:200]
    log.warning("duro worker: %s failed (%s: %s); trying again", where, type(cause).__name__, first)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Waiters(Generic[K]):
    """Events that in-memory waits block on, by key; a notification sets every event of its key."""

    def __init__(self) -> None:
        self._events: dict[K, set[asyncio.Event]] = defaultdict(set)

    def add(self, key: K) -> asyncio.Event:
        event = asyncio.Event()
        self._events[key].add(event)
        return event

    def drop(self, key: K, event: asyncio.Event) -> None:
        events = self._events.get(key)
        if events is not None:
            events.discard(event)
            if not events:
                del self._events[key]

    def notify(self, key: K) -> None:
        for event in self._events.get(key, ()):
            event.set()

    def keys(self) -> list[K]:
        return list(self._events)

    def __bool__(self) -> bool:
        return bool(self._events)


class Worker:
    def __init__(self, engine: Engine, worker_id: str | None = None) -> None:
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.host = socket.gethostname()
        self.id = worker_id or f"{self.host[:32]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.live: dict[str, tuple[asyncio.Task[None], RunContext]] = {}
        self.step_executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="duro-step")
        self._signal_waiters: Waiters[tuple[str, str]] = Waiters()  # runs parked on a signal
        self._done_waiters: Waiters[str] = Waiters()  # waiting for a run to end
        self._slot_waiters: Waiters[str] = Waiters()  # runs in a limit's queue
        self.slot_takers: dict[str, OwnStep] = {}  # their hook steps, by slot id
        self._slot_news: dict[str, SlotRow] = {}  # rows delivered with a wakeup
        self._limits_changed = asyncio.Event()
        self._limits_deadline: int | None = None
        self._limits_task: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._schedules_changed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._schedule_task: asyncio.Task[None] | None = None
        self._beat_task: asyncio.Task[None] | None = None
        self._started = False
        self._last_heartbeat = 0
        self._listening = threading.Event()  # set: the LISTEN thread (PostgreSQL) stops
        self._claim_pending = False
        self._run_notice_queued = False  # a "run" notice is on its way from the listener to the loop
        self._full_pass = False  # the next pass looks at everything, whatever woke it
        self.full_passes = 0  # passes that looked at everything (not only claims) so far
        self._listener: threading.Thread | None = None
        lease_ms = engine.lease_ms
        self.lease = OwnLease(lease_ms)  # until when our runs are ours without asking the store
        self.watch = Watch(lease_ms, beat_every_ms=lease_ms // 3)  # the other workers' heartbeats
        self._monotonic = self.clock.monotonic_ms
        self._beating: asyncio.Future[None] | None = None  # the heartbeat in flight, if any
        self._beat_executor: ThreadPoolExecutor | None = None  # the heartbeat's own thread

    # -- I/O and time ----------------------------------------------------------------------------

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.engine.db(fn, *args)

    async def wait_for(self, awaitable: Awaitable[Any], deadline_ms: int | None) -> bool:
        """Wait for ``awaitable`` or until ``deadline_ms``; True when the awaitable finished first."""
        task = asyncio.ensure_future(awaitable)
        if deadline_ms is None:
            await task
            return True
        timer = asyncio.ensure_future(self.clock.sleep_until(deadline_ms))
        try:
            done, _ = await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (task, timer):
                if not pending.done():
                    pending.cancel()
        return task in done

    # -- waiters ---------------------------------------------------------------------------------

    def signal_waiter(self, run_id: str, name: str) -> asyncio.Event:
        return self._signal_waiters.add((run_id, name))

    def drop_signal_waiter(self, run_id: str, name: str, event: asyncio.Event) -> None:
        self._signal_waiters.drop((run_id, name), event)

    def notify_signal(self, run_id: str, name: str) -> None:
        self._signal_waiters.notify((run_id, name))

    def done_waiter(self, run_id: str) -> asyncio.Event:
        return self._done_waiters.add(run_id)

    def drop_done_waiter(self, run_id: str, event: asyncio.Event) -> None:
        self._done_waiters.drop(run_id, event)

    def notify_done(self, run_id: str) -> None:
        self._done_waiters.notify(run_id)

    def slot_waiter(self, slot_id: str, taker: OwnStep | None = None) -> asyncio.Event:
        """Park a run on its slot request. ``taker`` (run id, owner, hook step) lets a release in
        this process hand the slot over at once, writing the hook step itself (see
        ``SqlStore._hand_out``): no reservation, no confirming transaction."""
        event = self._slot_waiters.add(slot_id)
        if taker is not None:
            self.slot_takers[slot_id] = taker
        self.limits_changed()  # the safety pass runs while anyone waits
        return event

    def drop_slot_waiter(self, slot_id: str, event: asyncio.Event) -> None:
        self._slot_waiters.drop(slot_id, event)
        self.slot_takers.pop(slot_id, None)
        self._slot_news.pop(slot_id, None)

    def notify_slot(self, slot_id: str, row: SlotRow | None = None) -> None:
        """Wake the runs waiting on ``slot_id``; ``row``, when given, is its state as just committed
        (they need not read it again)."""
        if row is not None and slot_id in self.slot_takers:
            self._slot_news[slot_id] = row
        self._slot_waiters.notify(slot_id)

    def slot_news(self, slot_id: str) -> SlotRow | None:
        """The row a local decision delivered with the last wakeup of ``slot_id``'s waiter, once."""
        return self._slot_news.pop(slot_id, None)

    def limits_changed(self, due: int | None = None) -> None:
        """A slot became active or changed: wake the limits loop if it sleeps with nothing to do, or
        past ``due`` (the slot's next expiry)."""
        deadline = self._limits_deadline
        if deadline is None or (due is not None and due < deadline):
            self._limits_changed.set()

    def notify_cancelled(self, run_ids: list[str]) -> None:
        for run_id in run_ids:
            live = self.live.get(run_id)
            if live is not None:
                live[1].cancel_reason = "cancelled"
                live[0].cancel()
            self.notify_done(run_id)

    def schedules_changed(self) -> None:
        self._schedules_changed.set()

    def wake(self) -> None:
        """Ask the loop to look for claimable runs now (a client start, say)."""
        self._wakeup.set()

    # -- executing -------------------------------------------------------------------------------

    def launch(self, run: RunRecord, fresh: bool = False) -> None:
        """Execute ``run`` (owned by this worker) in a task of its own; ``fresh``: it has no history."""
        if run.id in self.live:
            return
        ctx = RunContext(self, run)
        task = asyncio.get_running_loop().create_task(
            self._execute(ctx, fresh), name=f"duro-run-{run.id}", context=contextvars.Context()
        )
        self.live[run.id] = (task, ctx)

    async def _execute(self, ctx: RunContext, fresh: bool) -> None:
        store, now, run = self.store, self.clock.now_ms, ctx.record
        try:
            if not fresh:
                ctx.load_history(settle_sleeps(await self.db(store.get_steps, run.id), run))
            _current.current_run.set(ctx)
            _current.current_engine.set(self.engine)
            await ctx.resume()  # claimed while our lease was in doubt: nothing of it runs until confirmed
            spec = self.engine.spec_for(run.workflow)
            try:
                inp = spec.input.load(run.input) if spec.takes_input else None
            except Exception as err:  # noqa: BLE001
                raise DuroError(
                    f"stored input of run {run.id!r} no longer fits workflow {spec.name!r}: "
                    f"{' '.join(str(err).split())}"
                ) from None
            result = await spec.invoke(inp, ctx)  # type: ignore[misc]
            if ctx.fatal is not None:
                raise ctx.fatal
            output = spec.dump_output(result)
            self.engine.checkpoint("run.finishing", run.id)
            if await self.engine.progress.write(FinishRun(run.id, self.id, "completed", output, None, now())):
                self.engine.events.emit("run.completed", run.id, now(), run.workflow)
        except (LostRun, EngineCrash):
            pass
        except asyncio.CancelledError:
            if ctx.cancel_reason != "cancelled":
                raise  # engine shutdown: the run stays unfinished and is recovered later
            await self._leave_queues_of_cancelled(run.id)
        except RunCancelled:
            pass
        except Exception as err:  # noqa: BLE001 - a failed run records whatever ended it
            cause = ctx.fatal if ctx.fatal is not None else err
            ended = now()
            if await self.engine.progress.write(
                FinishRun(run.id, self.id, "failed", None, describe_error(cause), ended)
            ):
                self.engine.events.emit("run.failed", run.id, ended, run.workflow, error=type(cause).__name__)
                await self.engine.leave_queues([run.id], ended)
        finally:
            self.live.pop(run.id, None)
            self.notify_done(run.id)
            if self._started and self.engine.is_serial(run.workflow):
                self.wake()  # the next run of a serial workflow may start

    async def _leave_queues_of_cancelled(self, run_id: str) -> None:
        """A run cancelled from elsewhere (a client engine, which may not know the project's limits,
        so could not take it out of their queues) leaves them here: a dead waiter must not hold up
        the queue. When the canceller did it already, nothing is left to leave (the hook step keeps
        the run's own end time, whoever closes it)."""
        try:
            await self.engine.leave_queues([run_id])
        except Exception as err:  # noqa: BLE001 - the store out of reach: the waiter times out in the end
            _store_trouble("taking a cancelled run out of the limits' queues", err)

    # -- the loop --------------------------------------------------------------------------------

    async def start(self) -> None:
        sent, now = self._monotonic(), self.clock.now_ms()
        await self.db(self.store.register_worker, self.id, self.engine.namespace, self.host, os.getpid(), now)
        self.lease.renewed(sent)
        self._last_heartbeat = now
        self._started = True
        loop = asyncio.get_running_loop()
        self._loop_task = loop.create_task(self._loop(), name=f"duro-worker-{self.id}")
        self._schedule_task = loop.create_task(self._schedule_loop(), name=f"duro-schedules-{self.id}")
        if self.engine.threaded_db:
            self._beat_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duro-heartbeat")
            self._beat_task = loop.create_task(self._heartbeat_loop(), name=f"duro-heartbeat-{self.id}")
        if self.engine.workspace.limits:
            self._limits_task = loop.create_task(self._limits_loop(), name=f"duro-limits-{self.id}")
        if self.store.notifies:
            self._listening = threading.Event()
            self._listener = threading.Thread(
                target=self.store.listen,
                args=(partial(self._deliver, loop), self._listening),
                name=f"duro-listen-{self.id}",
                daemon=True,
            )
            self._listener.start()

    def _deliver(self, loop: asyncio.AbstractEventLoop, message: list[Any]) -> None:
        """From the listener thread: hand a notification to the event loop, unless it has stopped.
        Runs to claim are announced once per start to every worker: one such notice on its way to
        the loop stands for those that follow it (its claim pass sees their runs too), and notices
        for other namespaces go no further."""
        if self._listening.is_set():
            return
        if message[:1] == ["run"]:
            if not self._claims_here(message):
                return
            if self._run_notice_queued:
                return
            self._run_notice_queued = True
        try:
            loop.call_soon_threadsafe(self._on_notice, message)
        except RuntimeError:  # the loop closed under us: nobody is left to wake
            self._listening.set()

    async def stop(self) -> None:
        """Stop claiming, drop in-flight runs and hand them back (recovered by the next worker)."""
        if not self._started:
            return
        await self._halt("shutdown")
        try:
            await self.db(self.store.remove_worker, self.id, self.clock.now_ms())
        except DuroError:
            pass

    async def abandon(self) -> None:
        """Stop as if the process died: runs stop where they are, nothing more is written, and the
        worker row stays until someone finds the worker dead."""
        await self._halt("crash")

    async def _halt(self, reason: str) -> None:
        """Cancel every run task and background loop of this worker and wait for them to stop."""
        self._started = False
        self._listening.set()  # the listener thread ends within its 0.1 s wait
        listener, self._listener = self._listener, None
        if listener is not None:
            await asyncio.get_running_loop().run_in_executor(None, listener.join, 5.0)
        for _, ctx in self.live.values():
            ctx.cancel_reason = reason
        tasks = [task for task, _ in self.live.values()]
        background = (self._loop_task, self._schedule_task, self._limits_task, self._beat_task)
        tasks += [task for task in background if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        beating, self._beating = self._beating, None
        if beating is not None:
            beating.cancel()
        executor, self._beat_executor = self._beat_executor, None
        if executor is not None:
            # a beat in flight finishes and gives its connection back before the engine closes the pool
            await asyncio.get_running_loop().run_in_executor(None, executor.shutdown)
        self.step_executor.shutdown(wait=False, cancel_futures=True)

    async def _limits_loop(self) -> None:
        """Apply slot expiries at their due time (max_hold, reservations, waiters' timeouts), and a
        safety pass every 15 s while any slot is active, for anything missed (a crash, a lost wakeup)."""
        while True:
            self._limits_changed.clear()
            now = self.clock.now_ms()
            try:
                changed, granted = await self.db(self.store.slots_expire, self.engine.limit_configs(), now)
                for row in changed + granted:
                    self.notify_slot(row.id)
                next_due = await self.db(self.store.next_slot_due, now)
            except Exception as err:  # noqa: BLE001 - the store out of reach for a moment: again soon
                _store_trouble("the limits pass", err)
                next_due = now + 1000
            deadline = None
            if next_due is not None or self._slot_waiters:
                deadline = now + SWEEP_MS if next_due is None else min(next_due, now + SWEEP_MS)
            self._limits_deadline = deadline
            await self.wait_for(self._limits_changed.wait(), deadline)

    async def _schedule_loop(self) -> None:
        """Fire due schedule windows; sleep until the next one, a change, or the periodic pass."""
        poll_ms = self.engine.poll_interval_ms
        while True:
            self._schedules_changed.clear()
            try:
                next_due = await fire_due(self.engine)
            except Exception as err:  # noqa: BLE001 - the store out of reach for a moment: again soon
                _store_trouble("the schedules pass", err)
                next_due = self.clock.now_ms() + 1000
            now = self.clock.now_ms()
            deadlines = [d for d in (next_due, None if poll_ms is None else now + poll_ms) if d is not None]
            await self.wait_for(self._schedules_changed.wait(), min(deadlines) if deadlines else None)

    async def _loop(self) -> None:
        """A full pass every poll interval; in between, a wakeup (runs announced by a start, here or
        in another process) only claims: the rest of a pass (dead local workers, other processes'
        changes) is the fallback for what notifications missed, and costs a worker a third of its
        CPU when every start wakes every worker."""
        poll_ms = self.engine.poll_interval_ms
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
                _store_trouble("the claim pass", err)
            await self.wait_for(self._wakeup.wait(), None if poll_ms is None else full_due)

    async def tick(self, full: bool = True) -> None:
        """One pass: heartbeat, reap dead local workers, claim runs, poll other processes' changes
        (``full=False``: the heartbeat if due and the claim only)."""
        now = self.clock.now_ms()
        if self._beat_task is None and now - self._last_heartbeat >= self.engine.lease_ms // 3:
            await self.beat()
        if not self.owns_runs():
            await self.confirm()  # claim nothing while our own lease is in doubt
        if full:
            await self._reap_local_dead()
        condemned = self.watch.condemned(self._monotonic())
        claimed = await self.db(
            self.store.claim_runs,
            Claim(
                worker_id=self.id,
                namespace=self.engine.namespace,
                workflows=self.engine.local_workflow_names(),
                now=now,
                serial=self.engine.serial_workflow_names(),
                condemned=condemned,
            ),
        )
        for worker, _ in condemned:
            self.watch.forget(worker)
        if condemned:
            log.warning(
                "duro worker %s: took over from %s (no heartbeat for a lease: %d ms)",
                self.id,
                ", ".join(worker for worker, _ in condemned),
                self.engine.lease_ms,
            )
        # A claimed run still executing here was not ours a moment ago (our row was condemned and we
        # joined again): another worker may have moved it on since, so our copy is stale. Drop it and
        # replay from the store.
        stale = [self.live[run.id][0] for run in claimed if run.id in self.live]
        for task in stale:
            task.cancel()
        if stale:
            await asyncio.gather(*stale, return_exceptions=True)
        for run in claimed:
            self.launch(run, fresh=run.fresh)
        if full:
            await self._poll_remote_changes()
            self.full_passes += 1

    # -- the lease -------------------------------------------------------------------------------

    def owns_runs(self) -> bool:
        """Whether our lease is good now: no other worker can have taken our runs."""
        return self.lease.valid(self._monotonic())

    async def confirm(self) -> None:
        """Wait until our lease is good again: a heartbeat went through (our row was there: nobody
        took our runs), or our row was gone, every run we held was dropped and we joined again.
        A store out of reach keeps us waiting here: no code of any run executes meanwhile."""
        pause = 0.05
        while self._started and not self.owns_runs():
            try:
                await self.beat()
            except Exception as err:  # noqa: BLE001 - the store out of reach: again, until it answers
                _store_trouble("confirming the lease", err)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def beat(self) -> None:
        """One heartbeat, shared by whoever asks while it is in flight (the heartbeat loop, runs
        waiting to confirm the lease, the claim pass)."""
        beating = self._beating
        if beating is None or beating.done():  # a finished beat's callback may not have run yet:
            # awaiting it again would return at once, and a confirm loop would spin on it forever
            if not self.engine.threaded_db:  # inline (the harness): no task, no loop turn
                await self._beat()
                return
            beating = self._beating = asyncio.ensure_future(self._beat())
            beating.add_done_callback(self._beat_done)
        await asyncio.shield(beating)

    def _beat_done(self, beating: asyncio.Future[None]) -> None:
        if self._beating is beating:
            self._beating = None
        if not beating.cancelled():
            beating.exception()  # retrieved: whoever awaited it was told

    async def _beat(self) -> None:
        if self._beat_executor is not None:
            call: Callable[..., Awaitable[Any]] = partial(self.engine.db_on, self._beat_executor)
        else:
            call = self.db
        sent, now = self._monotonic(), self.clock.now_ms()
        try:
            stamps = await call(self.store.heartbeat, self.id, now)
        except BaseException:
            self.watch.missed()
            raise
        self._last_heartbeat = now
        if stamps is not None:
            self.lease.renewed(sent)
            self.watch.beat(sent, self._monotonic(), stamps, self.id)
            return
        # Our row was gone: a claim condemned us (we were frozen, or cut off from the store, longer
        # than the lease) and may have taken any of our runs. Drop them all and join again: what
        # nobody took is handed back by the registration and claimed again, from the store.
        self.lease.lapse()
        self.watch.missed()
        dropped = self.drop_all()
        log.warning(
            "duro worker %s: found its lease taken over; dropped %d in-flight runs and joined again",
            self.id,
            dropped,
        )
        sent = self._monotonic()
        await call(self.store.register_worker, self.id, self.engine.namespace, self.host, os.getpid(), now)
        self.lease.renewed(sent)
        self.wake()

    def drop_all(self) -> int:
        """Stop every run this worker executes, at once (see ``notify_lost``); how many there were."""
        held = list(self.live)
        self.notify_lost(held)
        return len(held)

    async def _heartbeat_loop(self) -> None:
        """Keep the lease, every third of it, in a thread of its own: store calls blocked behind
        another process's transaction (one frozen while it holds a limit's lock, say) can occupy
        every store thread, and a worker that waits is alive, so its runs must stay its own."""
        while True:
            now = self.clock.now_ms()
            try:
                await self.beat()
            except Exception as err:  # noqa: BLE001 - the store out of reach for a moment: the next beat
                _store_trouble("the heartbeat", err)
            await self.clock.sleep_until(now + self.engine.lease_ms // 3)

    def _on_notice(self, message: list[Any]) -> None:
        """A change another process committed (see ``SqlStore._notify``), on the event loop."""
        kind = message[0]
        if kind == "run":
            self._run_notice_queued = False  # later notices reach the loop again (see _deliver)
        if not self._started:
            return
        if kind == "run":  # for this namespace: _deliver let no other through
            self._wake_for_claims()
        elif kind == "slot" and len(message) >= 3:
            self.notify_slot(str(message[1]))
            self.limits_changed(message[2] if isinstance(message[2], int) else None)
        elif kind == "signal" and len(message) >= 3:
            self.notify_signal(str(message[1]), str(message[2]))
        elif kind == "done" and len(message) >= 3:
            if message[2] == "cancelled" and message[1] in self.live:
                self.notify_cancelled([message[1]])
            self.notify_done(str(message[1]))
            if self.engine.serial_workflow_names():
                self.wake()  # the next run of a serial workflow may start
        elif kind == "sched":
            self.schedules_changed()
        elif kind == "limits":
            self._limits_changed.set()
        elif kind == "reconnected":  # notifications were lost while disconnected: look again
            self._full_pass = True
            self.wake()
            self.schedules_changed()
            self._limits_changed.set()

    def _claims_here(self, message: list[Any]) -> bool:
        """A ``["run", namespace]`` notice concerns this worker's namespace (or any)."""
        return len(message) < 2 or message[1] in (None, self.engine.namespace)

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

    def notify_lost(self, run_ids: list[str]) -> None:
        """These runs are no longer ours (ended elsewhere, or taken over): they stop at once and run
        no more code here (their next durable call, or the end of their wait, raises ``LostRun``)."""
        for run_id in run_ids:
            live = self.live.get(run_id)
            if live is not None:
                if live[1].fatal is None:
                    live[1].fatal = LostRun(run_id)
                live[0].cancel()

    async def _reap_local_dead(self) -> None:
        dead = [
            wid
            for wid, pid in await self.db(self.store.local_workers, self.host)
            if wid != self.id and not _process_alive(pid)
        ]
        for worker_id in dead:
            await self.db(self.store.remove_worker, worker_id, self.clock.now_ms())

    async def _poll_remote_changes(self) -> None:
        if self._signal_waiters:
            for run_id, name in await self.db(
                self.store.signalled, {r for r, _ in self._signal_waiters.keys()}
            ):
                self.notify_signal(run_id, name)
        if self._slot_waiters:
            states = await self.db(self.store.slot_states, self._slot_waiters.keys())
            for slot_id, state in states.items():
                if state != "waiting":
                    self.notify_slot(slot_id)
        watched = set(self._done_waiters.keys()) | set(self.live)
        if watched:
            statuses = await self.db(self.store.run_statuses, watched)
            for run_id, status in statuses.items():
                if status in TERMINAL:
                    if status == "cancelled":
                        self.notify_cancelled([run_id])
                    elif run_id in self.live:
                        self.notify_lost([run_id])
                    self.notify_done(run_id)
