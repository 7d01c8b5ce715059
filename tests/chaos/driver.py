"""The chaos driver: several ``duro worker`` processes on one store (a real PostgreSQL server, or one
SQLite file), thousands of runs started by a client engine, and meanwhile SIGKILLs (each killed
worker replaced at once), SIGSTOPs past the lease of workers whose runs sleep, wait on a signal or
wait in a limit's queue, and outages: PostgreSQL restarted (down shorter and longer than the lease),
or SQLite's write lock held by another connection longer than the lease. Then it waits for every run
to end and audits the store (``audit.py``).

Run it from the pytest suite (``tests/chaos/test_chaos.py``) or directly, for longer local runs::

    .venv/bin/python -m tests.chaos.driver [postgresql|sqlite]   # the default (CI) plan
    DURO_CHAOS_LONG=1 .venv/bin/python -m tests.chaos.driver sqlite
    DURO_CHAOS_SEED=1234 ...                                     # replay one run's random choices
    DURO_CHAOS_RUNS=300 DURO_CHAOS_WINDOW=25 ...                 # a quick one

The random choices (which worker dies when, which runs are cancelled, when signals are sent) come
from one seed, printed with the figures. Timing still differs between two runs of one seed: the
processes race.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from duro import ConcurrencyLimitError, DuroError, Engine
from tests.chaos.audit import Report, audit
from tests.chaos.database import Database, Error, SqliteDatabase, hold_sqlite_write_lock, wall_ms
from tests.chaos.plan import Event, Plan, plan_from_env, schedule
from tests.chaos.project.workflows.chaos import ANSWER
from tests.chaos.sampler import Sampler
from tests.chaos.workers import LEASE, PROJECT, WorkerPool
from tests.support.pgserver import PgServer, start_server
from tests.support.waiting import wait_until

SLOT_SETTLE_S = 5 + 15 + 10  # the longest max_hold, the 15 s safety pass, and a margin
# how long a SIGSTOP looks for a worker owning a run in its state: near the end of the start window
# (tenants at their quotas, runs finishing) a sleeping run can be scarce for several seconds
TARGET_PATIENCE_S = 20.0


# -- the client starting runs ----------------------------------------------------------------------

# by n % 20; n % 10 == 3 (a call and a parent) waits at most 1.5 s for its slots
WORKFLOWS = ["chaos.call"] * 7 + ["chaos.sync"] * 3 + ["chaos.ask"] * 3 + ["chaos.parent"] * 7


class Starter(threading.Thread):
    """Starts ``plan.runs`` top-level runs through a client engine (never entered) at an even pace,
    each on the next tenant whose quota admits it; cancels a few of them a moment later, and sends
    each ``chaos.ask`` run its ``answer`` signal 0.5-3 s after its start."""

    def __init__(self, url: str, plan: Plan) -> None:
        super().__init__(daemon=True, name="chaos-starter")
        self.url, self.plan = url, plan
        self.rng = random.Random(f"starter {plan.seed}")  # its own: the driver's thread draws from another
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.signalled: list[str] = []
        self.refused = 0
        self.errors: list[str] = []  # start, cancel or signal calls that failed (the store away): retried
        self.failure: BaseException | None = None
        self.halt = threading.Event()
        self.seconds = 0.0

    def run(self) -> None:
        began = time.perf_counter()
        try:
            asyncio.run(self._main())
        except BaseException as err:  # noqa: BLE001 - reported by the driver
            self.failure = err
        self.seconds = time.perf_counter() - began

    async def _main(self) -> None:
        client = Engine.from_project(PROJECT, database_url=self.url)
        loop = asyncio.get_running_loop()
        began = loop.time()
        give_up_at = began + self.plan.window * 1.6
        later: list[asyncio.Task[None]] = []
        tenant = 0
        try:
            for n in range(self.plan.runs):
                await asyncio.sleep(max(0.0, began + n * self.plan.window / self.plan.runs - loop.time()))
                run_id = f"r{n:06d}"
                while not self.halt.is_set() and loop.time() < give_up_at:
                    admitted = await self._start_on_some_tenant(client, run_id, n, tenant)
                    if admitted is not None:
                        tenant = admitted + 1
                        break
                    await asyncio.sleep(0.05)  # every tenant at its quota: let runs end
                else:
                    break
                self.started.append(run_id)
                if WORKFLOWS[n % 20] == "chaos.ask":
                    later.append(
                        asyncio.create_task(self._signal_later(client, run_id, self.rng.uniform(0.5, 3.0)))
                    )
                if self.rng.random() < self.plan.cancel_share:
                    later.append(
                        asyncio.create_task(self._cancel_later(client, run_id, self.rng.uniform(0.1, 3.0)))
                    )
            await asyncio.gather(*later)
        finally:
            client.close()

    async def _start_on_some_tenant(self, client: Engine, run_id: str, n: int, first: int) -> int | None:
        for k in range(self.plan.tenants):
            tenant = (first + k) % self.plan.tenants
            job = {
                "id": run_id,
                "tenant": f"t{tenant:02d}",
                "n": n,
                "patience": "1500ms" if n % 10 == 3 else "60s",
            }
            for _attempt in range(150):  # the same run id again after an error: idempotent
                try:
                    await client.start(WORKFLOWS[n % 20], job, run_id=run_id)
                    return tenant
                except ConcurrencyLimitError:
                    self.refused += 1
                    break
                except Exception as err:  # noqa: BLE001 - the store away: try again
                    self.errors.append(f"start {run_id}: {type(err).__name__}: {str(err)[:120]}")
                    await asyncio.sleep(0.1)
        return None

    async def _cancel_later(self, client: Engine, run_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        for _attempt in range(150):
            try:
                await client.cancel(run_id)
                self.cancelled.append(run_id)
                return
            except Exception as err:  # noqa: BLE001 - the store away: try again
                self.errors.append(f"cancel {run_id}: {type(err).__name__}: {str(err)[:120]}")
                await asyncio.sleep(0.1)

    async def _signal_later(self, client: Engine, run_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        for _attempt in range(150):
            try:
                await client.signal(run_id, ANSWER, {"n": run_id})
                self.signalled.append(run_id)
                return
            except DuroError as err:
                if "signals reach only runs that have not finished" in str(err):
                    return  # cancelled meanwhile
                self.errors.append(f"signal {run_id}: {type(err).__name__}: {str(err)[:120]}")
                await asyncio.sleep(0.1)
            except Exception as err:  # noqa: BLE001 - the store away: try again
                self.errors.append(f"signal {run_id}: {type(err).__name__}: {str(err)[:120]}")
                await asyncio.sleep(0.1)


# -- the chaos -------------------------------------------------------------------------------------

# A worker owning a run that is, right now: asleep (its last step a sleep that ends in more than
# 0.3 s), idle on a signal, or waiting in a limit's queue. Columns: owner, run, what it waits for.
OWNERS_IN_STATE = {
    "sleep": "SELECT r.owner, r.id, 'its sleep ends in ' || CAST(s.wake_at - {now} AS TEXT) || ' ms' "
    "FROM duro_runs r JOIN duro_steps s ON s.run_id = r.id "
    "WHERE r.status = 'suspended' AND r.owner IS NOT NULL AND s.kind = 'sleep' "
    "AND s.status = 'waiting' AND s.wake_at > {now} + 300 "
    "AND s.seq = (SELECT max(seq) FROM duro_steps WHERE run_id = r.id)",
    "signal": "SELECT r.owner, r.id, 'waiting for signal ' || s.name "
    "FROM duro_runs r JOIN duro_steps s ON s.run_id = r.id "
    "WHERE r.status = 'suspended' AND r.owner IS NOT NULL AND s.kind = 'signal' "
    "AND s.status = 'waiting' AND s.seq = (SELECT max(seq) FROM duro_steps WHERE run_id = r.id)",
    "queue": "SELECT r.owner, r.id, 'waiting in the queue of ' || q.limit_name "
    "FROM duro_slots q JOIN duro_runs r ON r.id = q.run_id "
    "WHERE q.state = 'waiting' AND r.owner IS NOT NULL "
    "AND r.status NOT IN ('completed', 'failed', 'cancelled')",
}


@dataclass
class Timeline:
    kills: int = 0
    stops: list[str] = field(default_factory=list)  # "sleep: chaos-w2-5 owning r000123 (...)"
    outages: list[str] = field(default_factory=list)  # "PostgreSQL fast, down 6.5s (7.31s in all)"
    missed_targets: list[str] = field(default_factory=list)  # states no stopped worker owned a run in
    log: list[tuple[float, str]] = field(default_factory=list)  # (seconds from the start, what happened)

    def note(self, at: float, text: str) -> None:
        self.log.append((at, text))

    def lines(self) -> list[str]:
        return [f"{at:7.1f}s {text}" for at, text in sorted(self.log)]


class Driver:
    def __init__(self, plan: Plan, workdir: Path, server: PgServer | None = None) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.workdir = workdir
        self.effects = workdir / "effects"
        self.effects.mkdir(parents=True, exist_ok=True)
        self._own_server = server is None and plan.store == "postgresql"
        self.server = server
        self.timeline = Timeline()
        self.outages: list[threading.Thread] = []
        self.began = time.perf_counter()  # the chaos's start, which the timeline counts from

    def run(self) -> Report:
        began = time.perf_counter()
        if self.plan.store == "sqlite":
            return self._run(f"sqlite:///{self.workdir / 'chaos.db'}", began)
        if self.server is None:
            self.server = start_server(durable=True)  # immediate restarts must not lose acknowledged commits
        database = self.server.create_database()
        try:
            return self._run(self.server.url(database), began)
        finally:
            if self._own_server:
                self.server.destroy()
            else:
                self.server.drop_database(database)

    def _run(self, url: str, began: float) -> Report:
        self.db = Database.for_url(url)
        schema = Engine.from_project(PROJECT, database_url=url)
        schema.store.create_schema()  # the sampler reads the tables from the first instant
        capacities = {name: config.capacity for name, config in schema.workspace.limits.items()}
        quota_limits = quota_limits_of(schema)
        schema.close()
        self.db.install_slot_log()
        pool = WorkerPool(url, self.plan.workers, self.workdir, self.effects)
        sampler = Sampler(url)
        starter = Starter(url, self.plan)
        waits: dict[str, float] = {}
        try:
            sampler.start()
            pool.start()
            starter.start()
            chaos_began = time.perf_counter()
            self._chaos(pool, sampler, starter, chaos_began)
            starter.halt.set()
            starter.join(timeout=60)
            for outage in self.outages:
                outage.join(timeout=60)
            for slot in list(pool.stopped):
                pool.cont(slot)
            waits["chaos"] = time.perf_counter() - chaos_began
            drain_began = time.perf_counter()
            waits["drain"] = self._wait(
                "every run ending",
                lambda: (
                    self.db.scalar(
                        "SELECT count(*) FROM duro_runs WHERE status NOT IN ('completed', 'failed', 'cancelled')"
                    )
                    == 0
                ),
                self.plan.drain,
                pool,
                sampler,
                drain_began,
            )
            settle_began = time.perf_counter()
            waits["slots"] = self._wait(
                "every slot coming back",
                lambda: (
                    self.db.scalar(
                        "SELECT count(*) FROM duro_slots WHERE state IN ('waiting', 'reserved', 'busy')"
                    )
                    == 0
                ),
                SLOT_SETTLE_S,
                pool,
                sampler,
                settle_began,
            )
        finally:
            sampler.stop.set()
            sampler.join(timeout=10)
            pool.shutdown()
            self.db.close()
        return audit(
            Database.for_url(url),
            self.effects,
            plan=self.plan,
            lives=pool.lives,
            worst=sampler.worst,
            capacities=capacities,
            quota_limits=quota_limits,
            starter=starter,
            timeline=self.timeline,
            findings=pool.findings,
            startup_failures=pool.startup_failures,
            waits=waits,
            seconds=time.perf_counter() - began,
        )

    def _wait(
        self, what: str, condition, bound: float, pool: WorkerPool, sampler: Sampler, began: float
    ) -> float:
        """Wait for ``condition`` within ``bound`` seconds, replacing dead or stalled workers meanwhile.
        Returns the seconds waited, or -1 when the bound passed (the audit then says what is left)."""

        def check() -> bool:
            pool.check(sampler.ages())
            return bool(condition())

        try:
            wait_until(check, timeout=bound, what=what, interval=0.25)
        except AssertionError:
            self.timeline.note(time.perf_counter() - began, f"gave up waiting for {what} after {bound:.0f}s")
            return -1.0
        return time.perf_counter() - began

    def _chaos(self, pool: WorkerPool, sampler: Sampler, starter: Starter, began: float) -> None:
        events = schedule(self.plan, self.rng)
        self.began = began
        pace = threading.Event()
        while events or starter.is_alive():
            now = time.perf_counter() - began
            while events and events[0].at <= now:
                follow = self._act(events.pop(0), pool, now)
                if follow is not None:
                    events = sorted([*events, follow], key=lambda e: e.at)
            pool.check(sampler.ages())
            if not events and now > self.plan.window * 1.7:
                starter.halt.set()
            pace.wait(0.1)

    def _act(self, event: Event, pool: WorkerPool, now: float) -> Event | None:
        """Do one chaos action; returns the event that follows it, if any (a stop's SIGCONT, or the
        stop again a moment later while no worker owns a run in its state)."""
        timeline = self.timeline
        if event.kind == "kill":
            slot = self.rng.choice(pool.running_slots())
            victim = pool.procs[slot][1]
            replacement = pool.kill(slot)
            timeline.kills += 1
            timeline.note(now, f"SIGKILL {victim.id} (pid {victim.pid}); started {replacement.id}")
        elif event.kind == "stop":
            state = str(event.arg)
            target = self._find_owner(state, pool)
            due = event.at if event.due is None else event.due
            if target is None and now - due < TARGET_PATIENCE_S:
                return dataclasses.replace(event, at=now + 0.25, due=due)
            if target is None:
                slot = self.rng.choice(pool.running_slots())
                why = (
                    f"{state}: no worker owned a run in that state for {TARGET_PATIENCE_S:.0f}s; "
                    f"stopped {pool.procs[slot][1].id} instead"
                )
                timeline.missed_targets.append(state)
            else:
                slot, run_id, waits_for = target
                why = f"{state}: {pool.procs[slot][1].id} owning {run_id} ({waits_for})"
            pool.stop(slot)
            timeline.stops.append(why)
            timeline.note(now, f"SIGSTOP for {self.plan.stop_for:.0f}s (lease {LEASE}), target {why}")
            return Event(now + self.plan.stop_for, "cont", slot)
        elif event.kind == "cont" and event.arg in pool.stopped:
            pool.cont(int(event.arg))
            timeline.note(now, f"SIGCONT {pool.procs[int(event.arg)][1].id}")
        elif event.kind == "outage":
            kind, seconds = self.plan.outages[int(event.arg)]
            what = "SQLite write lock held" if kind == "lock" else f"PostgreSQL {kind} restart, down"
            timeline.note(now, f"outage begins: {what} {seconds:.1f}s")
            outage = threading.Thread(
                target=self._outage, args=(kind, seconds), daemon=True, name="chaos-outage"
            )
            outage.start()
            self.outages.append(outage)
        return None

    def _find_owner(self, state: str, pool: WorkerPool) -> tuple[int, str, str] | None:
        """A running worker's slot that owns a run in ``state``, the run and what it waits for (chosen
        at random among them), or None."""
        try:
            rows = self.db.rows(OWNERS_IN_STATE[state].format(now=wall_ms()))
        except Error:
            return None  # the database away: look again in a moment
        found = sorted(
            (slot, run_id, waits_for)
            for owner, run_id, waits_for in rows
            if (slot := pool.running_slot_of(owner)) is not None
        )
        return self.rng.choice(found) if found else None

    def _outage(self, kind: str, seconds: float) -> None:
        """In a thread of its own (the chaos goes on meanwhile): restart PostgreSQL, down ``seconds``,
        or hold SQLite's write lock ``seconds``."""
        began = time.perf_counter()
        if kind == "lock":
            assert isinstance(self.db, SqliteDatabase)
            waited, held = hold_sqlite_write_lock(self.db.path, seconds)
            what = f"SQLite write lock held {held:.1f}s (waited {waited:.1f}s for it)"
        else:
            assert self.server is not None
            self.server.restart(kind, down=seconds)
            what = (
                f"PostgreSQL {kind} restart, down {seconds:.1f}s ({time.perf_counter() - began:.2f}s in all)"
            )
        self.timeline.outages.append(what)
        self.timeline.note(time.perf_counter() - self.began, f"outage over: {what}")


class _Probe:
    """Stands in for a job when asking a quota's key function for its prefix."""

    tenant = "probe"


def quota_limits_of(engine: Engine) -> dict[str, int]:
    """The project's quota limits by key prefix (``tenant``, ``kids``), as its workflows declare them."""
    limits: dict[str, int] = {}
    for spec in engine.workflows.values():
        if spec.concurrency is not None:
            limits[spec.concurrency.key(_Probe()).split(":")[0]] = spec.concurrency.limit
    return limits


def main() -> int:
    store = sys.argv[1] if len(sys.argv) > 1 else "postgresql"
    plan = plan_from_env(store)
    workdir = Path(tempfile.mkdtemp(prefix="duro-chaos-"))
    print(f"chaos: plan {plan.name} on {plan.store}, seed {plan.seed}, work files in {workdir}", flush=True)
    report = Driver(plan, workdir).run()
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
