"""The chaos driver: 4 ``duro worker`` processes on a real PostgreSQL, thousands of runs started by a
client engine, and meanwhile SIGKILLs (each killed worker replaced at once), SIGSTOPs past the lease
and restarts of the server. Then it waits for every run to end and audits the store (``audit.py``).

Run it from the pytest suite (``tests/chaos/test_chaos.py``) or directly, for longer local runs::

    .venv/bin/python -m tests.chaos.driver            # the default (CI) plan
    DURO_CHAOS_LONG=1 .venv/bin/python -m tests.chaos.driver
    DURO_CHAOS_SEED=1234 ...                           # replay one run's random choices
    DURO_CHAOS_RUNS=300 DURO_CHAOS_WINDOW=25 ...       # a quick one

The random choices (which worker dies when, which runs are cancelled) come from one seed, printed
with the figures. Timing still differs between two runs of one seed: the processes race.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from duro import ConcurrencyLimitError, Engine
from tests.chaos.audit import SLOT_LOG, Report, audit
from tests.chaos.sampler import Sampler
from tests.support.pgserver import PgServer, dsn, start_server
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent / "project"
WORKERS = 4
LEASE, LEASE_S = "3s", 3.0
POLL = "200ms"
STALL_S = 4 * LEASE_S       # a running (not stopped) worker whose heartbeat is older than this is stalled
SLOT_SETTLE_S = 5 + 15 + 10  # the longest max_hold, the 15 s safety pass, and a margin


def wall_ms() -> int:
    """Wall-clock milliseconds, the clock the workers stamp their effects with (same host)."""
    return time.time_ns() // 1_000_000  # noqa: TID251 - a chaos log lines up with the workers' stamps


@dataclass(frozen=True)
class Plan:
    """How much chaos: runs started over ``window`` seconds while workers are killed every
    ``kill_gap`` seconds, ``stops`` workers are stopped for ``stop_for`` seconds (past the 3 s lease)
    and the server restarts ``pg_restarts`` times (modes and seconds down taken in turn from
    ``pg_modes`` and ``pg_down``; down stays below the lease, so no lease lapses for it)."""

    name: str
    runs: int
    window: float
    kill_gap: tuple[float, float] = (4.0, 8.0)
    stops: int = 2
    stop_for: float = 7.0
    pg_restarts: int = 1
    pg_modes: tuple[str, ...] = ("fast",)
    pg_down: tuple[float, ...] = (0.5,)
    cancel_share: float = 0.02
    tenants: int = 16
    drain: float = 150.0
    seed: int = 0


DEFAULT = Plan("default", runs=1200, window=75.0)
LONG = Plan("long", runs=10_000, window=720.0, stops=8, stop_for=8.0, pg_restarts=4,
            pg_modes=("fast", "immediate"), pg_down=(0.5, 0.5, 0.0, 0.0), drain=300.0)


def plan_from_env() -> Plan:
    plan = LONG if os.environ.get("DURO_CHAOS_LONG") == "1" else DEFAULT
    seed = int(os.environ.get("DURO_CHAOS_SEED") or random.SystemRandom().randrange(1, 1_000_000))
    runs = int(os.environ.get("DURO_CHAOS_RUNS") or plan.runs)
    window = float(os.environ.get("DURO_CHAOS_WINDOW") or plan.window)
    return Plan(**{**plan.__dict__, "seed": seed, "runs": runs, "window": window})


# -- the workers -----------------------------------------------------------------------------------

@dataclass
class Life:
    """One worker process, from spawn to its end. ``fate``: killed (by the chaos), died (on its own),
    stalled (alive but no heartbeat: killed and replaced), exited at start (the database unreachable
    before its first heartbeat), or None (alive until the end)."""

    slot: int
    id: str
    pid: int
    log: Path
    started_ms: int
    ended_ms: int | None = None
    fate: str | None = None
    stops: list[tuple[int, int]] = field(default_factory=list)  # (SIGSTOP, SIGCONT) wall ms
    started_at: float = field(default_factory=time.perf_counter)


class WorkerPool:
    def __init__(self, url: str, workdir: Path, effects: Path) -> None:
        self.url, self.workdir = url, workdir
        path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
        self.env = {**os.environ, "PYTHONPATH": path, "CHAOS_EFFECTS_DIR": str(effects)}
        self.procs: dict[int, tuple[subprocess.Popen, Life]] = {}
        self.lives: list[Life] = []
        self.stopped: dict[int, int] = {}  # slot -> wall ms of its SIGSTOP
        self.findings: list[str] = []
        self.startup_failures: list[str] = []  # exited before its first heartbeat: the database was down
        self.seen: set[str] = set()            # workers whose heartbeat the sampler has seen
        self._generation = 0

    def spawn(self, slot: int) -> Life:
        self._generation += 1
        worker_id = f"chaos-w{slot}-{self._generation}"
        log = self.workdir / f"{worker_id}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "duro_devserver", "worker", str(PROJECT), "--database-url", self.url,
                 "--lease", LEASE, "--poll-interval", POLL, "--worker-id", worker_id],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        life = Life(slot=slot, id=worker_id, pid=process.pid, log=log, started_ms=wall_ms())
        self.procs[slot] = (process, life)
        self.lives.append(life)
        return life

    def start(self) -> None:
        for slot in range(WORKERS):
            self.spawn(slot)

    def running_slots(self) -> list[int]:
        return [slot for slot in self.procs if slot not in self.stopped]

    def _end(self, slot: int, fate: str) -> None:
        process, life = self.procs.pop(slot)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        life.ended_ms, life.fate = wall_ms(), fate
        if slot in self.stopped:  # a stopped worker killed (a stall found at SIGCONT, say)
            life.stops.append((self.stopped.pop(slot), life.ended_ms))

    def kill(self, slot: int) -> Life:
        """SIGKILL the worker in ``slot`` and start its replacement at once."""
        self._end(slot, "killed")
        return self.spawn(slot)

    def stop(self, slot: int) -> None:
        self.procs[slot][0].send_signal(signal.SIGSTOP)
        self.stopped[slot] = wall_ms()

    def cont(self, slot: int) -> None:
        process, life = self.procs[slot]
        process.send_signal(signal.SIGCONT)
        life.stops.append((self.stopped.pop(slot), wall_ms()))

    def check(self, ages: dict[str, tuple[int, int]]) -> None:
        """Replace workers that died on their own, or live on without a heartbeat: both are findings."""
        self.seen.update(ages)
        for slot, (process, life) in list(self.procs.items()):
            exited = process.poll() is not None
            if exited and life.id not in self.seen and "cannot open the database" in tail(life.log):
                self.startup_failures.append(f"{life.id} (exit code {process.returncode})")
                self._end(slot, "exited at start")
                self.spawn(slot)
                continue
            if process.poll() is not None:
                self.findings.append(f"worker {life.id} (pid {life.pid}) died on its own, exit code "
                                     f"{process.returncode}: {tail(life.log)}")
                self._end(slot, "died")
                self.spawn(slot)
                continue
            if slot in self.stopped or life.id not in ages:
                continue
            age_s = ages[life.id][1] / 1000
            resumed = max([cont for _, cont in life.stops] + [0])
            if age_s > STALL_S and time.perf_counter() - life.started_at > STALL_S \
                    and wall_ms() - resumed > STALL_S * 1000:
                self.findings.append(f"worker {life.id} (pid {life.pid}) is alive but its heartbeat is "
                                     f"{age_s:.1f}s old (lease {LEASE}): replaced. Log: {tail(life.log)}")
                self._end(slot, "stalled")
                self.spawn(slot)

    def shutdown(self) -> None:
        for slot in list(self.stopped):
            self.cont(slot)
        for process, _ in self.procs.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, life in list(self.procs.values()):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                self.findings.append(f"worker {life.id} did not stop within 20 s of SIGTERM")
            life.ended_ms = wall_ms()


def tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


# -- the client starting runs ----------------------------------------------------------------------

WORKFLOWS = ["chaos.call"] * 8 + ["chaos.sync"] * 5 + ["chaos.parent"] * 7  # by n % 20


class Starter(threading.Thread):
    """Starts ``plan.runs`` top-level runs through a client engine (never entered) at an even pace,
    each on the next tenant whose quota admits it; cancels a few of them a moment later."""

    def __init__(self, url: str, plan: Plan, rng: random.Random) -> None:
        super().__init__(daemon=True, name="chaos-starter")
        self.url, self.plan, self.rng = url, plan, rng
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.refused = 0
        self.errors: list[str] = []  # start or cancel calls that failed (the server restarting)
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
        cancels: list[asyncio.Task[None]] = []
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
                if self.rng.random() < self.plan.cancel_share:
                    cancels.append(asyncio.create_task(self._cancel_later(client, run_id,
                                                                          self.rng.uniform(0.1, 3.0))))
            await asyncio.gather(*cancels)
        finally:
            client.close()

    async def _start_on_some_tenant(self, client: Engine, run_id: str, n: int, first: int) -> int | None:
        for k in range(self.plan.tenants):
            tenant = (first + k) % self.plan.tenants
            job = {"id": run_id, "tenant": f"t{tenant:02d}", "n": n,
                   "patience": "1500ms" if n % 10 == 3 else "60s"}
            for _attempt in range(100):  # the same run id again after an error: idempotent
                try:
                    await client.start(WORKFLOWS[n % 20], job, run_id=run_id)
                    return tenant
                except ConcurrencyLimitError:
                    self.refused += 1
                    break
                except Exception as err:  # noqa: BLE001 - the server restarting: try again
                    self.errors.append(f"start {run_id}: {type(err).__name__}: {str(err)[:120]}")
                    await asyncio.sleep(0.1)
        return None

    async def _cancel_later(self, client: Engine, run_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        for _attempt in range(100):
            try:
                await client.cancel(run_id)
                self.cancelled.append(run_id)
                return
            except Exception as err:  # noqa: BLE001 - the server restarting: try again
                self.errors.append(f"cancel {run_id}: {type(err).__name__}: {str(err)[:120]}")
                await asyncio.sleep(0.1)


# -- the chaos -------------------------------------------------------------------------------------

def schedule(plan: Plan, rng: random.Random) -> list[tuple[float, str]]:
    """(seconds from the start, action): kills at random gaps; stops and server restarts spread
    evenly over the window (each stop's SIGCONT follows ``stop_for`` seconds later)."""
    events: list[tuple[float, str]] = []
    at = rng.uniform(*plan.kill_gap)
    while at < plan.window:
        events.append((at, "kill"))
        at += rng.uniform(*plan.kill_gap)
    specials = ["stop"] * plan.stops + ["pg"] * plan.pg_restarts
    rng.shuffle(specials)
    if "pg" in specials and specials[0] != "pg" and plan.pg_restarts == 1:
        specials.remove("pg")  # a lone restart goes in the middle of the window
        specials.insert(len(specials) // 2, "pg")
    span = plan.window / (len(specials) + 1)
    for i, kind in enumerate(specials):
        at = span * (i + 1) + rng.uniform(-0.2, 0.2) * span
        events.append((at, kind))
    return sorted(events)


@dataclass
class Timeline:
    kills: int = 0
    stops: int = 0
    pg_restarts: list[str] = field(default_factory=list)  # "fast 0.21s", ...
    log: list[str] = field(default_factory=list)

    def note(self, at: float, text: str) -> None:
        self.log.append(f"{at:7.1f}s {text}")


class Driver:
    def __init__(self, plan: Plan, workdir: Path, server: PgServer | None = None) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.workdir = workdir
        self.effects = workdir / "effects"
        self.effects.mkdir(parents=True, exist_ok=True)
        self._own_server = server is None
        self.server = server
        self.timeline = Timeline()
        self._conn: psycopg.Connection | None = None

    # -- plumbing --------------------------------------------------------------------------------

    def _scalar(self, sql: str) -> int:
        for _attempt in range(50):
            try:
                if self._conn is None:
                    self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=2)
                return self._conn.execute(sql).fetchone()[0]
            except psycopg.OperationalError:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                threading.Event().wait(0.2)
        raise AssertionError(f"the database did not answer: {sql}")

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> Report:
        began = time.perf_counter()
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
        self.url, self.dsn = url, dsn(url)
        schema = Engine.from_project(PROJECT, database_url=url)
        schema.store.create_schema()  # the sampler reads the tables from the first instant
        capacities = {name: config.capacity for name, config in schema.workspace.limits.items()}
        quota_limits = quota_limits_of(schema)
        schema.close()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(SLOT_LOG)
        pool = WorkerPool(url, self.workdir, self.effects)
        sampler = Sampler(self.dsn)
        starter = Starter(url, self.plan, self.rng)
        waits: dict[str, float] = {}
        try:
            sampler.start()
            pool.start()
            starter.start()
            chaos_began = time.perf_counter()
            self._chaos(pool, sampler, starter, chaos_began)
            starter.halt.set()
            starter.join(timeout=60)
            for slot in list(pool.stopped):
                pool.cont(slot)
            waits["chaos"] = time.perf_counter() - chaos_began
            drain_began = time.perf_counter()
            waits["drain"] = self._wait("every run ending", lambda: self._scalar(
                "SELECT count(*) FROM duro_runs WHERE status NOT IN ('completed', 'failed', 'cancelled')")
                == 0, self.plan.drain, pool, sampler, drain_began)
            settle_began = time.perf_counter()
            waits["slots"] = self._wait("every slot coming back", lambda: self._scalar(
                "SELECT count(*) FROM duro_slots WHERE state IN ('waiting', 'reserved', 'busy')") == 0,
                SLOT_SETTLE_S, pool, sampler, settle_began)
        finally:
            sampler.stop.set()
            sampler.join(timeout=10)
            pool.shutdown()
            if self._conn is not None:
                self._conn.close()
        return audit(self.dsn, self.effects, plan=self.plan, lives=pool.lives, worst=sampler.worst,
                     capacities=capacities, quota_limits=quota_limits, starter=starter,
                     timeline=self.timeline, findings=pool.findings,
                     startup_failures=pool.startup_failures, waits=waits,
                     seconds=time.perf_counter() - began)

    def _wait(self, what: str, condition, bound: float, pool: WorkerPool, sampler: Sampler,
              began: float) -> float:
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
        events: list[tuple[float, str, int]] = [(at, kind, -1) for at, kind in schedule(self.plan, self.rng)]
        pg_modes = list(self.plan.pg_modes)
        pace = threading.Event()
        while events or starter.is_alive():
            now = time.perf_counter() - began
            while events and events[0][0] <= now:
                _, kind, slot = events.pop(0)
                stopped = self._act(kind, slot, pool, pg_modes, now)
                if stopped is not None:
                    events = sorted([*events, (now + self.plan.stop_for, "cont", stopped)])
            pool.check(sampler.ages())
            if not events and now > self.plan.window * 1.7:
                starter.halt.set()
            pace.wait(0.1)

    def _act(self, kind: str, slot: int, pool: WorkerPool, pg_modes: list[str], now: float) -> int | None:
        """Do one chaos action; a stop returns the slot stopped (its SIGCONT is scheduled)."""
        timeline = self.timeline
        if kind == "kill":
            running = pool.running_slots()
            slot = self.rng.choice(running)
            victim = pool.procs[slot][1]
            replacement = pool.kill(slot)
            timeline.kills += 1
            timeline.note(now, f"SIGKILL {victim.id} (pid {victim.pid}); started {replacement.id}")
        elif kind == "stop":
            slot = self.rng.choice(pool.running_slots())
            pool.stop(slot)
            timeline.stops += 1
            timeline.note(now, f"SIGSTOP {pool.procs[slot][1].id} for {self.plan.stop_for:.0f}s "
                               f"(lease {LEASE})")
            return slot
        elif kind == "cont" and slot in pool.stopped:
            pool.cont(slot)
            timeline.note(now, f"SIGCONT {pool.procs[slot][1].id}")
        elif kind == "pg":
            done = len(timeline.pg_restarts)
            mode = pg_modes[done % len(pg_modes)]
            down = self.plan.pg_down[done % len(self.plan.pg_down)]
            began = time.perf_counter()
            assert self.server is not None
            self.server.restart(mode, down=down)
            took = time.perf_counter() - began
            timeline.pg_restarts.append(f"{mode} {took:.2f}s")
            timeline.note(now, f"PostgreSQL restarted ({mode}, down {down:.1f}s, {took:.2f}s in all)")
        return None


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
    plan = plan_from_env()
    workdir = Path(tempfile.mkdtemp(prefix="duro-chaos-"))
    print(f"chaos: plan {plan.name}, seed {plan.seed}, work files in {workdir}", flush=True)
    report = Driver(plan, workdir).run()
    print(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
