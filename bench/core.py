"""Core throughput benchmark: duro vs DBOS Transact on SQLite, against a raw sqlite3 insert floor.

Run it from the repo root:

    .venv/bin/python bench/core.py                      # defaults: --window 2 --runs 1000 --repeats 3
    .venv/bin/python bench/core.py --runs 500 --repeats 5 --json out.json
    .venv/bin/python bench/core.py --window 0.5 --runs 100 --floor-rows 1000 --repeats 1   # a smoke run
    .venv/bin/python bench/core.py --profile            # duro's concurrent e2e case under cProfile

What it measures, each on a fresh database file in its own temporary directory (removed afterwards):

1. floor       stdlib sqlite3, one ``INSERT`` + ``COMMIT`` per transaction, WAL, synchronous=NORMAL
               (and synchronous=FULL for reference).
2. starts      duro client engine (never entered, so it executes nothing): ``await engine.start(...)``
               in a loop for a registered one-step workflow.
3. duro e2e    an entered engine runs N one-step workflows (workflow awaits one async ``@step`` that
               returns x + 1); timed from the first start to the last result, sequentially (start,
               await result, one at a time) and concurrently (start all, then ``asyncio.gather`` the
               results); duro's default (WAL + synchronous=NORMAL) and ``?synchronous=FULL``.
4. DBOS e2e    DBOS Transact, the same workflow on its SQLite system database, in WAL mode (set on
               the file before launch; the pragma is read back through DBOS's own engine), with its
               default journal mode for reference, and WAL + synchronous=NORMAL (set on every new
               connection) as the like-for-like peer of duro's default. Both DBOS forms are timed:
               async (``DBOS.start_workflow_async`` + ``await handle.get_result()``) and sync
               (``DBOS.start_workflow`` + ``handle.get_result()``, threads). DBOS is a process-wide
               singleton, so it runs in a subprocess of this script (one per repeat, all settings).

Timed windows: every timed case measures for at least ``--window`` seconds (default 2).
The counts are BATCH sizes: a case repeats its batch (``--runs`` workflow runs or starts, sequential
or concurrent as the case says; ``--ref-runs`` for DBOS's default-journal reference; ``--floor-rows``
inserts for the floor) until the window has passed, and reports operations / measured time. The
floor's ids are made before each batch, outside the timed loop, so its measured time is the sum of
the batches' times; the other cases time from their first start to the end of the batch that
crosses the window. ``--window 0`` measures one batch (a count-sized sample).
Each sample's count and measured time are in the JSON under ``windows``.

Repeats are interleaved (round 1: every case, round 2: every case, ...) so slow phases of a noisy
machine spread over all systems, and the order changes from round to round: odd rounds run DBOS
first, and both duro's case list (floors, starts, e2e) and DBOS's (setting x form x mode) are
rotated by ceil(cases / repeats) x round, as in bench/ab.py; the table shows medians. Like with like:
the headline pairs duro and DBOS in the same mode and the same durability, both async: duro default
(WAL, NORMAL) against DBOS WAL+NORMAL, duro ``synchronous=FULL`` against DBOS WAL (FULL), each
sequential against sequential and concurrent against concurrent, with the same batch and window.
DBOS's sync form and its default journal are references, never a headline.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _support import scratch

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = "bench.one_step"
DBOS_SETTINGS = ("wal", "wal_normal", "default")
DBOS_FORMS = ("async", "sync")
MODES = ("seq", "conc")
LIKE_FOR_LIKE = (("default", "wal_normal"), ("full", "wal"))  # duro's setting, DBOS's same durability
MISSING_PEER = (
    "peer missing: the 'dbos' package (DBOS Transact) is not importable; "
    "install it with `pip install -e '.[bench]'` to compare (duro's figures follow)"
)


# -- 1. raw floor ----------------------------------------------------------------------------------


def bench_floor(rows: int, synchronous: str, window: float = 0.0) -> tuple[float, int, float]:
    """stdlib sqlite3 transactions per second: one INSERT + COMMIT each, fresh WAL file; batches of
    ``rows`` until the batches' measured time reaches ``window``. (rate, transactions, seconds)."""
    with scratch("floor") as tmp:
        conn = sqlite3.connect(tmp / "floor.db", isolation_level=None)
        try:
            assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute("CREATE TABLE t (id TEXT PRIMARY KEY, payload TEXT NOT NULL, created_at INTEGER)")
            count, elapsed = 0, 0.0
            while True:
                ids = [uuid.uuid4().hex for _ in range(rows)]  # untimed, as before
                begin = time.perf_counter()
                for i, key in enumerate(ids, count):
                    conn.execute("BEGIN")
                    conn.execute("INSERT INTO t (id, payload, created_at) VALUES (?, ?, ?)", (key, str(i), i))
                    conn.execute("COMMIT")
                elapsed += time.perf_counter() - begin
                count += rows
                if elapsed >= window:
                    break
            assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == count
        finally:
            conn.close()
    return count / elapsed, count, elapsed


# -- 2 and 3. duro ---------------------------------------------------------------------------------


def _duro_workflow() -> Any:
    from duro import step, workflow

    @step
    async def add_one(x: int) -> int:
        return x + 1

    @workflow(name=WORKFLOW)
    async def one_step(x: int) -> int:
        return await add_one(x)

    return one_step


def _duro_pragmas(engine: Any) -> tuple[str, int]:
    with engine.store._engine.connect() as conn:
        journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
        sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
    return str(journal), int(sync)


async def bench_duro_starts(runs: int, warmup: int, window: float = 0.0) -> tuple[float, int, float]:
    """Starts per second on a client engine (never entered: nothing executes); batches of ``runs``
    starts until ``window`` seconds have passed. (rate, starts, seconds)."""
    from duro import Engine

    with scratch("starts") as tmp:
        engine = Engine(f"sqlite:///{tmp / 'duro.db'}")
        try:
            engine.register(_duro_workflow())
            for i in range(warmup):  # creates the schema on first use
                await engine.start(WORKFLOW, i)
            count, begin = 0, time.perf_counter()
            while True:
                for i in range(count, count + runs):
                    await engine.start(WORKFLOW, i)
                count += runs
                elapsed = time.perf_counter() - begin
                if elapsed >= window:
                    break
        finally:
            engine.close()
    return count / elapsed, count, elapsed


async def bench_duro_e2e(
    runs: int, warmup: int, synchronous: str | None, mode: str, profiler: Any = None, window: float = 0.0
) -> tuple[float, dict, dict]:
    """End-to-end one-step workflows per second on an entered engine: batches of ``runs`` (each
    batch sequential or concurrent, as before) until ``window`` seconds have passed. (rate, the
    pragmas read back, {"n": runs done, "seconds": measured time})."""
    from duro import Engine

    with scratch("e2e") as tmp:
        url = f"sqlite:///{tmp / 'duro.db'}" + (f"?synchronous={synchronous}" if synchronous else "")
        engine = Engine(url)
        wf = _duro_workflow()
        engine.register(wf)
        try:
            async with engine:
                journal, sync = _duro_pragmas(engine)
                for i in range(warmup):
                    assert await (await engine.start(WORKFLOW, i)).result() == i + 1
                counts = _count_transactions(engine) if profiler is not None else {}
                if profiler is not None:
                    profiler.enable()
                count, begin = 0, time.perf_counter()
                while True:
                    batch = range(count, count + runs)
                    if mode == "seq":
                        for i in batch:
                            handle = await engine.start(WORKFLOW, i)
                            assert await handle.result() == i + 1
                    else:
                        handles = [await engine.start(WORKFLOW, i) for i in batch]
                        results = await asyncio.gather(*(h.result() for h in handles))
                        assert results == [i + 1 for i in batch]
                    count += runs
                    elapsed = time.perf_counter() - begin
                    if elapsed >= window:
                        break
                if profiler is not None:
                    profiler.disable()
        finally:
            engine.close()
    timing = {"n": count, "seconds": elapsed}
    return count / elapsed, {"journal_mode": journal, "synchronous": sync, **counts}, timing


def _count_transactions(engine: Any) -> dict[str, int]:
    """Count the store's transactions (profile mode only: the listeners cost time)."""
    import sqlalchemy as sa

    counts = {"transactions": 0, "write_transactions": 0}

    @sa.event.listens_for(engine.store._engine, "begin")
    def _begin(conn: Any) -> None:
        counts["transactions"] += 1
        if conn.get_execution_options().get("duro_write"):
            counts["write_transactions"] += 1

    return counts


def profile_duro(runs: int, warmup: int, top: int, window: float) -> None:
    """duro's default concurrent end-to-end case under cProfile: top entries by cumulative time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    rate, seen, timing = asyncio.run(bench_duro_e2e(runs, warmup, None, "conc", profiler, window))
    done = timing["n"]
    print(
        f"duro default conc under cProfile: {rate:,.0f} runs/s over {done} runs "
        f"(profiled, slower than unprofiled); {seen['transactions'] / done:.1f} transactions per run "
        f"({seen['write_transactions'] / done:.1f} write, BEGIN IMMEDIATE)\n"
    )
    pstats.Stats(profiler).strip_dirs().sort_stats("cumulative").print_stats(top)


# -- 4. DBOS (runs in a subprocess: DBOS is a process-wide singleton) ------------------------------


def dbos_worker(spec: dict) -> dict:
    """One repeat of every requested DBOS case; returns {case: runs/s} and the pragmas seen."""
    import logging

    import sqlalchemy as sa
    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    normal_sync = {"on": False}

    @sa.event.listens_for(sa.Engine, "connect")
    def _maybe_normal(dbapi_conn: Any, _record: Any) -> None:  # class-level: applies to DBOS's engine
        if normal_sync["on"]:
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @DBOS.step()
    async def add_one_async(x: int) -> int:
        return x + 1

    @DBOS.workflow()
    async def one_step_async(x: int) -> int:
        return await add_one_async(x)

    @DBOS.step()
    def add_one_sync(x: int) -> int:
        return x + 1

    @DBOS.workflow()
    def one_step_sync(x: int) -> int:
        return add_one_sync(x)

    warmup, window = spec["warmup"], spec["window"]

    async def run_async(mode: str, runs: int) -> tuple[int, float]:
        for i in range(warmup):
            assert await (await DBOS.start_workflow_async(one_step_async, i)).get_result() == i + 1
        count, begin = 0, time.perf_counter()
        while True:
            batch = range(count, count + runs)
            if mode == "seq":
                for i in batch:
                    handle = await DBOS.start_workflow_async(one_step_async, i)
                    assert await handle.get_result() == i + 1
            else:
                handles = [await DBOS.start_workflow_async(one_step_async, i) for i in batch]
                results = await asyncio.gather(*(h.get_result() for h in handles))
                assert results == [i + 1 for i in batch]
            count += runs
            elapsed = time.perf_counter() - begin
            if elapsed >= window:
                return count, elapsed

    def run_sync(mode: str, runs: int) -> tuple[int, float]:
        for i in range(warmup):
            assert DBOS.start_workflow(one_step_sync, i).get_result() == i + 1
        count, begin = 0, time.perf_counter()
        while True:
            batch = range(count, count + runs)
            if mode == "seq":
                for i in batch:
                    assert DBOS.start_workflow(one_step_sync, i).get_result() == i + 1
            else:
                handles = [DBOS.start_workflow(one_step_sync, i) for i in batch]
                assert [h.get_result() for h in handles] == [i + 1 for i in batch]
            count += runs
            elapsed = time.perf_counter() - begin
            if elapsed >= window:
                return count, elapsed

    out: dict[str, Any] = {"rates": {}, "pragmas": {}, "windows": {}}
    for setting, form, mode in spec["cases"]:
        with scratch(f"dbos-{setting}") as tmp:
            path = tmp / "dbos.sqlite"
            if setting in ("wal", "wal_normal"):
                conn = sqlite3.connect(path)  # WAL is persistent in the file
                mode_set = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                conn.close()
                assert mode_set == "wal", mode_set
            normal_sync["on"] = setting == "wal_normal"
            dbos = DBOS(
                config={
                    "name": "duro-bench",
                    "system_database_url": f"sqlite:///{path}",
                    "log_level": "WARNING",
                    "console_log_level": "WARNING",
                }
            )
            try:
                DBOS.launch()
                engine = dbos._sys_db.engine
                with engine.connect() as conn:
                    journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
                    sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
                expected = "delete" if setting == "default" else "wal"
                assert journal == expected, (setting, journal)
                out["pragmas"][setting] = {"journal_mode": journal, "synchronous": int(sync)}
                runs = spec["runs"][setting]
                count, elapsed = (
                    asyncio.run(run_async(mode, runs)) if form == "async" else run_sync(mode, runs)
                )
            finally:
                DBOS.destroy()
            out["rates"][f"{setting}/{form}/{mode}"] = count / elapsed
            out["windows"][f"{setting}/{form}/{mode}"] = {"n": count, "seconds": elapsed}
    normal_sync["on"] = False
    return out


def run_dbos_repeat(spec: dict) -> dict:
    """One DBOS repeat in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--dbos-worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    marker = [line for line in proc.stdout.splitlines() if line.startswith("DBOS-RESULT ")]
    if proc.returncode != 0 or not marker:
        raise RuntimeError(f"DBOS subprocess failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(marker[-1].removeprefix("DBOS-RESULT "))


# -- driver ----------------------------------------------------------------------------------------


def rotated(cases: list, rnd: int, rounds: int) -> list:
    """Round ``rnd``'s order: the list rotated by ceil(len / rounds) x rnd (as bench/ab.py), so each
    case leads once and no case always follows the same one."""
    if not cases:
        return cases
    shift = (-(-len(cases) // max(1, rounds)) * rnd) % len(cases)
    return cases[shift:] + cases[:shift]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=1000, help="workflow runs per batch of a timed case (default 1000)"
    )
    parser.add_argument(
        "--window",
        type=float,
        default=2.0,
        help="seconds each timed case measures at least, in whole batches (default 2; 0: one batch)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="repeats per case; medians reported (default 3)"
    )
    parser.add_argument(
        "--ref-runs",
        type=int,
        default=400,
        help="runs per batch for the DBOS reference setting (default journal; default 400)",
    )
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs before each timed case")
    parser.add_argument(
        "--floor-rows", type=int, default=20000, help="inserts per batch of a raw-floor sample (20000)"
    )
    parser.add_argument(
        "--dbos-settings",
        default=",".join(DBOS_SETTINGS),
        help=f"comma list of DBOS settings among {','.join(DBOS_SETTINGS)}",
    )
    parser.add_argument("--dbos-forms", default=",".join(DBOS_FORMS), help="comma list: async,sync")
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS peer")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    parser.add_argument(
        "--profile",
        type=int,
        metavar="TOP",
        nargs="?",
        const=25,
        help="instead: profile duro's default concurrent e2e case, print the TOP (25) "
        "cumulative entries and the transactions per run",
    )
    parser.add_argument("--dbos-worker", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.dbos_worker:
        print("DBOS-RESULT " + json.dumps(dbos_worker(json.loads(args.dbos_worker))), flush=True)
        return 0
    if args.profile:
        profile_duro(args.runs, args.warmup, args.profile, args.window)
        return 0

    peer_installed = _peer_available()
    have_dbos = not args.no_dbos and peer_installed
    peer_error = None
    if not args.no_dbos and not have_dbos:
        print(MISSING_PEER, file=sys.stderr)
    settings = [s for s in args.dbos_settings.split(",") if s]
    forms = [f for f in args.dbos_forms.split(",") if f]
    assert set(settings) <= set(DBOS_SETTINGS) and set(forms) <= set(DBOS_FORMS), "unknown DBOS setting/form"

    samples: dict[str, list[float]] = {}
    windows: dict[str, list[dict]] = {}  # case -> [{"n": operations, "seconds": measured}] per sample
    pragmas: dict[str, Any] = {}

    def add(case: str, value: float, n: int, seconds: float) -> None:
        samples.setdefault(case, []).append(value)
        windows.setdefault(case, []).append({"n": n, "seconds": seconds})
        print(f"  {case:<28} {value:>9,.0f}/s  (n {n}, {seconds:.2f} s)", file=sys.stderr, flush=True)

    duro_cases: list[tuple[str, str | None, str]] = [
        ("floor/normal", "NORMAL", "-"),
        ("floor/full", "FULL", "-"),
        ("duro/starts", None, "-"),
        *(
            (f"duro/{label}/{mode}", sync, mode)
            for label, sync in (("default", None), ("full", "FULL"))
            for mode in MODES
        ),
    ]
    dbos_cases = [(s, f, m) for s in settings for f in forms for m in MODES]
    started = time.perf_counter()

    def run_duro(rnd: int) -> None:
        for case, sync, mode in rotated(duro_cases, rnd, args.repeats):
            if case.startswith("floor/"):
                add(case, *bench_floor(args.floor_rows, str(sync), args.window))
            elif case == "duro/starts":
                add(case, *asyncio.run(bench_duro_starts(args.runs, args.warmup, args.window)))
            else:
                rate, seen, timing = asyncio.run(
                    bench_duro_e2e(args.runs, args.warmup, sync, mode, window=args.window)
                )
                add(case, rate, timing["n"], timing["seconds"])
                pragmas[case.rsplit("/", 1)[0]] = seen

    def run_dbos(rnd: int) -> None:
        nonlocal have_dbos, peer_error
        runs = {s: args.ref_runs if s == "default" else args.runs for s in settings}
        spec = {
            "runs": runs,
            "warmup": args.warmup,
            "window": args.window,
            "cases": rotated(dbos_cases, rnd, args.repeats),
        }
        try:
            result = run_dbos_repeat(spec)
        except RuntimeError as err:  # report duro's figures anyway
            print(f"DBOS peer skipped from now on: {err}", file=sys.stderr)
            peer_error, have_dbos = str(err), False
            return
        for case, rate in result["rates"].items():
            add(f"dbos/{case}", rate, result["windows"][case]["n"], result["windows"][case]["seconds"])
        for setting, seen in result["pragmas"].items():
            pragmas[f"dbos/{setting}"] = seen

    for rnd in range(args.repeats):
        print(f"round {rnd + 1}/{args.repeats} ...", file=sys.stderr, flush=True)
        odd = rnd % 2 == 1
        if odd and have_dbos:
            run_dbos(rnd)
        run_duro(rnd)
        if not odd and have_dbos:
            run_dbos(rnd)
    wall = time.perf_counter() - started

    med = {case: median(values) for case, values in samples.items()}

    # like with like: the same mode (seq / conc), the same durability, both async, the same batch and window
    headline: dict[str, dict[str, Any]] = {}
    ratios: dict[str, float] = {}
    for label, peer in LIKE_FOR_LIKE:
        for mode in MODES:
            mine, theirs = f"duro/{label}/{mode}", f"dbos/{peer}/async/{mode}"
            entry: dict[str, Any] = {"duro": mine, "duro_runs_per_s": med[mine], "dbos": theirs}
            if theirs in med:
                entry |= {"dbos_runs_per_s": med[theirs], "ratio": med[mine] / med[theirs]}
                ratios[f"duro_{label}_{mode}_over_dbos_{peer}_async_{mode}"] = med[mine] / med[theirs]
            headline[f"{label}/{mode}"] = entry
    for label in ("default", "full"):
        for mode in MODES:
            floor = med["floor/normal" if label == "default" else "floor/full"]
            ratios[f"duro_{label}_{mode}_over_floor_{'normal' if label == 'default' else 'full'}"] = (
                med[f"duro/{label}/{mode}"] / floor
            )

    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        },
        "duro_commit": git_commit(),
        "dbos_version": _dbos_version() if peer_installed else None,
        "params": {
            "runs": args.runs,
            "ref_runs": args.ref_runs,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "floor_rows": args.floor_rows,
            "window": args.window,
            "dbos_settings": settings if peer_installed else [],
            "dbos_forms": forms if peer_installed else [],
        },
        "wall_seconds": wall,
        "pragmas": pragmas,
        "samples": samples,
        "windows": windows,
        "medians": med,
        "headline": headline,
        "ratios": ratios,
        "peer_missing": not peer_installed and not args.no_dbos,
        "peer_error": peer_error,
    }
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


def _peer_available() -> bool:
    try:
        return importlib.util.find_spec("dbos") is not None
    except (ImportError, ValueError):
        return False


def _dbos_version() -> str:
    from importlib.metadata import version

    return version("dbos")


LABELS: dict[str, tuple[str, str]] = {
    "floor/normal": ("sqlite3 raw floor", "WAL, sync=NORMAL, 1 INSERT+COMMIT/tx"),
    "floor/full": ("sqlite3 raw floor", "WAL, sync=FULL, 1 INSERT+COMMIT/tx"),
    "duro/starts": ("duro starts", "client engine, default (WAL, NORMAL)"),
    "duro/default": ("duro e2e", "default (WAL, sync=NORMAL)"),
    "duro/full": ("duro e2e", "WAL, sync=FULL"),
    "dbos/wal": ("DBOS e2e", "WAL (sync=FULL, SQLite's default)"),
    "dbos/wal_normal": ("DBOS e2e", "WAL, sync=NORMAL"),
    "dbos/default": ("DBOS e2e", "default journal (DELETE, FULL)"),
}


def print_table(report: dict) -> None:
    med, samples, head = report["medians"], report["samples"], report["headline"]
    print(
        f"\n{report['date']}  cpus={report['machine']['cpus']}  python {report['machine']['python']}  "
        f"sqlite {report['machine']['sqlite']}  duro {report['duro_commit']}  dbos {report['dbos_version']}"
    )
    print(
        f"batches: runs={report['params']['runs']} (DBOS reference settings: {report['params']['ref_runs']}) "
        f"floor rows={report['params']['floor_rows']}; windows >= {report['params']['window']} s; "
        f"repeats={report['params']['repeats']}  "
        f"(wall {report['wall_seconds']:.0f}s)\n"
    )
    rows = [("system", "setting", "variant", "median/s", "samples/s", "n (median)")]

    def count(case: str) -> str:
        return f"{statistics.median(w['n'] for w in report['windows'][case]):,.0f}"

    def fmt(values: list[float]) -> str:
        return " ".join(f"{v:,.0f}" for v in values)

    for case in ("floor/normal", "floor/full", "duro/starts"):
        rows.append(
            (
                *LABELS[case],
                "tx/s" if case.startswith("floor") else "starts/s",
                f"{med[case]:,.0f}",
                fmt(samples[case]),
                count(case),
            )
        )
    for system in ("duro/default", "duro/full", "dbos/wal", "dbos/wal_normal", "dbos/default"):
        cases = sorted(c for c in med if c.startswith(system + "/"))
        for case in cases:
            variant = case.removeprefix(system + "/")
            mark = " *" if any(case in (h["duro"], h["dbos"]) for h in head.values()) else ""
            rows.append(
                (*LABELS[system], variant + mark, f"{med[case]:,.0f}", fmt(samples[case]), count(case))
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print(
            "  ".join(
                cell.rjust(w) if j in (3, 5) else cell.ljust(w)
                for j, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("\n* = in the headline (like with like); runs/s = end-to-end workflows per second")
    print("\nheadline, like with like (same mode, same durability, both async, same batch and window):")
    for key, h in head.items():
        ratio = f"{h['ratio']:6.2f}x" if "ratio" in h else "  (no DBOS figure)"
        theirs = f"{h['dbos_runs_per_s']:,.0f}" if "dbos_runs_per_s" in h else "-"
        print(
            f"  {key:<13} {h['duro']:<20} {h['duro_runs_per_s']:>8,.0f}  vs  {h['dbos']:<24} {theirs:>8}  {ratio}"
        )
    print("\nratios:")
    for key, value in report["ratios"].items():
        print(f"  {key:<48} " + (f"{value:6.2f}x" if "floor" not in key else f"{value:7.2%}"))
    print("\npragmas read back:", json.dumps(report["pragmas"]))
    if report["peer_missing"]:
        print("\n" + MISSING_PEER)
    if report["peer_error"]:
        print("\nDBOS peer failed (figures above may be partial):\n" + report["peer_error"])


if __name__ == "__main__":
    sys.exit(main())
