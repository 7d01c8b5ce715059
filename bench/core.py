"""Core throughput benchmark: duro vs DBOS Transact on SQLite, against a raw sqlite3 insert floor.

Run it from the repo root:

    .venv/bin/python bench/core.py                      # defaults: --runs 1000 --repeats 3, about 3 minutes
    .venv/bin/python bench/core.py --runs 500 --repeats 5 --json out.json
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

Repeats are interleaved (round 1: every case, round 2: every case, ...) so slow phases of a noisy
machine spread over all systems, and the order alternates: odd rounds run DBOS first and duro's
cases in reverse; the table shows medians. Like with like: the headline pairs duro and DBOS in the
same mode and the same durability, both async: duro default (WAL, NORMAL) against DBOS WAL+NORMAL,
duro ``synchronous=FULL`` against DBOS WAL (FULL), each sequential against sequential and concurrent
against concurrent, with the same number of runs. DBOS's sync form and its default journal are
references, never a headline. Sizes are counts (--runs): windows of at least 2 s are bench/ab.py's
(issue 15's A/B), not this script's.
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


def bench_floor(rows: int, synchronous: str) -> float:
    """stdlib sqlite3 transactions per second: one INSERT + COMMIT each, fresh WAL file."""
    with scratch("floor") as tmp:
        conn = sqlite3.connect(tmp / "floor.db", isolation_level=None)
        try:
            assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute("CREATE TABLE t (id TEXT PRIMARY KEY, payload TEXT NOT NULL, created_at INTEGER)")
            ids = [uuid.uuid4().hex for _ in range(rows)]
            begin = time.perf_counter()
            for i, key in enumerate(ids):
                conn.execute("BEGIN")
                conn.execute("INSERT INTO t (id, payload, created_at) VALUES (?, ?, ?)", (key, str(i), i))
                conn.execute("COMMIT")
            elapsed = time.perf_counter() - begin
            assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == rows
        finally:
            conn.close()
    return rows / elapsed


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


async def bench_duro_starts(runs: int, warmup: int) -> float:
    """Starts per second on a client engine (never entered: nothing executes)."""
    from duro import Engine

    with scratch("starts") as tmp:
        engine = Engine(f"sqlite:///{tmp / 'duro.db'}")
        try:
            engine.register(_duro_workflow())
            for i in range(warmup):  # creates the schema on first use
                await engine.start(WORKFLOW, i)
            begin = time.perf_counter()
            for i in range(runs):
                await engine.start(WORKFLOW, i)
            elapsed = time.perf_counter() - begin
        finally:
            engine.close()
    return runs / elapsed


async def bench_duro_e2e(
    runs: int, warmup: int, synchronous: str | None, mode: str, profiler: Any = None
) -> tuple[float, dict]:
    """End-to-end one-step workflows per second on an entered engine."""
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
                begin = time.perf_counter()
                if mode == "seq":
                    for i in range(runs):
                        handle = await engine.start(WORKFLOW, i)
                        assert await handle.result() == i + 1
                else:
                    handles = [await engine.start(WORKFLOW, i) for i in range(runs)]
                    results = await asyncio.gather(*(h.result() for h in handles))
                    assert results == [i + 1 for i in range(runs)]
                elapsed = time.perf_counter() - begin
                if profiler is not None:
                    profiler.disable()
        finally:
            engine.close()
    return runs / elapsed, {"journal_mode": journal, "synchronous": sync, **counts}


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


def profile_duro(runs: int, warmup: int, top: int) -> None:
    """duro's default concurrent end-to-end case under cProfile: top entries by cumulative time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    rate, seen = asyncio.run(bench_duro_e2e(runs, warmup, None, "conc", profiler))
    print(
        f"duro default conc under cProfile: {rate:,.0f} runs/s (profiled, slower than unprofiled); "
        f"{seen['transactions'] / runs:.1f} transactions per run "
        f"({seen['write_transactions'] / runs:.1f} write, BEGIN IMMEDIATE)\n"
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

    warmup = spec["warmup"]

    async def run_async(mode: str, runs: int) -> float:
        for i in range(warmup):
            assert await (await DBOS.start_workflow_async(one_step_async, i)).get_result() == i + 1
        begin = time.perf_counter()
        if mode == "seq":
            for i in range(runs):
                handle = await DBOS.start_workflow_async(one_step_async, i)
                assert await handle.get_result() == i + 1
        else:
            handles = [await DBOS.start_workflow_async(one_step_async, i) for i in range(runs)]
            results = await asyncio.gather(*(h.get_result() for h in handles))
            assert results == [i + 1 for i in range(runs)]
        return runs / (time.perf_counter() - begin)

    def run_sync(mode: str, runs: int) -> float:
        for i in range(warmup):
            assert DBOS.start_workflow(one_step_sync, i).get_result() == i + 1
        begin = time.perf_counter()
        if mode == "seq":
            for i in range(runs):
                assert DBOS.start_workflow(one_step_sync, i).get_result() == i + 1
        else:
            handles = [DBOS.start_workflow(one_step_sync, i) for i in range(runs)]
            assert [h.get_result() for h in handles] == [i + 1 for i in range(runs)]
        return runs / (time.perf_counter() - begin)

    out: dict[str, Any] = {"rates": {}, "pragmas": {}}
    for setting in spec["settings"]:
        for form in spec["forms"]:
            for mode in MODES:
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
                        rate = asyncio.run(run_async(mode, runs)) if form == "async" else run_sync(mode, runs)
                    finally:
                        DBOS.destroy()
                    out["rates"][f"{setting}/{form}/{mode}"] = rate
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
    parser.add_argument("--runs", type=int, default=1000, help="workflow runs per timed case (default 1000)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="repeats per case; medians reported (default 3)"
    )
    parser.add_argument(
        "--ref-runs",
        type=int,
        default=400,
        help="runs per timed case for the DBOS reference setting (default journal)",
    )
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs before each timed case")
    parser.add_argument("--floor-rows", type=int, default=20000, help="inserts per raw-floor repeat")
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
        profile_duro(args.runs, args.warmup, args.profile)
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
    pragmas: dict[str, Any] = {}

    def add(case: str, value: float) -> None:
        samples.setdefault(case, []).append(value)

    duro_cases: list[tuple[str, str | None, str]] = [
        (f"duro/{label}/{mode}", sync, mode)
        for label, sync in (("default", None), ("full", "FULL"))
        for mode in MODES
    ]
    started = time.perf_counter()

    def run_duro(odd: bool) -> None:
        add("floor/normal", bench_floor(args.floor_rows, "NORMAL"))
        add("floor/full", bench_floor(args.floor_rows, "FULL"))
        add("duro/starts", asyncio.run(bench_duro_starts(args.runs, args.warmup)))
        for case, sync, mode in duro_cases[::-1] if odd else duro_cases:
            rate, seen = asyncio.run(bench_duro_e2e(args.runs, args.warmup, sync, mode))
            add(case, rate)
            pragmas[case.rsplit("/", 1)[0]] = seen

    def run_dbos() -> None:
        nonlocal have_dbos, peer_error
        runs = {s: args.ref_runs if s == "default" else args.runs for s in settings}
        try:
            result = run_dbos_repeat(
                {"runs": runs, "warmup": args.warmup, "settings": settings, "forms": forms}
            )
        except RuntimeError as err:  # report duro's figures anyway
            print(f"DBOS peer skipped from now on: {err}", file=sys.stderr)
            peer_error, have_dbos = str(err), False
            return
        for case, rate in result["rates"].items():
            add(f"dbos/{case}", rate)
        for setting, seen in result["pragmas"].items():
            pragmas[f"dbos/{setting}"] = seen

    for rep in range(args.repeats):
        print(f"round {rep + 1}/{args.repeats} ...", file=sys.stderr, flush=True)
        odd = rep % 2 == 1
        if odd and have_dbos:
            run_dbos()
        run_duro(odd)
        if not odd and have_dbos:
            run_dbos()
    wall = time.perf_counter() - started

    med = {case: median(values) for case, values in samples.items()}

    # like with like: the same mode (seq / conc), the same durability, both async, the same runs
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
            "dbos_settings": settings if peer_installed else [],
            "dbos_forms": forms if peer_installed else [],
        },
        "wall_seconds": wall,
        "pragmas": pragmas,
        "samples": samples,
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
        f"runs={report['params']['runs']} (DBOS reference settings: {report['params']['ref_runs']}) "
        f"repeats={report['params']['repeats']}  "
        f"(wall {report['wall_seconds']:.0f}s)\n"
    )
    params = report["params"]
    rows = [("system", "setting", "variant", "median/s", "samples/s", "n")]

    def count(case: str) -> str:
        if case.startswith("floor"):
            return str(params["floor_rows"])
        return str(params["ref_runs"] if case.startswith("dbos/default") else params["runs"])

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
    print("\nheadline, like with like (same mode, same durability, both async, same runs):")
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
