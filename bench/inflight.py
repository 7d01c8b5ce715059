"""In-flight runs at scale: a worker's memory with a million sleeping runs in the store, the
time from a SIGKILL to the first due timer fired, and the start-to-all-suspended rate; duro on
SQLite and PostgreSQL, and DBOS Transact as far as it goes.

Run it from the repo root:

    .venv/bin/python bench/inflight.py --json bench/results/inflight.json     # full size
    .venv/bin/python bench/inflight.py --quick --json bench/results/inflight_quick.json
    .venv/bin/python bench/inflight.py --quick --stores sqlite --no-dbos      # a smoke run
    .venv/bin/python bench/inflight.py --sleepers 200000 --starts 20000 --dbos-starts 5000

The workflow is ``napper``: ``async def napper(i: int) -> int: await sleep("7d"); return i``, in a
scratch project (``workflows/napper.py``). Every duro worker is a real process, ``python -m
duro_devserver worker PROJECT --database-url URL --worker-id ID --max-resident-runs R
--max-concurrent-runs C --unload-after 5s`` (WorkerOptions' defaults unless given). RSS is VmRSS
from /proc/PID/status (sampled every 0.2 s; VmHWM is the kernel's peak), CPU from /proc/PID/stat.
One PostgreSQL server for the run (tests/support/pgserver.py: fsync=off, synchronous_commit=off), a
fresh database per phase; SQLite is a fresh file per phase (duro's default: WAL, synchronous=NORMAL).

duro, per store (``--stores sqlite,postgres``):

1. idle      a worker on an empty store, settled ``--settle`` seconds: its RSS.
2. insert    ``--sleepers`` runs written straight into the store, in the shape a sleeping run has
             (a ``duro_runs`` row: status ``suspended``, owner NULL, ``wake_at`` = ``due_at`` = its
             wake time, 3 to 10 days ahead; one ``duro_steps`` row: seq 0, kind and name ``sleep``,
             status ``waiting``, ``wake_at``): SQLite one transaction of two ``executemany``,
             PostgreSQL ``COPY`` then ``VACUUM ANALYZE`` (what autovacuum would do soon after).
3. loaded    a worker started on that store (time to its ``duro_workers`` row), settled
             ``--settle`` seconds: RSS, peak, CPU while idle.
4. kill      two groups of timed runs are written the same way around a planned kill instant K
             (0.5 s ahead): ``--due`` runs due from K + ``--due-lead`` s (3), spread over
             ``--due-spread`` s (the new worker is up by then: timer precision after a restart), and
             ``--overdue`` runs due at K + ``--overdue-lead`` s (0.5; within 0.1 s: already late when
             the new worker comes up, so this measures the recovery itself). At K the worker is
             SIGKILLed and a new one started at once. From the store (polled every 20 ms, then the
             runs' own ``ended_at``): the new worker's start to its row; per group the kill to the
             first and last run done and each run's lateness = ``ended_at`` - its wake time (p50,
             p99, max); the new worker's RSS after it settled.
5. starts    a fresh store and a worker; this script's client (``Engine(url)`` never entered,
             ``register_remote("napper")``, ``--clients`` coroutines; ``--client-procs`` > 1 splits
             them over processes) starts ``--starts`` runs. Rate = runs / (the last run's
             suspension, its ``updated_at`` in the store - the first start); the client's own start
             rate; the worker's RSS before, peak (sampled, and VmHWM) and after; and, sampled every
             quarter second from the store, the peak number of runs owned, ``running`` and ``pending`` (to
             compare with ``max_concurrent_runs`` / ``max_resident_runs``).

DBOS Transact (unless ``--no-dbos``), per store: the same workflow as a ``@DBOS.workflow`` (async,
``DBOS.sleep_async(7 days)``), on its SQLite system database (WAL + synchronous=NORMAL, duro's
durability) or the same PostgreSQL server (``system_database_url``). DBOS is a process-wide
singleton, so each DBOS process is this script (``--dbos-child``), ``application_version`` pinned:

6. first     launch (RSS settled: idle), then ``DBOS.start_workflow_async`` x ``--dbos-starts``
             (``--dbos-clients`` coroutines): rate = N / (every ``DBOS.sleep`` checkpoint in
             ``operation_outputs`` - the first start); RSS with them pending, settled. Then the two
             groups of timed workflows as in 4 (``DBOS.sleep_async`` until their wake time; the kill
             instant K is planned 1 s + 10 ms per workflow ahead, to leave time to start them), and
             SIGKILL at K.
7. restart   a new process on the same database: ``DBOS.launch()``'s duration, a probe (a new one-step
             workflow, start to result) right after it, the time until every pending workflow was
             re-executed up to its sleep again (DBOS recovers by re-enqueueing each pending workflow
             and running it from the start: counted in the process), per group of timed workflows
             the kill to the first and last done and their lateness (``completed_at`` - wake time),
             RSS after.

Every wait is bounded (``--phase-timeout``, ``--dbos-timeout``); a phase that runs out is reported as
"did not finish in X s" with how far it got. ``--quick`` shrinks everything for a smoke run (20,000
sleepers, 2,000 starts, 1,000 DBOS starts, 5 s settle). Prints a table; ``--json PATH`` writes it all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _support
from _support import scratch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

WORKFLOW = "napper"
NAPPER_PY = '''"""bench/inflight.py's workflow: one long sleep."""

from duro import sleep, workflow


@workflow
async def napper(i: int) -> int:
    await sleep("7d")
    return i
'''
DAY_MS = 86_400_000
MIB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _columns(table: str) -> tuple[str, ...]:
    """A duro table's columns, in order, read from the package: rows written here follow the schema."""
    from duro.store import _tables

    return tuple(getattr(_tables, table).c.keys())


RUN_COLS = _columns("runs")
STEP_COLS = _columns("steps")


def _row(columns: tuple[str, ...], values: dict[str, object]) -> tuple:
    """A row in ``columns``' order: ``values``, NULL for every other column (what a run that never
    met a crash, a cancel or a tracer provider has)."""
    unknown = set(values) - set(columns)
    assert not unknown, f"not columns of duro's table: {sorted(unknown)}"
    return tuple(values.get(name) for name in columns)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- /proc -----------------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid`` in MiB (empty once it is gone)."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024 / MIB
    except OSError:
        pass
    return out


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class RssSampler:
    """Samples a process's VmRSS every ``every`` seconds in a thread; ``peak`` is the largest seen."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.pid, self.every = pid, every
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, proc_status(self.pid).get("VmRSS", 0.0))
            self._stop.wait(self.every)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, proc_status(self.pid).get("VmRSS", 0.0))


class StoreSampler:
    """Samples, every ``every`` seconds (0.25) in a thread on its own connection, how many runs a worker
    holds in the store (``owner`` set) and how many are ``running`` / ``pending``: the peaks."""

    def __init__(self, kind: str, info: dict, every: float = 0.25) -> None:
        self.kind, self.info, self.every = kind, info, every
        self.peak = {"owned": 0, "running": 0, "pending": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        db = Db(self.kind, self.info)
        try:
            while not self._stop.is_set():
                owned, running, pending = db.all(
                    "SELECT count(*) FILTER (WHERE owner IS NOT NULL), "
                    "count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'pending') "
                    "FROM duro_runs"
                )[0]
                for key, value in (("owned", owned), ("running", running), ("pending", pending)):
                    self.peak[key] = max(self.peak[key], int(value or 0))
                self._stop.wait(self.every)
        finally:
            db.close()

    def __enter__(self) -> StoreSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def settle(pid: int, seconds: float, check: Callable[[], None]) -> dict[str, float]:
    """Let a process sit ``seconds``: its RSS at the end, the peak sampled over the window, VmHWM,
    and its CPU over the window (% of one core)."""
    cpu0, begin = cpu_seconds(pid), time.perf_counter()
    with RssSampler(pid) as sampler:
        deadline = begin + seconds
        while time.perf_counter() < deadline:
            check()
            time.sleep(min(0.2, max(0.0, deadline - time.perf_counter())))
    cpu = cpu_seconds(pid) - cpu0
    status = proc_status(pid)
    return {
        "rss_mib": status.get("VmRSS", float("nan")),
        "rss_peak_sampled_mib": sampler.peak,
        "hwm_mib": status.get("VmHWM", float("nan")),
        "cpu_pct": 100 * cpu / (time.perf_counter() - begin),
        "seconds": seconds,
    }


# -- the store, from this script -------------------------------------------------------------------


class Db:
    """A plain connection to a phase's database (autocommit), for setup and polling. SQL is written
    with ``?`` placeholders."""

    def __init__(self, kind: str, info: dict) -> None:
        self.kind = kind
        if kind == "sqlite":
            self.conn: Any = sqlite3.connect(info["path"], isolation_level=None, timeout=60)
        else:
            import psycopg

            self.conn = psycopg.connect(info["dsn"], autocommit=True)

    def _sql(self, sql: str) -> str:
        return sql if self.kind == "sqlite" else sql.replace("?", "%s")

    def all(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        return list(self.conn.execute(self._sql(sql), tuple(params)).fetchall())

    def one(self, sql: str, params: tuple | list = ()) -> Any:
        return self.all(sql, params)[0][0]

    def close(self) -> None:
        self.conn.close()


def marks(n: int) -> str:
    return ", ".join("?" * n)


def create_schema(url: str) -> None:
    from duro.store import SqlStore

    store = SqlStore(url)
    try:
        store.create_schema()
    finally:
        store.close()


def sleeping_run(run_id: str, i: int, created: int, started: int, wake: int) -> tuple[tuple, tuple]:
    """A run of napper asleep in its ``sleep("7d")``, unowned, due when it wakes: its duro_runs
    and duro_steps rows (the shape a worker leaves when it unloads it)."""
    run = _row(
        RUN_COLS,
        {
            "id": run_id,
            "namespace": "default",
            "workflow": WORKFLOW,
            "version": "1",
            "status": "suspended",
            "input": str(i),
            "tags": "[]",
            "wake_at": wake,
            "created_at": created,
            "updated_at": started,
            "due_at": wake,
        },
    )
    step = _row(
        STEP_COLS,
        {
            "run_id": run_id,
            "seq": 0,
            "kind": "sleep",
            "name": "sleep",
            "status": "waiting",
            "started_at": started,
            "wake_at": wake,
        },
    )
    return run, step


def sleeper(i: int, t0: int) -> tuple[tuple, tuple]:
    """Sleeper ``i``: created in the hour before ``t0``, waking 3 to 10 days after it."""
    created = t0 - 3_600_000 + i % 3_500_000
    started = created + 5
    wake = t0 + 3 * DAY_MS + (i * 7919) % (7 * DAY_MS)
    return sleeping_run(f"{created:012x}{i:020x}", i, created, started, wake)


def insert_sleepers(kind: str, info: dict, n: int) -> dict[str, float]:
    """``n`` sleeping runs written straight into the store. (seconds to write, seconds to analyze)"""
    t0 = now_ms()
    begin = time.perf_counter()
    analyze = 0.0
    if kind == "sqlite":
        conn = sqlite3.connect(info["path"], isolation_level=None, timeout=60)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                f"INSERT INTO duro_runs ({', '.join(RUN_COLS)}) VALUES ({marks(len(RUN_COLS))})",
                (sleeper(i, t0)[0] for i in range(n)),
            )
            conn.executemany(
                f"INSERT INTO duro_steps ({', '.join(STEP_COLS)}) VALUES ({marks(len(STEP_COLS))})",
                (sleeper(i, t0)[1] for i in range(n)),
            )
            conn.execute("COMMIT")
        finally:
            conn.close()
        written = time.perf_counter() - begin
    else:
        import psycopg

        with psycopg.connect(info["dsn"]) as conn, conn.cursor() as cur:
            with cur.copy(f"COPY duro_runs ({', '.join(RUN_COLS)}) FROM STDIN") as copy:
                for i in range(n):
                    copy.write_row(sleeper(i, t0)[0])
            with cur.copy(f"COPY duro_steps ({', '.join(STEP_COLS)}) FROM STDIN") as copy:
                for i in range(n):
                    copy.write_row(sleeper(i, t0)[1])
        written = time.perf_counter() - begin
        mark = time.perf_counter()
        with psycopg.connect(info["dsn"], autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE duro_runs")
            conn.execute("VACUUM ANALYZE duro_steps")
        analyze = time.perf_counter() - mark
    return {"rows": n, "seconds": written, "rows_per_s": n / written, "analyze_seconds": analyze}


def due_plan(anchor_ms: int, args: argparse.Namespace) -> dict[str, list[int]]:
    """The wake times (ms) of the timed runs, by group, around the planned kill at ``anchor_ms``:
    ``due`` from ``--due-lead`` s after it, spread over ``--due-spread`` s (the new worker is up by
    then); ``overdue`` at ``--overdue-lead`` s after it, within 0.1 s (passed before the new worker
    or process is up)."""

    def spread(n: int, lead: float, over: float) -> list[int]:
        first = anchor_ms + int(lead * 1000)
        return [first + (int(over * 1000 * k / (n - 1)) if n > 1 else 0) for k in range(n)]

    return {
        "due": spread(args.due, args.due_lead, args.due_spread),
        "overdue": spread(args.overdue, args.overdue_lead, 0.1),
    }


def spec_plan(anchor_ms: int, spec: dict) -> dict[str, list[int]]:
    """``due_plan`` from a DBOS child's spec."""
    return due_plan(
        anchor_ms,
        argparse.Namespace(
            **{k: spec[k] for k in ("due", "due_lead", "due_spread", "overdue", "overdue_lead")}
        ),
    )


def insert_timed(db: Db, plan: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """Napper runs asleep since a second ago, waking at the planned times: {group: {id: wake}}."""
    now = now_ms()
    rows, groups = [], {}
    i = 10**12
    for group, wakes in plan.items():
        groups[group] = {}
        for wake in wakes:
            run, step = sleeping_run(f"{now:012x}{i:020x}", i, now - 1000, now - 1000, wake)
            rows.append((run, step))
            groups[group][run[0]] = wake
            i += 1
    if db.kind == "sqlite":
        db.conn.execute("BEGIN IMMEDIATE")
    else:
        db.conn.autocommit = False
    cur = db.conn.cursor()
    cur.executemany(
        db._sql(f"INSERT INTO duro_runs ({', '.join(RUN_COLS)}) VALUES ({marks(len(RUN_COLS))})"),
        [r for r, _ in rows],
    )
    cur.executemany(
        db._sql(f"INSERT INTO duro_steps ({', '.join(STEP_COLS)}) VALUES ({marks(len(STEP_COLS))})"),
        [st for _, st in rows],
    )
    cur.close()
    if db.kind == "sqlite":
        db.conn.execute("COMMIT")
    else:
        db.conn.commit()
        db.conn.autocommit = True
    return groups


def timer_figures(
    wakes: dict[str, float], ends: dict[str, float], kill_ms: float, spawn_ms: float
) -> dict[str, Any]:
    """One group's figures: ``wakes`` and ``ends`` (the runs done) in epoch ms."""
    out: dict[str, Any] = {
        "runs": len(wakes),
        "completed": len(ends),
        "first_wake_after_kill_s": (min(wakes.values()) - kill_ms) / 1000,
        "restart_spawn_after_kill_s": (spawn_ms - kill_ms) / 1000,
    }
    if ends:
        out |= {
            "kill_to_first_fired_s": (min(ends.values()) - kill_ms) / 1000,
            "restart_to_first_fired_s": (min(ends.values()) - spawn_ms) / 1000,
            "kill_to_last_fired_s": (max(ends.values()) - kill_ms) / 1000,
            "lateness": lateness_summary([ends[k] - wakes[k] for k in ends]),
        }
    if len(ends) < len(wakes):
        out["did_not_finish"] = f"{len(ends)} of {len(wakes)} runs done within the phase's bound"
    return out


# -- duro worker processes -------------------------------------------------------------------------


def write_project(root: Path) -> Path:
    (root / "workflows").mkdir(parents=True)
    (root / "workflows" / "__init__.py").write_text("")
    (root / "workflows" / "napper.py").write_text(NAPPER_PY)
    return root


class WorkerProc:
    """One ``duro worker`` process, its output in a log file."""

    def __init__(self, project: Path, url: str, worker_id: str, args: argparse.Namespace) -> None:
        self.worker_id = worker_id
        self.logfile = project.parent / f"{worker_id}.log"
        self.command = [
            sys.executable,
            "-m",
            "duro_devserver",
            "worker",
            str(project),
            "--database-url",
            url,
            "--worker-id",
            worker_id,
            "--max-resident-runs",
            str(args.max_resident_runs),
            "--max-concurrent-runs",
            str(args.max_concurrent_runs),
            "--unload-after",
            args.unload_after,
        ]
        self.proc: subprocess.Popen | None = None
        self.spawned_ms = 0
        self.spawned_perf = 0.0

    def start(self) -> WorkerProc:
        with open(self.logfile, "wb") as out:
            self.spawned_ms, self.spawned_perf = now_ms(), time.perf_counter()
            self.proc = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.logfile.parent,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def check(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            tail = self.logfile.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"worker {self.worker_id} exited with {self.proc.returncode}:\n{tail}")

    def wait_registered(self, db: Db, timeout: float) -> float:
        """Seconds from the spawn until the worker's row is in duro_workers."""
        deadline = time.perf_counter() + timeout
        while not db.one("SELECT count(*) FROM duro_workers WHERE id = ?", (self.worker_id,)):
            self.check()
            if time.perf_counter() > deadline:
                raise RuntimeError(f"worker {self.worker_id} did not register in {timeout:.0f} s")
            time.sleep(0.01)
        return time.perf_counter() - self.spawned_perf

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def worker(project: Path, url: str, worker_id: str, args: argparse.Namespace) -> Iterator[WorkerProc]:
    proc = WorkerProc(project, url, worker_id, args).start()
    try:
        yield proc
    finally:
        proc.stop()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def lateness_summary(late_ms: list[float]) -> dict[str, float]:
    return {
        "n": len(late_ms),
        "p50_ms": percentile(late_ms, 50),
        "p99_ms": percentile(late_ms, 99),
        "max_ms": max(late_ms) if late_ms else float("nan"),
        "min_ms": min(late_ms) if late_ms else float("nan"),
    }


# -- duro phases -----------------------------------------------------------------------------------


def duro_sleepers(kind: str, stores: _support.Stores, args: argparse.Namespace) -> dict[str, Any]:
    """Phases 1-4 on one store: idle, insert, loaded, kill and restart."""
    out: dict[str, Any] = {}
    with stores.database(kind) as info, scratch("inflight-project") as tmp:
        project = write_project(tmp / "project")
        create_schema(info["url"])
        db = Db(kind, info)
        try:
            # 1. idle, on the empty store
            with worker(project, info["url"], "idle", args) as w:
                out["idle_startup_s"] = w.wait_registered(db, args.phase_timeout)
                out["idle"] = settle(w.pid, args.settle, w.check)
            log(f"  {kind}: idle worker {out['idle']['rss_mib']:.1f} MiB")

            # 2. the sleepers
            out["insert"] = insert_sleepers(kind, info, args.sleepers)
            log(
                f"  {kind}: {args.sleepers:,} sleepers written in {out['insert']['seconds']:.1f} s "
                f"(+{out['insert']['analyze_seconds']:.1f} s analyze)"
            )

            # 3. a worker with them in flight
            first = WorkerProc(project, info["url"], "loaded-a", args).start()
            second: WorkerProc | None = None
            try:
                out["loaded_startup_s"] = first.wait_registered(db, args.phase_timeout)
                out["loaded"] = settle(first.pid, args.settle, first.check)
                out["loaded_owned_runs"] = db.one("SELECT count(*) FROM duro_runs WHERE owner IS NOT NULL")
                log(f"  {kind}: loaded worker {out['loaded']['rss_mib']:.1f} MiB")

                # 4. timed runs, SIGKILL at the planned instant, a new worker
                anchor = now_ms() + 500
                groups = insert_timed(db, due_plan(anchor, args))
                time.sleep(max(0.0, (anchor - now_ms()) / 1000))
                kill_ms = now_ms()
                first.kill()
                second = WorkerProc(project, info["url"], "loaded-b", args).start()
                out["restart_startup_s"] = second.wait_registered(db, args.phase_timeout)
                out["kill"] = due_timers(db, second, groups, kill_ms, args)
                out["after_restart"] = settle(second.pid, args.settle, second.check)
                for group, figures in out["kill"].items():
                    log(
                        f"  {kind}: restart: first {group} run done {figures.get('kill_to_first_fired_s', 'n/a')} s "
                        f"after the kill; lateness {figures.get('lateness', {})}"
                    )
                out["sleepers_still_asleep"] = db.one(
                    "SELECT count(*) FROM duro_runs WHERE status = 'suspended'"
                )
            finally:
                if first.proc is not None and first.proc.poll() is None:
                    first.stop()
                if second is not None:
                    second.stop()
        finally:
            db.close()
    return out


def due_timers(
    db: Db, second: WorkerProc, groups: dict[str, dict[str, int]], kill_ms: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Poll (every 20 ms) until every timed run completed or the phase's bound; the figures of each
    group from the runs' own ended_at."""
    wakes = {run_id: wake for group in groups.values() for run_id, wake in group.items()}
    ids = list(wakes)
    sql = f"SELECT id, status, ended_at FROM duro_runs WHERE id IN ({marks(len(ids))})"
    deadline = time.perf_counter() + args.phase_timeout + (max(wakes.values()) - now_ms()) / 1000
    while True:
        rows = db.all(sql, ids)
        ends = {r[0]: r[2] for r in rows if r[1] == "completed"}
        failed = sum(1 for r in rows if r[1] in ("failed", "cancelled"))
        if len(ends) + failed >= len(ids) or time.perf_counter() > deadline:
            break
        second.check()
        time.sleep(0.02)
    out = {
        group: timer_figures(
            members, {k: v for k, v in ends.items() if k in members}, kill_ms, second.spawned_ms
        )
        for group, members in groups.items()
    }
    for group, members in groups.items():
        out[group]["failed"] = sum(1 for r in rows if r[0] in members and r[1] in ("failed", "cancelled"))
    return out


async def client_starts(url: str, n: int, clients: int) -> dict[str, float]:
    """``n`` starts of napper from a client engine (never entered), ``clients`` coroutines."""
    from duro import Engine

    client = Engine(url)
    client.register_remote(WORKFLOW)
    try:

        async def share(k: int) -> None:
            for i in range(k, n, clients):
                await client.start(WORKFLOW, i)

        first_ms, begin = now_ms(), time.perf_counter()
        await asyncio.gather(*(share(k) for k in range(clients)))
        seconds = time.perf_counter() - begin
    finally:
        client.close()
    return {"first_start_ms": first_ms, "starts_seconds": seconds, "starts_per_s": n / seconds}


def many_client_starts(url: str, n: int, clients: int, procs: int) -> dict[str, float]:
    """``n`` starts split over ``procs`` client processes (this script, ``--start-child``), each
    with ``clients`` coroutines; timed from the first start of any to the last start of all."""
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--start-child",
                json.dumps({"url": url, "n": n, "k": k, "procs": procs, "clients": clients}),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(procs)
    ]
    results = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"a start client exited with {child.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    first = min(r["first_start_ms"] for r in results)
    last = max(r["last_start_ms"] for r in results)
    seconds = (last - first) / 1000
    return {"first_start_ms": first, "starts_seconds": seconds, "starts_per_s": n / seconds}


def start_child(spec: dict) -> None:
    """One client process of ``many_client_starts``: its share of the starts (every procs-th run)."""
    from duro import Engine

    async def run() -> dict[str, int]:
        client = Engine(spec["url"])
        client.register_remote(WORKFLOW)
        mine = list(range(spec["k"], spec["n"], spec["procs"]))
        try:

            async def share(j: int) -> None:
                for i in mine[j :: spec["clients"]]:
                    await client.start(WORKFLOW, i)

            first = now_ms()
            await asyncio.gather(*(share(j) for j in range(spec["clients"])))
            return {"first_start_ms": first, "last_start_ms": now_ms()}
        finally:
            client.close()

    print(json.dumps(asyncio.run(run())), flush=True)


def duro_starts(kind: str, stores: _support.Stores, args: argparse.Namespace) -> dict[str, Any]:
    """Phase 5: start-to-all-suspended on a fresh store with a worker running."""
    n = args.starts
    with stores.database(kind) as info, scratch("inflight-project") as tmp:
        project = write_project(tmp / "project")
        create_schema(info["url"])
        db = Db(kind, info)
        try:
            with worker(project, info["url"], "starts", args) as w:
                w.wait_registered(db, args.phase_timeout)
                before = settle(w.pid, min(2.0, args.settle), w.check)
                with RssSampler(w.pid) as sampler, StoreSampler(kind, info) as held:
                    started = (
                        asyncio.run(client_starts(info["url"], n, args.clients))
                        if args.client_procs <= 1
                        else many_client_starts(info["url"], n, args.clients, args.client_procs)
                    )
                    deadline = time.perf_counter() + args.phase_timeout
                    while True:
                        suspended, failed = db.all(
                            "SELECT count(*) FILTER (WHERE status = 'suspended'), "
                            "count(*) FILTER (WHERE status IN ('failed', 'cancelled')) FROM duro_runs"
                        )[0]
                        if suspended + failed >= n or time.perf_counter() > deadline:
                            break
                        w.check()
                        time.sleep(0.1)
                    seen_all = time.perf_counter()
                last = db.one("SELECT max(updated_at) FROM duro_runs WHERE status = 'suspended'")
                peak = sampler.peak
                hwm = proc_status(w.pid).get("VmHWM", float("nan"))
                after = settle(w.pid, args.settle, w.check)
        finally:
            db.close()
    result: dict[str, Any] = {
        "n": n,
        "clients": args.clients,
        "client_procs": args.client_procs,
        "starts_per_s": started["starts_per_s"],
        "starts_seconds": started["starts_seconds"],
        "suspended": suspended,
        "failed": failed,
        "rss_before_mib": before["rss_mib"],
        "rss_peak_sampled_mib": peak,
        "hwm_mib": hwm,
        "rss_after_mib": after["rss_mib"],
        "cpu_pct_after": after["cpu_pct"],
        "peak_owned_runs": held.peak["owned"],
        "peak_running_runs": held.peak["running"],
        "peak_pending_runs": held.peak["pending"],
    }
    if suspended >= n and last is not None:
        seconds = (last - started["first_start_ms"]) / 1000
        result |= {"all_suspended_seconds": seconds, "rate": n / seconds}
    else:
        result["did_not_finish"] = (
            f"{suspended:,} of {n:,} suspended ({failed} failed) {seen_all - time.perf_counter() + args.phase_timeout:.0f} s "
            f"after the starts; timeout {args.phase_timeout:.0f} s"
        )
    log(f"  {kind}: {n:,} starts: {result.get('rate', float('nan')):,.0f} runs/s to all suspended")
    return result


# -- DBOS (each process is this script with --dbos-child) -----------------------------------------


def emit(event: str, **fields: Any) -> None:
    rss = proc_status(os.getpid())
    print(
        "EVENT "
        + json.dumps(
            {
                "event": event,
                "t": time.time(),
                "rss_mib": rss.get("VmRSS"),
                "hwm_mib": rss.get("VmHWM"),
                **fields,
            }
        ),
        flush=True,
    )


def dbos_child(spec: dict) -> None:
    """One DBOS process: ``first`` (launch, idle, starts, settle, due workflows, then wait to be
    killed) or ``restart`` (launch, probe, recovery, the due workflows' ends, settle, exit)."""
    import logging

    import sqlalchemy as sa
    from dbos import DBOS, SetWorkflowID

    logging.getLogger("dbos").setLevel(logging.WARNING)
    sqlite_path = spec.get("sqlite_path")
    if sqlite_path:
        conn = sqlite3.connect(sqlite_path)  # WAL is persistent in the file (as bench/core.py)
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        conn.close()

        @sa.event.listens_for(sa.Engine, "connect")
        def _normal(dbapi_conn: Any, _record: Any) -> None:  # DBOS's engine: duro's durability
            if isinstance(dbapi_conn, sqlite3.Connection):
                dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    entered = {"napper": 0, "due": 0}
    lock = threading.Lock()

    @DBOS.workflow(name="napper")
    async def napper(i: int) -> int:
        with lock:
            entered["napper"] += 1
        await DBOS.sleep_async(7 * 86400)
        return i

    @DBOS.workflow(name="due_napper")
    async def due_napper(k: int, wake: float) -> int:
        with lock:
            entered["due"] += 1
        await DBOS.sleep_async(max(0.001, wake - time.time()))
        return k

    @DBOS.step(name="pong")
    async def pong(x: int) -> int:
        return x + 1

    @DBOS.workflow(name="ping")
    async def ping(x: int) -> int:
        return await pong(x)

    DBOS(
        config={
            "name": "duro-inflight-bench",
            "system_database_url": spec["url"],
            "application_version": "inflight-bench",
            "log_level": "WARNING",
            "console_log_level": "WARNING",
        }
    )
    begin = time.time()
    DBOS.launch()
    emit("launched", launch_s=time.time() - begin)
    if spec["pg_schema"]:
        prefix = "dbos."
        import psycopg

        reader: Any = psycopg.connect(spec["dsn"], autocommit=True)
    else:
        prefix = ""
        reader = sqlite3.connect(sqlite_path, isolation_level=None, timeout=60)

    def count(sql: str) -> int:
        return int(reader.execute(sql.format(p=prefix)).fetchone()[0])

    def sleeps() -> int:
        return count("SELECT count(*) FROM {p}operation_outputs WHERE function_name = 'DBOS.sleep'")

    timeout, n = spec["timeout"], spec["n"]

    async def wait_for(predicate: Callable[[], bool], limit: float) -> bool:
        deadline = time.perf_counter() + limit
        while not predicate():
            if time.perf_counter() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def first() -> None:
        await asyncio.sleep(spec["settle"])
        emit("idle")

        async def share(k: int) -> None:
            for i in range(k, n, spec["clients"]):
                await DBOS.start_workflow_async(napper, i)

        first_start = time.time()
        await asyncio.gather(*(share(k) for k in range(spec["clients"])))
        starts_s = time.time() - first_start
        ok = await wait_for(lambda: sleeps() >= n, timeout)
        emit(
            "sleeping",
            ok=ok,
            first_start=first_start,
            starts_s=starts_s,
            sleeps=sleeps(),
            entered=entered["napper"],
        )
        if not ok:
            return
        await asyncio.sleep(spec["settle"])
        emit("settled")
        timed = spec["due"] + spec["overdue"]
        anchor_ms = int((time.time() + 1.0 + 0.01 * timed) * 1000)  # time to start them first
        wakes = {}
        for group, times in spec_plan(anchor_ms, spec).items():
            for k, wake in enumerate(times):
                wakes[f"{group}-{k}"] = wake
                with SetWorkflowID(f"{group}-{k}"):
                    await DBOS.start_workflow_async(due_napper, k, wake / 1000)
        ok = await wait_for(lambda: sleeps() >= n + timed, 60)
        emit("due-ready", ok=ok, wakes=wakes, anchor_ms=anchor_ms)
        await asyncio.sleep(3600)  # killed by the parent

    async def restart() -> None:
        begin_probe = time.time()
        await (await DBOS.start_workflow_async(ping, 1)).get_result()
        emit("probe", probe_s=time.time() - begin_probe, entered=entered["napper"])
        ok = await wait_for(lambda: entered["napper"] >= n, timeout)
        emit(
            "recovered",
            ok=ok,
            entered=entered["napper"],
            enqueued=count("SELECT count(*) FROM {p}workflow_status WHERE status = 'ENQUEUED'"),
            pending=count("SELECT count(*) FROM {p}workflow_status WHERE status = 'PENDING'"),
        )

        timed = "(workflow_uuid LIKE 'due-%' OR workflow_uuid LIKE 'overdue-%')"

        def due_done() -> int:
            return count(f"SELECT count(*) FROM {{p}}workflow_status WHERE {timed} AND status = 'SUCCESS'")

        ok_due = await wait_for(lambda: due_done() >= spec["due"] + spec["overdue"], timeout)
        rows = reader.execute(
            f"SELECT workflow_uuid, status, completed_at, updated_at FROM {prefix}workflow_status WHERE {timed}"
        ).fetchall()
        emit("due-done", ok=ok_due, rows=[list(r) for r in rows])
        await asyncio.sleep(spec["settle"])
        emit("settled", entered=entered["napper"])

    asyncio.run(first() if spec["role"] == "first" else restart())
    reader.close()
    sys.stdout.flush()
    os._exit(0)  # DBOS's threads and sleeping workflows: nothing to wait for


class DbosProc:
    """A ``--dbos-child`` process; its EVENT lines read by a thread into a queue."""

    def __init__(self, spec: dict, logdir: Path, name: str) -> None:
        self.logfile = logdir / f"dbos-{name}.log"
        with open(self.logfile, "wb") as err:
            self.spawned = time.time()
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--dbos-child", json.dumps(spec)],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=logdir,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("EVENT "):
                self.events.put(json.loads(line[6:]))
        self.events.put(None)

    def expect(self, name: str, timeout: float) -> dict:
        deadline = time.perf_counter() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.01, deadline - time.perf_counter()))
            except queue.Empty:
                raise TimeoutError(f"DBOS did not report {name!r} in {timeout:.0f} s") from None
            if event is None:
                self.proc.wait()
                tail = self.logfile.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"DBOS process exited ({self.proc.returncode}) before {name!r}:\n{tail}")
            if event["event"] == name:
                return event

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def dbos_phase(kind: str, stores: _support.Stores, args: argparse.Namespace) -> dict[str, Any]:
    """Phases 6 and 7 on one store."""
    n = args.dbos_starts
    out: dict[str, Any] = {"n": n}
    with stores.database(kind) as info, scratch("inflight-dbos") as tmp:
        if kind == "sqlite":
            path = str(tmp / "dbos.sqlite")
            spec_db = {"url": f"sqlite:///{path}", "sqlite_path": path, "pg_schema": False}
        else:
            spec_db = {"url": info["dsn"], "dsn": info["dsn"], "pg_schema": True}
        spec = {
            **spec_db,
            "n": n,
            "clients": args.dbos_clients,
            "settle": args.settle,
            "timeout": args.dbos_timeout,
            "due": args.due,
            "due_lead": args.due_lead,
            "due_spread": args.due_spread,
            "overdue": args.overdue,
            "overdue_lead": args.overdue_lead,
        }
        first = DbosProc({**spec, "role": "first"}, tmp, "first")
        try:
            launched = first.expect("launched", 180)
            out["launch_s"] = launched["launch_s"]
            out["idle_rss_mib"] = first.expect("idle", args.settle + 60)["rss_mib"]
            sleeping = first.expect("sleeping", args.dbos_timeout + n / 50 + 60)
            out["starts_per_s"] = n / sleeping["starts_s"]
            if not sleeping["ok"]:
                out["did_not_finish"] = (
                    f"{sleeping['sleeps']:,} of {n:,} workflows asleep {args.dbos_timeout:.0f} s after the starts"
                )
                return out
            out["all_sleeping_seconds"] = sleeping["t"] - sleeping["first_start"]
            out["rate"] = n / out["all_sleeping_seconds"]
            out["rss_all_sleeping_mib"] = sleeping["rss_mib"]
            settled = first.expect("settled", args.settle + 60)
            out["rss_settled_mib"], out["hwm_mib"] = settled["rss_mib"], settled["hwm_mib"]
            log(f"  dbos {kind}: {n:,} asleep at {out['rate']:,.0f}/s, RSS {out['rss_settled_mib']:.1f} MiB")
            due = first.expect("due-ready", 120)
            wakes = due["wakes"]
            time.sleep(max(0.0, due["anchor_ms"] / 1000 - time.time()))
            kill_ms = now_ms()
            out["kill_late_s"] = (kill_ms - due["anchor_ms"]) / 1000
            first.kill()
        finally:
            first.kill()
        second = DbosProc({**spec, "role": "restart"}, tmp, "restart")
        try:
            launched = second.expect("launched", args.dbos_timeout)
            out["restart_launch_s"] = launched["launch_s"]
            out["restart_launched_after_spawn_s"] = launched["t"] - second.spawned
            probe = second.expect("probe", args.dbos_timeout)
            out["restart_probe_s"] = probe["probe_s"]
            recovered = second.expect("recovered", args.dbos_timeout + 60)
            out["recovered_after_spawn_s"] = recovered["t"] - second.spawned
            out["recovered"] = {k: recovered[k] for k in ("ok", "entered", "enqueued", "pending")}
            out["rss_recovered_mib"] = recovered["rss_mib"]
            if not recovered["ok"]:
                out["recovery_did_not_finish"] = (
                    f"{recovered['entered']:,} of {n:,} re-executed {args.dbos_timeout:.0f} s after launch"
                )
            done = second.expect("due-done", args.dbos_timeout + 60)
            ends = {r[0]: r[2] for r in done["rows"] if r[1] == "SUCCESS" and r[2] is not None}
            spawn_ms = second.spawned * 1000
            out["kill"] = {
                group: timer_figures(
                    {k: w for k, w in wakes.items() if k.startswith(group + "-")},
                    {k: e for k, e in ends.items() if k.startswith(group + "-")},
                    kill_ms,
                    spawn_ms,
                )
                for group in ("due", "overdue")
            }
            settled = second.expect("settled", args.settle + 60)
            out["rss_after_restart_mib"], out["restart_hwm_mib"] = settled["rss_mib"], settled["hwm_mib"]
            log(
                f"  dbos {kind}: restart recovered {n:,} in {out['recovered_after_spawn_s']:.1f} s; "
                f"due lateness {out['kill']['due'].get('lateness')}"
            )
        finally:
            second.kill()
    return out


# -- driver ----------------------------------------------------------------------------------------


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def dbos_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dbos")
    except PackageNotFoundError:
        return None


def fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, tuple):
        return " / ".join(fmt(v, spec) for v in value)
    return value if isinstance(value, str) else f"{value:{spec}}"


def timer_rows(system: str, group: str, at: Callable[[dict], dict]) -> list[tuple[str, str, Callable, str]]:
    """The table's rows for one group of timed runs."""
    noun = "run" if system == "duro" else "workflow"
    return [
        (
            system,
            f"  {group}: first wake after the kill (s)",
            lambda d: at(d)[group]["first_wake_after_kill_s"],
            ".2f",
        ),
        (
            system,
            f"  {group}: SIGKILL -> first {noun} done (s)",
            lambda d: at(d)[group]["kill_to_first_fired_s"],
            ".2f",
        ),
        (
            system,
            f"  {group}: SIGKILL -> last {noun} done (s)",
            lambda d: at(d)[group]["kill_to_last_fired_s"],
            ".2f",
        ),
        (
            system,
            f"  {group}: {noun}s done",
            lambda d: f"{at(d)[group]['completed']}/{at(d)[group]['runs']}",
            "s",
        ),
        (
            system,
            f"  {group}: lateness p50 / p99 / max (ms)",
            lambda d: tuple(at(d)[group]["lateness"][k] for k in ("p50_ms", "p99_ms", "max_ms")),
            ".0f",
        ),
    ]


def _sleepers(d: dict) -> dict:
    return d["sleepers"]


def _kill(d: dict) -> dict:
    return d["sleepers"]["kill"]


def _dbos_kill(d: dict) -> dict:
    return d["kill"]


# the table: (system, label, figure from that system's report for one store, format)
TABLE: list[tuple[str, str, Callable[[dict], Any], str]] = [
    (
        "duro",
        "duro: sleepers written (runs/s, 1 step each)",
        lambda d: _sleepers(d)["insert"]["rows_per_s"],
        ",.0f",
    ),
    ("duro", "  write time (s)", lambda d: _sleepers(d)["insert"]["seconds"], ".1f"),
    ("duro", "  worker RSS idle, empty store (MiB)", lambda d: _sleepers(d)["idle"]["rss_mib"], ".1f"),
    ("duro", "  worker RSS, sleepers in flight (MiB)", lambda d: _sleepers(d)["loaded"]["rss_mib"], ".1f"),
    ("duro", "  same, VmHWM peak (MiB)", lambda d: _sleepers(d)["loaded"]["hwm_mib"], ".1f"),
    (
        "duro",
        "  worker CPU idle: empty / with sleepers (% core)",
        lambda d: (_sleepers(d)["idle"]["cpu_pct"], _sleepers(d)["loaded"]["cpu_pct"]),
        ".1f",
    ),
    (
        "duro",
        "  worker start to its row: empty / loaded (s)",
        lambda d: (_sleepers(d)["idle_startup_s"], _sleepers(d)["loaded_startup_s"]),
        ".2f",
    ),
    (
        "duro",
        "  restart: new worker's start to its row (s)",
        lambda d: _sleepers(d)["restart_startup_s"],
        ".2f",
    ),
    *[row for group in ("overdue", "due") for row in timer_rows("duro", group, _kill)],
    (
        "duro",
        "  worker RSS after restart, settled (MiB)",
        lambda d: _sleepers(d)["after_restart"]["rss_mib"],
        ".1f",
    ),
    ("duro", "duro: start -> all suspended (runs/s)", lambda d: d["starts"]["rate"], ",.0f"),
    ("duro", "  runs started", lambda d: d["starts"]["n"], ",d"),
    ("duro", "  client starts/s", lambda d: d["starts"]["starts_per_s"], ",.0f"),
    (
        "duro",
        "  worker RSS before / peak / VmHWM (MiB)",
        lambda d: (
            d["starts"]["rss_before_mib"],
            d["starts"]["rss_peak_sampled_mib"],
            d["starts"]["hwm_mib"],
        ),
        ".1f",
    ),
    ("duro", "  worker RSS after, settled (MiB)", lambda d: d["starts"]["rss_after_mib"], ".1f"),
    (
        "duro",
        "  peak runs owned / 'running' / pending (store)",
        lambda d: (
            d["starts"]["peak_owned_runs"],
            d["starts"]["peak_running_runs"],
            d["starts"]["peak_pending_runs"],
        ),
        ",d",
    ),
    ("dbos", "DBOS: workflows started (N)", lambda d: d["n"], ",d"),
    ("dbos", "  start -> all sleeping (workflows/s)", lambda d: d["rate"], ",.0f"),
    ("dbos", "  starts/s", lambda d: d["starts_per_s"], ",.0f"),
    ("dbos", "  RSS idle, launched (MiB)", lambda d: d["idle_rss_mib"], ".1f"),
    (
        "dbos",
        "  RSS with N pending, settled / VmHWM (MiB)",
        lambda d: (d["rss_settled_mib"], d["hwm_mib"]),
        ".1f",
    ),
    ("dbos", "  restart: DBOS.launch() (s)", lambda d: d["restart_launch_s"], ".2f"),
    ("dbos", "  restart: probe workflow right after (s)", lambda d: d["restart_probe_s"], ".2f"),
    ("dbos", "  restart: spawn -> all N re-executed (s)", lambda d: d["recovered_after_spawn_s"], ".2f"),
    ("dbos", "  planned kill instant missed by (s)", lambda d: d["kill_late_s"], ".2f"),
    *[row for group in ("overdue", "due") for row in timer_rows("dbos", group, _dbos_kill)],
    ("dbos", "  RSS after restart, settled (MiB)", lambda d: d["rss_after_restart_mib"], ".1f"),
]


def print_table(report: dict) -> None:
    p = report["params"]
    print(
        f"\n{report['date']}  cpus={report['machine']['cpus']}  python {report['machine']['python']}  "
        f"duro {report['duro_commit']}  dbos {report['dbos_version']}  (wall {report['wall_seconds']:.0f} s)\n"
        f"load average (1/5/15 min) at start {fmt(tuple(report['machine']['load_avg_at_start']), '.1f')}, "
        f"at end {fmt(tuple(report['machine']['load_avg_at_end']), '.1f')} (a shared machine)"
    )
    print(
        f"sleepers={p['sleepers']:,}  due={p['due']} (lead {p['due_lead']} s, spread {p['due_spread']} s)  "
        f"starts={p['starts']:,} (clients {p['clients']} x {p['client_procs']} proc)  "
        f"dbos starts={p['dbos_starts']:,} (clients {p['dbos_clients']})  settle={p['settle']} s\n"
        f"worker: max_resident_runs={p['max_resident_runs']:,} max_concurrent_runs={p['max_concurrent_runs']:,} "
        f"unload_after={p['unload_after']}\n"
    )
    rows: list[tuple[str, ...]] = [("figure", *report["stores"])]
    for system, label, get, spec in TABLE:
        if not any(report[system].get(store) for store in report["stores"]):
            continue
        cells = []
        for store in report["stores"]:
            try:
                cells.append(fmt(get(report[system][store]), spec))
            except (KeyError, TypeError):
                cells.append("-")
        rows.append((label, *cells))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print(
            "  ".join(
                c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if i == 0:
            print("  ".join("-" * w for w in widths))
    notes = [
        f"{system} {store} {key}: {value}"
        for system in ("duro", "dbos")
        for store, phases in report[system].items()
        for key, value in _unfinished(phases)
    ]
    if notes:
        print("\ndid not finish / failed:")
        for note in notes:
            print("  " + note)


def _unfinished(tree: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key in ("did_not_finish", "recovery_did_not_finish", "error"):
                yield path or key, str(value)
            else:
                yield from _unfinished(value, f"{path}.{key}" if path else key)


def main(argv: list[str] | None = None) -> int:
    from duro import WorkerOptions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleepers", type=int, default=None, help="sleeping runs in the store (1,000,000)")
    parser.add_argument("--due", type=int, default=100, help="runs due after the restart (100)")
    parser.add_argument("--due-lead", type=float, default=3.0, help="first due instant, s after the kill (3)")
    parser.add_argument("--due-spread", type=float, default=1.0, help="the due instants span this many s (1)")
    parser.add_argument("--overdue", type=int, default=100, help="runs due just after the kill (100)")
    parser.add_argument(
        "--overdue-lead",
        type=float,
        default=0.5,
        help="their wake, s after the kill, before the restart is up (0.5)",
    )
    parser.add_argument("--starts", type=int, default=None, help="runs started for the rate (100,000)")
    parser.add_argument("--dbos-starts", type=int, default=None, help="DBOS workflows started (10,000)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent start coroutines, duro (16)")
    parser.add_argument(
        "--client-procs", type=int, default=1, help="duro client processes, each with --clients (1: this one)"
    )
    parser.add_argument("--dbos-clients", type=int, default=16, help="concurrent start coroutines, DBOS (16)")
    parser.add_argument("--settle", type=float, default=None, help="seconds a worker settles before RSS (10)")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma list: sqlite,postgres")
    parser.add_argument("--no-dbos", action="store_true", help="skip DBOS")
    parser.add_argument("--no-duro", action="store_true", help="skip duro (DBOS alone)")
    parser.add_argument("--phase-timeout", type=float, default=600, help="bound on each duro wait (600 s)")
    parser.add_argument("--dbos-timeout", type=float, default=300, help="bound on each DBOS wait (300 s)")
    parser.add_argument("--max-resident-runs", type=int, default=WorkerOptions.max_resident_runs)
    parser.add_argument("--max-concurrent-runs", type=int, default=WorkerOptions.max_concurrent_runs)
    parser.add_argument("--unload-after", default=str(WorkerOptions.unload_after))
    parser.add_argument(
        "--quick", action="store_true", help="20,000 sleepers, 2,000 starts, 1,000 DBOS, 5 s settle"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    parser.add_argument("--dbos-child", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--start-child", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.dbos_child:
        dbos_child(json.loads(args.dbos_child))
        return 0
    if args.start_child:
        start_child(json.loads(args.start_child))
        return 0
    sizes = (20_000, 2_000, 1_000, 5.0) if args.quick else (1_000_000, 100_000, 10_000, 10.0)
    for name, default in zip(("sleepers", "starts", "dbos_starts", "settle"), sizes, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
    stores_asked = [s.strip() for s in args.stores.split(",") if s.strip()]
    assert set(stores_asked) <= {"sqlite", "postgres"}, f"unknown store in {args.stores}"
    have_dbos = not args.no_dbos and dbos_version() is not None
    if not args.no_dbos and not have_dbos:
        log("DBOS (the 'dbos' package) is not installed: duro's figures only")

    wall = time.perf_counter()
    pg = _support.start_postgres("postgres" not in stores_asked)
    stores_run = [s for s in stores_asked if s == "sqlite" or pg is not None]
    stores = _support.Stores(pg)
    stores.prefix = "inflight"
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "load_avg_at_start": os.getloadavg(),
        },
        "duro_commit": git_commit(),
        "dbos_version": dbos_version() if have_dbos else None,
        "params": {
            k: getattr(args, k)
            for k in (
                "sleepers",
                "due",
                "due_lead",
                "due_spread",
                "overdue",
                "overdue_lead",
                "starts",
                "dbos_starts",
                "clients",
                "client_procs",
                "dbos_clients",
                "settle",
                "phase_timeout",
                "dbos_timeout",
                "max_resident_runs",
                "max_concurrent_runs",
                "unload_after",
                "quick",
            )
        },
        "stores": stores_run,
        "duro": {},
        "dbos": {},
    }
    try:
        for kind in stores_run:
            label = "postgres" if kind == "postgres" else "sqlite"
            report["duro"][label] = {}
            for phase, fn in () if args.no_duro else (("sleepers", duro_sleepers), ("starts", duro_starts)):
                log(f"duro {kind} {phase} ...")
                began = time.perf_counter()
                try:
                    report["duro"][label][phase] = fn(kind, stores, args)
                except (RuntimeError, TimeoutError) as err:
                    report["duro"][label][phase] = {"error": str(err)}
                    log(f"  failed: {err}")
                report["duro"][label][phase]["wall_seconds"] = time.perf_counter() - began
                report["duro"][label][phase]["load_avg_after"] = os.getloadavg()
            if have_dbos:
                log(f"dbos {kind} ...")
                began = time.perf_counter()
                try:
                    report["dbos"][label] = dbos_phase(kind, stores, args)
                except (RuntimeError, TimeoutError) as err:
                    report["dbos"][label] = {"n": args.dbos_starts, "error": str(err)}
                    log(f"  failed: {err}")
                report["dbos"][label]["wall_seconds"] = time.perf_counter() - began
                report["dbos"][label]["load_avg_after"] = os.getloadavg()
    finally:
        if pg is not None:
            pg.destroy()
    report["wall_seconds"] = time.perf_counter() - wall
    report["machine"]["load_avg_at_end"] = os.getloadavg()
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
