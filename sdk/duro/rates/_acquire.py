"""Rates in workflow code: ``acquire_rate``.

A grant is recorded: the run's steps show the hook step ``rate · <name>``, written completed with
the grant (a replay returns it and takes nothing again), failed with :class:`RateTimeoutError`
past the timeout, or cancelled when the run is cancelled while it waits. While it waits, the run
may leave memory like any waiting run: the grant makes it due again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import NoReturn

from .._clock import Clock
from .._durations import Duration, to_ms
from .._errors import DuroError, RateLimited, RateTimeoutError, RunCancelled, raised_at
from .._events import EventBus, log_rate
from .._serde import describe_error, restore_error
from ..definitions._config import RateConfig, Workspace
from ..rules._slots import SWEEP_MS
from ..run import _current
from ..run._cancel import cancelled
from ..run._context import RunContext
from ..store import OwnStep, RateOutcome, RateWaitRow, StepRecord
from ..store._rates import grant_json
from ..worker._gateway import StoreGateway, store_trouble
from ..worker._wakeups import QueueWaits, Wakeups
from ._types import HOOK_PREFIX, RateGrant, check_cost, check_rate_key, grant_of, rate_config

STEP_TIMEOUT_MS = 86_400_000  # a step's grant waits as acquire_rate's default: 24 h


class RunRates:
    """A worker's runs' side of rates: the durable call ``acquire`` (each run's ``ctx.acquire_rate``
    and the module function come here)."""

    def __init__(
        self,
        *,
        workspace: Workspace,
        local: LocalRates,
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
        self,
        ctx: RunContext,
        name: str,
        key: str | None = None,
        cost: int = 1,
        timeout: Duration | None = "24h",
    ) -> RateGrant:
        """Take a grant of ``cost`` of rate ``name`` (``key``'s window, on a keyed rate), waiting in
        its queue up to ``timeout``."""
        config = rate_config(self._workspace, name)
        timeout_ms = None if timeout is None else to_ms(timeout, f"acquire_rate({name!r}) timeout")
        hook = f"{HOOK_PREFIX}{name}"
        try:
            key, cost = check_rate_key(config, key), check_cost(config, cost)
            refused = None
        except DuroError as err:
            refused = err
        seq, rec = ctx.take_seq("hook", hook)
        if refused is not None and rec is None:
            raise refused
        if rec is not None and rec.status == "completed":
            return grant_of(rec.result)
        if rec is not None and rec.status == "failed":
            raise raised_at(restore_error(rec.error), seq)
        wait_id = ctx.call_id(seq)  # a replay's waiting request is this attempt's: the same id
        store = self._gateway.store
        local = self._local
        if rec is not None and ctx.cancel is not None and ctx.cancel.stops_waits:
            await self._leave_cancelled(ctx, config, wait_id, rec)  # replayed to a cancel: it leaves
        if rec is None:
            now = ctx.now_ms()
            detail = {"wait_id": wait_id, "rate": name, "cost": cost}
            rec = StepRecord(
                seq,
                "hook",
                hook,
                "waiting",
                now,
                wake_at=None if timeout_ms is None else now + timeout_ms,
                detail=json.dumps(detail if key is None else {**detail, "key": key}),
            )
            requested: RateOutcome = await ctx.decide(
                store.rates.request,
                config,
                wait_id,
                ctx.run_id,
                key,
                cost,
                rec.wake_at,
                now,
                ctx.own(rec),
                local.local_waiters(),
            )
            row, rec = requested.wait, requested.step or rec
            ctx.recorded(rec)
            local.notify((g for g in requested.granted if g.id != wait_id), requested.handed)
            local.changed(requested.next_due)
        else:  # a replay: the request is in the store, in its place
            row = await self._gateway.call(store.rates.get_wait, wait_id)
        if row is not None and row.state == "granted" and rec.status == "completed":
            return self._granted(ctx, grant_of(rec.result))  # at once: the request closed its hook step
        row, hooked = await self._until_granted(ctx, config, wait_id, row, rec.wake_at, timeout, rec)
        rec = hooked or rec
        if rec.status != "completed":  # granted elsewhere: its hook step is ours to write
            rec = rec._replace(status="completed", ended_at=ctx.now_ms(), result=grant_json(row))
            await ctx.write(rec)
        await ctx.resume()
        return self._granted(ctx, grant_of(rec.result))

    async def for_step(self, ctx: RunContext, name: str, wait_id: str, waiting: StepRecord) -> None:
        """One grant of rate ``name`` before an attempt of a ``@step(rate=...)`` (``wait_id`` names
        the attempt). Granted at once, nothing more is written; else the step is recorded
        ``waiting`` (``waiting``, its record) while the run waits in the queue, up to 24 h."""
        config = rate_config(self._workspace, name)
        if config.per_key:
            raise DuroError(
                f"step {waiting.name!r}: rate {name!r} is keyed, and a step's rate= takes an unkeyed "
                f"grant; call acquire_rate({name!r}, key=...) in the workflow before the step instead"
            )
        now = ctx.now_ms()
        local = self._local
        requested: RateOutcome = await ctx.decide(
            self._gateway.store.rates.request,
            config,
            wait_id,
            ctx.run_id,
            None,
            1,
            None,
            now,
            None,
            local.local_waiters(),
        )
        local.notify((g for g in requested.granted if g.id != wait_id), requested.handed)
        self._local.changed(requested.next_due)
        row = requested.wait
        if row is None or row.state != "granted":
            await ctx.write(waiting)
            row, _ = await self._until_granted(ctx, config, wait_id, row, now + STEP_TIMEOUT_MS, "24h", None)
            await ctx.resume()
        self._granted(ctx, grant_of(grant_json(row)))

    async def pause_for(self, ctx: RunContext, limited: RateLimited) -> int:
        """A step raised ``limited``: pause its rate (or key) for everyone until its ``retry_after``
        has passed (a longer pause already set stands). Returns when the pause ends."""
        config = rate_config(self._workspace, limited.rate)
        key = None if limited.key is None else check_rate_key(config, limited.key)  # None: the whole rate
        pause_ms = to_ms(limited.retry_after, f"RateLimited({config.name!r}) retry_after")
        now = ctx.now_ms()
        store = self._gateway.store
        until = await self._gateway.call(store.rates.pause, config.name, key, now + pause_ms, now, True)
        assert until is not None  # a pause, not a resume
        log_rate("rate.paused", config.name, pause_ms, "a step")
        self._local.look_again()
        return until

    def _granted(self, ctx: RunContext, grant: RateGrant) -> RateGrant:
        self._events.publish(
            "rate.granted", ctx.run_id, ctx.now_ms(), ctx.workflow, rate=grant.rate, waited_ms=grant.waited_ms
        )
        return grant

    async def _until_granted(
        self,
        ctx: RunContext,
        config: RateConfig,
        wait_id: str,
        row: RateWaitRow | None,
        wake_at: int | None,
        timeout: Duration | None,
        hook: StepRecord | None,
    ) -> tuple[RateWaitRow, StepRecord | None]:
        """Wait for request ``wait_id`` (``row``, as last read) to be granted, idle (the run may
        leave memory), until ``wake_at``: then :class:`RateTimeoutError`, its ``hook`` step (if any)
        written failed as the request leaves the queue. A cancel leaves the queue too. Returns the
        granted request and the hook step as it stands (completed if the grant wrote it)."""
        store, local = self._gateway.store, self._local
        name = config.name
        waiter = local.wait(wait_id, None if hook is None else ctx.own(hook))
        try:
            while True:
                if row is None:
                    raise DuroError(
                        f"rate request {wait_id!r} of run {ctx.run_id!r} is missing from the store"
                    )
                if row.state == "granted":
                    return row, hook
                if row.state not in ("waiting", "timed_out"):  # taken off the queue: the run ended meanwhile
                    raise DuroError(
                        f"run {ctx.run_id!r} no longer waits for a grant of rate {name!r}: its request "
                        f"{wait_id!r} left the queue ({row.state})"
                    )
                if row.state == "timed_out" or (wake_at is not None and ctx.now_ms() >= wake_at):
                    error = RateTimeoutError(name, timeout)
                    failed = None
                    if hook is not None:
                        failed = hook._replace(
                            status="failed", ended_at=ctx.now_ms(), error=describe_error(error)
                        )
                    gave_up: RateOutcome = await ctx.decide(
                        store.rates.give_up,
                        config,
                        wait_id,
                        ctx.now_ms(),
                        None if failed is None else ctx.own(failed),
                        False,
                        local.local_waiters(),
                    )
                    local.notify(gave_up.granted, gave_up.handed)
                    if gave_up.wait is not None and gave_up.wait.state == "granted":
                        row = gave_up.wait  # the grant came in time after all: take it
                        continue
                    if failed is not None:
                        ctx.recorded(failed)
                    self._events.publish("rate.timed_out", ctx.run_id, ctx.now_ms(), ctx.workflow, rate=name)
                    log_rate("rate.timed_out", name)
                    await ctx.resume()
                    raise error if hook is None else raised_at(error, hook.seq)
                try:
                    await ctx.idle(
                        self._wakeups.wait_for(waiter.wait(), wake_at), "rate", wait_id, wake_at, None
                    )
                except RunCancelled:
                    local.drop(wait_id, waiter)
                    await self._leave_cancelled(ctx, config, wait_id, hook)
                waiter.clear()
                delivered = local.delivered(wait_id)
                if delivered is None:
                    row = await self._gateway.call(store.rates.get_wait, wait_id)
                else:  # a grant of this process: the request as committed, and the hook step it wrote
                    row, hook = delivered[0], delivered[1] or hook
        finally:
            local.drop(wait_id, waiter)

    async def _leave_cancelled(
        self, ctx: RunContext, config: RateConfig, wait_id: str, rec: StepRecord | None
    ) -> NoReturn:
        """The run was cancelled while it waited: its request leaves the queue and its hook step (if
        any: a step's grant has none) is closed ``cancelled``, in one transaction."""
        step = None if rec is None else rec._replace(status="cancelled", ended_at=ctx.now_ms())
        hook = None if step is None else ctx.own(step)
        store = self._gateway.store
        local = self._local
        left: RateOutcome = await ctx.decide(
            store.rates.give_up, config, wait_id, ctx.now_ms(), hook, True, local.local_waiters()
        )
        if step is not None:
            ctx.recorded(step)
        local.notify(left.granted, left.handed)
        assert ctx.cancel is not None
        ctx.cancel.delivered = True
        raise cancelled(ctx.run_id)


def _runtime_rates(run: _current.CurrentRun) -> tuple[RunContext, RunRates]:
    """The current run as what it is (a worker executes only ``RunContext``s), and its rates."""
    assert isinstance(run, RunContext)
    rates = run.runtime.rates
    assert isinstance(rates, RunRates)
    return run, rates


async def acquire_rate(
    name: str, key: str | None = None, cost: int = 1, timeout: Duration | None = "24h"
) -> RateGrant:
    """Take a grant of ``cost`` (1 by default) of rate ``name``, waiting in its durable FIFO queue
    up to ``timeout`` (24 h by default; ``None`` waits for ever): then :class:`RateTimeoutError`.
    The costs granted in any window of the rate's ``per`` add up to at most its ``limit`` (per key
    on a keyed rate, ``Rate(per_key=True)``, where ``key`` is required). A grant is recorded: a
    replay returns it and takes nothing again."""
    ctx, rates = _runtime_rates(_current.run_or_raise("acquire_rate"))
    return await rates.acquire(ctx, name, key, cost, timeout)


# -- a run's rate waits in this process ------------------------------------------------------------
# The runs of this process waiting for a rate's grant, and the pass that grants on time.
#
# A run waiting for a grant waits on an event keyed by its request's id. It is woken by a grant made
# here (its own request's decision, or this process's pass: the request as committed comes with the
# wake-up, and the pass writes its hook step completed in the grant's transaction), by another
# process's notice, or by the worker's poll pass. The pass decides every queue whose head is due: one timer per process, at the
# earliest ``next_due`` of the rates it declares (a queue's next due is written with each decision,
# so the timer never polls), and a safety pass every 15 s while a run of this process waits.

PRUNE_EVERY_MS = 60_000


class LocalRates(QueueWaits[RateWaitRow]):
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
        super().__init__()
        self._workspace = workspace
        self._gateway = gateway
        self._clock = clock
        self._wakeups = wakeups
        self._pruned = -PRUNE_EVERY_MS  # when the loop last pruned the ended waits
        # a grant for a run not waiting in this process's memory: it was evicted, and the store
        # has it due now (its worker's claim pass)
        self._on_absent = on_absent

    def local_waiters(self) -> Mapping[str, OwnStep]:
        """The runs waiting here with their hook steps, for a grant to write completed."""
        return self._waiting_here

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
                made = await self._gateway.call(store.rates.due, rates, now, self.local_waiters())
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
