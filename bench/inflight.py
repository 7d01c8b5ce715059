"""Waiting runs at scale: a worker's memory with a million sleeping runs in the store, a SIGKILL and
the time until the due timers fire, and the start-to-all-suspended rate; duro on SQLite and
PostgreSQL, and DBOS Transact as far as it goes.

    .venv/bin/python bench/inflight.py --json bench/results/inflight.json    # about 15 minutes
    .venv/bin/python bench/inflight.py --quick --stores sqlite --no-dbos      # a smoke run

The workflow: ``await sleep("7d")``. duro's workers are real ``duro worker`` processes with
default options; RSS is VmRSS from /proc (sampled every 0.2 s). Per store (a fresh database each):

1. idle: a worker on an empty store, settled: its RSS.
2. sleepers: ``--sleepers`` runs written straight into the store in the shape a sleeping, evicted
   run has (its run row and its sleep's step row, the columns read from the schema duro created),
   waking 3 to 10 days ahead; a worker started on them, settled: RSS.
3. kill: 100 runs due at K + 0.5 s (overdue: before the new worker is up) and 100 due from K + 3 s
   (due) are written; at K the worker is SIGKILLed and a new one started. From the runs' own
   ``ended_at``: the kill to the first and last run done per group, and each run's lateness.
4. starts: on a fresh store with a worker, a client (16 coroutines) starts ``--starts`` runs; rate
   = runs / (the last run's suspension - the first start); the peak of runs owned and running.

DBOS (the same workflow, ``DBOS.sleep_async``; SQLite in WAL with synchronous=NORMAL like duro, or
the same PostgreSQL server), each process this script with ``--dbos-child``: launch, start
``--dbos-starts`` workflows, the two timed groups, SIGKILL; then a new process: its recovery (DBOS
re-executes every pending workflow from the start) and the timed groups' lateness.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import _support as S

WORKFLOW = "napper"
NAPPER_PY = """from duro import sleep, workflow


@workflow
async def napper(i: int) -> int:
    await sleep("7d")
    return i
"""
DAY_MS = 86_400_000
GROUPS = {"overdue": (0.5, 0.1), "due": (3.0, 1.0)}  # group: (wake lead after the kill, spread), s
TIMED = 100  # runs per group


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Db:
    """A plain autocommit connection to a phase's database; SQL written with ``?`` placeholders."""

    def __init__(self, kind: str, info: dict) -> None:
        self.kind = kind
        if kind == "sqlite":
            self.conn: Any = sqlite3.connect(info["path"], isolation_level=None, timeout=60)
        else:
            import psycopg

            self.conn = psycopg.connect(info["dsn"], autocommit=True)

    def sql(self, sql: str) -> str:
        return sql if self.kind == "sqlite" else sql.replace("?", "%s")

    def all(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        return list(self.conn.execute(self.sql(sql), tuple(params)).fetchall())

    def one(self, sql: str, params: tuple | list = ()) -> Any:
        return self.all(sql, params)[0][0]

    def columns(self, table: str) -> tuple[str, ...]:
        """The table's columns as duro's schema made them (read from the database)."""
        if self.kind == "sqlite":
            return tuple(r[1] for r in self.all(f"PRAGMA table_info({table})"))
        sql = "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position"
        return tuple(r[0] for r in self.all(sql, (table,)))

    def insert(self, table: str, rows: Iterable[dict]) -> None:
        """Rows given as the values they set (every other column NULL), in one transaction."""
        cols = self.columns(table)

        def checked(row: dict) -> tuple:
            assert row.keys() <= set(cols), f"not columns of {table}: {sorted(row.keys() - set(cols))}"
            return tuple(row.get(c) for c in cols)

        values = map(checked, rows)
        if self.kind == "sqlite":
            marks = ", ".join("?" * len(cols))
            with self.conn:
                self.conn.execute("BEGIN IMMEDIATE")
                self.conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", values)
        else:
            with self.conn.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy:
                for row in values:
                    copy.write_row(row)


def sleeping_run(run_id: str, i: int, created: int, wake: int) -> tuple[dict, dict]:
    """A napper run asleep in its ``sleep("7d")``, unowned, due when it wakes: the values of its
    duro_runs and duro_steps rows."""
    run = {"id": run_id, "namespace": "default", "workflow": WORKFLOW, "version": "1", "status": "suspended",
           "input": str(i), "tags": "[]", "wake_at": wake, "created_at": created, "updated_at": created + 5,
           "due_at": wake}  # fmt: skip
    step = {"run_id": run_id, "seq": 0, "kind": "sleep", "name": "sleep", "status": "waiting",
            "started_at": created + 5, "wake_at": wake}  # fmt: skip
    return run, step


def write_runs(db: Db, runs: Callable[[], Iterator[tuple[dict, dict]]]) -> None:
    db.insert("duro_runs", (r for r, _ in runs()))
    db.insert("duro_steps", (s for _, s in runs()))


def sleepers(n: int, t0: int) -> Iterator[tuple[dict, dict]]:
    """``n`` runs created in the hour before ``t0``, waking 3 to 10 days after it."""
    for i in range(n):
        created = t0 - 3_600_000 + i % 3_500_000
        yield sleeping_run(f"{created:012x}{i:020x}", i, created, t0 + 3 * DAY_MS + (i * 7919) % (7 * DAY_MS))


def plan(kill_ms: int) -> dict[str, list[int]]:
    """The timed runs' wake times (ms) around a kill at ``kill_ms``, by group."""
    return {
        g: [kill_ms + int(1000 * (lead + spread * k / (TIMED - 1))) for k in range(TIMED)]
        for g, (lead, spread) in GROUPS.items()
    }


def lateness(wakes: dict[str, int], ends: dict[str, int], kill_ms: int) -> dict:
    late = [ends[k] - wakes[k] for k in ends]
    out: dict[str, Any] = {"runs": len(wakes), "done": len(ends)}
    if ends:
        out |= {
            "kill_to_first_done_s": (min(ends.values()) - kill_ms) / 1000,
            "kill_to_last_done_s": (max(ends.values()) - kill_ms) / 1000,
            "late_p50_ms": S.percentile(late, 50),
            "late_p99_ms": S.percentile(late, 99),
        }
    return out


class RssPeak:
    """A process's VmRSS sampled every 0.2 s in a thread; ``peak`` is the largest seen."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.peak = max(self.peak, S.rss_mib(self.pid).get("VmRSS", 0.0))

    def __enter__(self) -> RssPeak:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()


def settle(group: S.Procs, pid: int, seconds: float) -> float:
    """RSS (MiB) of ``pid`` after ``seconds`` of sitting."""
    deadline = time.perf_counter() + seconds
    group.until(lambda: time.perf_counter() >= deadline, "the settle", seconds + 5, every=0.2)
    return S.rss_mib(pid).get("VmRSS", float("nan"))


def start_worker(group: S.Procs, db: Db, project: Path, url: str, wid: str) -> tuple[Any, float]:
    """A ``duro worker``; the seconds until its row is in duro_workers."""
    began = time.perf_counter()
    proc = group.start(S.duro_worker(project, url, wid))
    sql = "SELECT count(*) FROM duro_workers WHERE id = ?"
    group.until(lambda: db.one(sql, (wid,)), f"worker {wid}", 120, every=0.01)
    return proc, time.perf_counter() - began


def prepare(info: dict, tmp: Path) -> Path:
    from duro.store import SqlStore

    store = SqlStore(info["url"])
    store.create_schema()
    store.close()
    (tmp / "project" / "workflows").mkdir(parents=True)
    (tmp / "project" / "workflows" / "napper.py").write_text(NAPPER_PY)
    return tmp / "project"


def duro_sleepers(kind: str, stores: S.Stores, args: argparse.Namespace) -> dict:
    out: dict[str, Any] = {}
    with stores.database(kind) as info, S.scratch("inflight") as tmp, S.procs(tmp) as group:
        project, db = prepare(info, tmp), Db(kind, info)
        idle, out["startup_s"] = start_worker(group, db, project, info["url"], "idle")
        out["idle_rss_mib"] = settle(group, idle.pid, args.settle)
        group.kill(idle)
        began = time.perf_counter()
        t0 = now_ms()
        write_runs(db, lambda: sleepers(args.sleepers, t0))
        if kind != "sqlite":  # what autovacuum would do soon after
            db.conn.execute("VACUUM ANALYZE duro_runs")
            db.conn.execute("VACUUM ANALYZE duro_steps")
        out["write_s"] = time.perf_counter() - began
        first, out["loaded_startup_s"] = start_worker(group, db, project, info["url"], "loaded")
        out["loaded_rss_mib"] = settle(group, first.pid, args.settle)
        kill_ms = now_ms() + 500
        wakes = plan(kill_ms)
        timed = {g: {f"{g}-{k:04d}-{kill_ms}": w for k, w in enumerate(ws)} for g, ws in wakes.items()}
        made = now_ms() - 1000
        write_runs(db, lambda: (sleeping_run(i, 0, made, w) for g in timed.values() for i, w in g.items()))
        time.sleep(max(0.0, (kill_ms - now_ms()) / 1000))
        kill_ms = now_ms()
        group.kill(first)
        second, out["restart_startup_s"] = start_worker(group, db, project, info["url"], "restarted")
        ids = [i for g in timed.values() for i in g]
        sql = f"SELECT id, ended_at FROM duro_runs WHERE status = 'completed' AND id IN ({', '.join('?' * len(ids))})"
        group.until(lambda: len(db.all(sql, ids)) == len(ids), "the timed runs", args.timeout)
        ends = dict(db.all(sql, ids))
        out["kill"] = {g: lateness(w, {k: ends[k] for k in w}, kill_ms) for g, w in timed.items()}
        out["restart_rss_mib"] = settle(group, second.pid, args.settle)
        out["still_asleep"] = db.one("SELECT count(*) FROM duro_runs WHERE status = 'suspended'")
        db.conn.close()
    return out


def duro_starts(kind: str, stores: S.Stores, args: argparse.Namespace) -> dict:
    from duro import Engine

    n = args.starts
    with stores.database(kind) as info, S.scratch("inflight") as tmp, S.procs(tmp) as group:
        project, db = prepare(info, tmp), Db(kind, info)
        worker, _ = start_worker(group, db, project, info["url"], "starts")
        before = settle(group, worker.pid, 2.0)
        peaks = {"owned": 0, "running": 0}
        stop = threading.Event()

        def sample_store() -> None:
            mine = Db(kind, info)
            q = "SELECT count(*) FILTER (WHERE owner IS NOT NULL), count(*) FILTER (WHERE status = 'running') FROM duro_runs"
            while not stop.wait(0.25):
                owned, running = mine.all(q)[0]
                peaks["owned"], peaks["running"] = max(peaks["owned"], owned), max(peaks["running"], running)
            mine.conn.close()

        async def start_all() -> float:
            client = Engine(info["url"])
            client.register_remote(WORKFLOW)

            async def share(k: int) -> None:
                for i in range(k, n, 16):
                    await client.start(WORKFLOW, i)

            try:
                began = time.perf_counter()
                await asyncio.gather(*(share(k) for k in range(16)))
                return time.perf_counter() - began
            finally:
                client.close()

        sampler = threading.Thread(target=sample_store, daemon=True)
        sampler.start()
        with RssPeak(worker.pid) as rss:
            first = now_ms()
            starts_s = asyncio.run(start_all())
            done = "SELECT count(*) FROM duro_runs WHERE status = 'suspended'"
            group.until(lambda: db.one(done) >= n, f"{n} runs suspended", args.timeout, every=0.1)
        stop.set()
        sampler.join()
        last = db.one("SELECT max(updated_at) FROM duro_runs")
        db.conn.close()
    return {"n": n, "rate": n / ((last - first) / 1000), "client_starts_per_s": n / starts_s,
            "rss_before_mib": before, "rss_peak_mib": rss.peak, **{f"peak_{k}": v for k, v in peaks.items()}}  # fmt: skip


# -- DBOS (each process is this script with --dbos-child) -----------------------------------------


def emit(event: str, **fields: Any) -> None:
    rss = S.rss_mib(os.getpid()).get("VmRSS")
    print("EVENT " + json.dumps({"event": event, "t": time.time(), "rss_mib": rss, **fields}), flush=True)


def dbos_child(spec: dict) -> None:
    """``first``: launch, settle, start the sleepers, the timed workflows, wait to be killed;
    ``restart``: launch, wait for the recovery and the timed workflows' ends."""
    import logging

    import sqlalchemy as sa
    from dbos import DBOS, SetWorkflowID

    logging.getLogger("dbos").setLevel(logging.WARNING)
    if spec.get("path"):
        conn = sqlite3.connect(spec["path"])
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"  # persistent in the file
        conn.close()

        @sa.event.listens_for(sa.Engine, "connect")
        def _normal(dbapi_conn: Any, _record: Any) -> None:  # DBOS's connections: duro's durability
            if isinstance(dbapi_conn, sqlite3.Connection):
                dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    entered = [0]

    @DBOS.workflow(name="napper")
    async def napper(i: int) -> int:
        entered[0] += 1
        await DBOS.sleep_async(7 * 86400)
        return i

    @DBOS.workflow(name="due_napper")
    async def due_napper(k: int, wake: float) -> int:
        await DBOS.sleep_async(max(0.001, wake - time.time()))
        return k

    config = {"name": "duro-inflight", "system_database_url": spec["url"], "application_version": "bench"}
    DBOS(config={**config, "log_level": "WARNING"})  # type: ignore[typeddict-item]
    DBOS.launch()
    emit("launched")
    if spec.get("path"):
        prefix, reader = "", sqlite3.connect(spec["path"], isolation_level=None, timeout=60)
    else:
        import psycopg

        prefix, reader = "dbos.", psycopg.connect(spec["url"], autocommit=True)

    def count(where: str, table: str = "workflow_status") -> int:
        return int(reader.execute(f"SELECT count(*) FROM {prefix}{table} WHERE {where}").fetchone()[0])

    def sleeps() -> int:
        return count("function_name = 'DBOS.sleep'", "operation_outputs")

    async def wait_for(predicate: Callable[[], bool], limit: float) -> bool:
        deadline = time.perf_counter() + limit
        while not predicate():
            if time.perf_counter() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    n, timed = spec["n"], "(workflow_uuid LIKE 'due-%' OR workflow_uuid LIKE 'overdue-%')"

    async def first() -> None:
        await asyncio.sleep(spec["settle"])
        emit("idle")

        async def share(k: int) -> None:
            for i in range(k, n, 16):
                await DBOS.start_workflow_async(napper, i)

        began = time.time()
        await asyncio.gather(*(share(k) for k in range(16)))
        ok = await wait_for(lambda: sleeps() >= n, spec["timeout"])
        emit("sleeping", ok=ok, seconds=time.time() - began)
        await asyncio.sleep(spec["settle"])
        kill_ms = int((time.time() + 1.0 + 0.01 * 2 * TIMED) * 1000)  # time to start them first
        wakes = {f"{g}-{k}": w for g, ws in plan(kill_ms).items() for k, w in enumerate(ws)}
        for wid, wake in wakes.items():
            with SetWorkflowID(wid):
                await DBOS.start_workflow_async(due_napper, 0, wake / 1000)
        await wait_for(lambda: sleeps() >= n + len(wakes), 60)
        emit("due-ready", wakes=wakes, kill_ms=kill_ms)
        await asyncio.sleep(3600)  # killed by the parent

    async def restart() -> None:
        ok = await wait_for(lambda: entered[0] >= n, spec["timeout"])
        emit("recovered", ok=ok, entered=entered[0])
        await wait_for(lambda: count(f"{timed} AND status = 'SUCCESS'") >= 2 * TIMED, spec["timeout"])
        rows = reader.execute(
            f"SELECT workflow_uuid, completed_at FROM {prefix}workflow_status WHERE {timed}"
        )
        emit("due-done", ends=dict(rows.fetchall()))
        await asyncio.sleep(spec["settle"])
        emit("settled")

    asyncio.run(first() if spec["role"] == "first" else restart())
    sys.stdout.flush()
    os._exit(0)  # DBOS's threads and sleeping workflows: nothing to wait for


class DbosProc:
    """A ``--dbos-child`` process; its EVENT lines read into a queue by a thread."""

    def __init__(self, spec: dict, logdir: Path) -> None:
        err = open(logdir / f"dbos-{spec['role']}.log", "wb")  # noqa: SIM115 - the child's stderr
        self.spawned = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--dbos-child", json.dumps(spec)], stdout=subprocess.PIPE,
            stderr=err, text=True, cwd=logdir,
        )  # fmt: skip
        err.close()
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("EVENT "):
                self.events.put(json.loads(line[6:]))
        self.events.put(None)

    def expect(self, name: str, timeout: float) -> dict:
        while True:
            event = self.events.get(timeout=timeout)
            if event is None:
                raise RuntimeError(f"the DBOS process exited ({self.proc.wait()}) before {name!r}")
            if event["event"] == name:
                return event

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def dbos_phase(kind: str, stores: S.Stores, args: argparse.Namespace) -> dict:
    n, out = args.dbos_starts, {"n": args.dbos_starts}
    with stores.database(kind) as info, S.scratch("inflight-dbos") as tmp:
        db = (
            {"path": str(tmp / "dbos.sqlite"), "url": f"sqlite:///{tmp / 'dbos.sqlite'}"}
            if kind == "sqlite"
            else {"url": info["dsn"]}
        )
        spec = {**db, "n": n, "settle": args.settle, "timeout": args.timeout}
        first = DbosProc({**spec, "role": "first"}, tmp)
        try:
            first.expect("launched", 180)
            out["idle_rss_mib"] = first.expect("idle", args.settle + 60)["rss_mib"]
            sleeping = first.expect("sleeping", args.timeout + n / 50 + 60)
            out |= {
                "rate": n / sleeping["seconds"],
                "sleeping_rss_mib": sleeping["rss_mib"],
                "all_asleep": sleeping["ok"],
            }
            due = first.expect("due-ready", args.settle + 120)
            time.sleep(max(0.0, due["kill_ms"] / 1000 - time.time()))
            kill_ms = now_ms()
        finally:
            first.kill()
        second = DbosProc({**spec, "role": "restart"}, tmp)
        try:
            recovered = second.expect("recovered", args.timeout + 120)
            out["recovered_after_spawn_s"] = recovered["t"] - second.spawned
            ends = second.expect("due-done", args.timeout + 60)["ends"]
            for g in GROUPS:
                wakes = {k: w for k, w in due["wakes"].items() if k.startswith(g + "-")}
                out[g] = lateness(wakes, {k: ends[k] for k in wakes if ends.get(k)}, kill_ms)
            out["restart_rss_mib"] = second.expect("settled", args.settle + 60)["rss_mib"]
        finally:
            second.kill()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleepers", type=int, help="sleeping runs in the store (1,000,000)")
    parser.add_argument("--starts", type=int, help="runs started for the rate (100,000)")
    parser.add_argument("--dbos-starts", type=int, help="DBOS workflows started (10,000)")
    parser.add_argument("--settle", type=float, help="seconds a worker settles before its RSS (10)")
    parser.add_argument("--quick", action="store_true", help="20,000 sleepers, 2,000 starts, 1,000 DBOS, 5 s")
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma list (sqlite,postgresql)")
    parser.add_argument("--timeout", type=float, default=600, help="bound on each wait (600 s)")
    parser.add_argument("--no-dbos", action="store_true", help="skip DBOS")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--dbos-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dbos_child:
        dbos_child(json.loads(args.dbos_child))
        return 0
    sizes = (20_000, 2_000, 1_000, 5.0) if args.quick else (1_000_000, 100_000, 10_000, 10.0)
    for name, default in zip(("sleepers", "starts", "dbos_starts", "settle"), sizes, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
    kinds = args.stores.split(",")
    dbos = not args.no_dbos and S.dbos_installed()
    if not args.no_dbos and not dbos:
        S.log(S.MISSING_DBOS)
    pg = S.start_postgres("postgresql" not in kinds)
    kinds = [k for k in kinds if k == "sqlite" or pg is not None]
    stores = S.Stores(pg)
    report: dict[str, Any] = S.environment(pg) | {
        "dbos": S.version("dbos"),
        "params": vars(args),
        "duro": {},
        "dbos_figures": {},
    }
    try:
        for kind in kinds:
            S.log(f"duro {kind} ...")
            report["duro"][kind] = {
                "sleepers": duro_sleepers(kind, stores, args),
                "starts": duro_starts(kind, stores, args),
            }
            if dbos:
                S.log(f"dbos {kind} ...")
                report["dbos_figures"][kind] = dbos_phase(kind, stores, args)
    finally:
        if pg is not None:
            pg.destroy()
    rows = []
    for kind in kinds:
        d, p = report["duro"][kind], report["dbos_figures"].get(kind, {})
        s, k = d["sleepers"], d["sleepers"]["kill"]
        rows += [
            (f"duro {kind}", args.sleepers, s["idle_rss_mib"], s["loaded_rss_mib"], k["overdue"].get("kill_to_first_done_s"),
             k["overdue"].get("kill_to_last_done_s"), f"{S.fmt(k['due'].get('late_p50_ms'))} / {S.fmt(k['due'].get('late_p99_ms'))}",
             s["restart_rss_mib"], d["starts"]["rate"]),
        ]  # fmt: skip
        if p:
            rows.append((f"DBOS {kind}", p["n"], p["idle_rss_mib"], p.get("sleeping_rss_mib"), p["overdue"].get("kill_to_first_done_s"),
                         p["overdue"].get("kill_to_last_done_s"), f"{S.fmt(p['due'].get('late_p50_ms'))} / {S.fmt(p['due'].get('late_p99_ms'))}",
                         p.get("restart_rss_mib"), p.get("rate")))  # fmt: skip
    header = ("system", "sleepers", "RSS idle", "RSS with them", "kill to first overdue done (s)",
              "to last (s)", "due lateness p50 / p99 (ms)", "RSS after restart", "start to all asleep (runs/s)")  # fmt: skip
    print(S.table(header, rows))
    S.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
