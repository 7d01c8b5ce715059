"""What ``duro replay-check`` costs on a database full of unfinished runs (the bar: 10,000
unfinished runs of 20 steps each, on SQLite).

A scratch project (``duro.config.py`` + ``workflows/``) holds one workflow: 20 step calls, then a
wait for a signal. The database is filled so:

1. one run is started for real (an ``Engine`` with a worker, no harness) and left waiting for its
   signal; the engine stops, handing it back as a real deploy would leave it;
2. its rows (``duro_runs`` and its 21 ``duro_steps``: 20 completed steps and the open signal wait)
   are the template: ``--runs - 1`` copies are written with plain SQL, each under a new run id and
   nothing else changed, so every run is exactly what a real run records.

Then ``duro replay-check DIR --database-url URL --json`` runs as a subprocess (wall time, median of
``--rounds``; it must check every run and find none diverging), and in this process the split of
its work: reading the runs and their steps (as the CLI does) vs replaying them on the code.

    .venv/bin/python bench/replay_check.py                 # --runs 10000 --rounds 3
    .venv/bin/python bench/replay_check.py --json bench/results/replay_check.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _support as S

from duro import Engine, WorkerOptions
from duro.store import SqlStore

ACTIVE = ("pending", "running", "suspended", "blocked")

STEPS = 20
WORKFLOW = "bench.replay_check"
CONFIG = '"""A scratch project for bench/replay_check.py."""\n\nfrom duro import define_workspace\n\nworkspace = define_workspace()\n'
CODE = f'''"""{STEPS} steps, then a wait for a signal: an unfinished run with {STEPS} recorded steps."""

from duro import step, wait_for_signal, workflow


@step
async def work(i: int) -> dict:
    return {{"i": i, "ok": True}}


@workflow(name="{WORKFLOW}")
async def twenty(n: int) -> int:
    for i in range({STEPS}):
        await work(i)
    await wait_for_signal("go")
    return n
'''
_REAL = (time.perf_counter,)  # the harness's freezegun replaces time's functions; keep the real one
DURO = Path(sys.executable).with_name("duro")


def write_project(root: Path) -> None:
    (root / "workflows").mkdir(parents=True)
    (root / "duro.config.py").write_text(CONFIG)
    (root / "workflows" / "twenty.py").write_text(CODE)


async def one_real_run(root: Path, url: str) -> str:
    """Start one run for real and leave it waiting for its signal; the engine's stop hands it back."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_replay_check_twenty", root / "workflows" / "twenty.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    engine = Engine(url, options=WorkerOptions(poll_interval="50ms", evict_after=None))
    async with engine:
        engine.register(module.twenty)
        handle = await engine.start(module.twenty, 0)
        for _ in range(400):  # bounded: 20 s
            steps = await handle.steps()
            if len(steps) == STEPS + 1 and await handle.status() == "suspended":
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"the real run did not reach its signal wait: {await handle.steps()}")
    return handle.id


def clone(path: str, template: str, copies: int) -> None:
    """``copies`` copies of ``template``'s rows, each under a new run id (plain SQL, one transaction)."""
    db = sqlite3.connect(path)
    try:
        run_cols = [row[1] for row in db.execute("PRAGMA table_info(duro_runs)")]
        step_cols = [row[1] for row in db.execute("PRAGMA table_info(duro_steps)")]
        run = dict(
            zip(
                run_cols,
                db.execute("SELECT * FROM duro_runs WHERE id = ?", (template,)).fetchone(),
                strict=True,
            )
        )
        steps = [
            dict(zip(step_cols, row, strict=True))
            for row in db.execute("SELECT * FROM duro_steps WHERE run_id = ?", (template,))
        ]
        assert run["owner"] is None and run["status"] == "suspended", run
        assert [s["status"] for s in steps] == ["completed"] * STEPS + ["waiting"], steps
        run_sql = f"INSERT INTO duro_runs ({', '.join(run_cols)}) VALUES ({', '.join('?' * len(run_cols))})"
        step_sql = (
            f"INSERT INTO duro_steps ({', '.join(step_cols)}) VALUES ({', '.join('?' * len(step_cols))})"
        )
        with db:
            for i in range(copies):
                run_id = f"{template}-{i:05d}"
                db.execute(run_sql, [run_id if c == "id" else run[c] for c in run_cols])
                db.executemany(
                    step_sql, [[run_id if c == "run_id" else s[c] for c in step_cols] for s in steps]
                )
        counts = db.execute(
            "SELECT (SELECT count(*) FROM duro_runs), (SELECT count(*) FROM duro_steps)"
        ).fetchone()
        assert counts == (copies + 1, (copies + 1) * (STEPS + 1)), counts
    finally:
        db.close()


def cli_round(root: Path, url: str, runs: int) -> float:
    began = _REAL[0]()
    done = subprocess.run(
        [str(DURO), "replay-check", str(root), "--database-url", url, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = _REAL[0]() - began
    if done.returncode != 0:
        raise RuntimeError(f"replay-check exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    assert report == {"checked": runs, "diverged": []}, report
    return elapsed


def unfinished(store: SqlStore) -> list[tuple[Any, list]]:
    """Every unfinished run and its steps, a page of 500 runs at a time, as the CLI reads them."""
    out: list[tuple[Any, list]] = []
    before = None
    while True:
        page = store.runs.page(None, None, ACTIVE, None, 500, before)
        out += [(run, store.steps.of(run.id)) for run in page]
        if len(page) < 500:
            return out
        before = (page[-1].created_at, page[-1].id)


async def split(root: Path, url: str, runs: int) -> dict[str, float]:
    """The CLI's work in parts: read the runs and their steps, load the project, replay them."""
    from duro_harness import simulated

    store = SqlStore(url)
    try:
        began = _REAL[0]()
        histories = unfinished(store)
        read = _REAL[0]() - began
    finally:
        store.close()
    assert len(histories) == runs
    began = _REAL[0]()
    async with simulated(root) as env:
        loaded = _REAL[0]() - began
        began = _REAL[0]()
        outcomes = [await env.engine.replay_history(run, steps) for run, steps in histories]
        replayed = _REAL[0]() - began
    assert all(o.ended == "history" and o.replayed == STEPS for o in outcomes), outcomes[:3]
    return {"read_s": read, "load_project_s": loaded, "replay_s": replayed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with S.scratch("replay-check") as tmp:
        root, db = tmp / "project", tmp / "replay.db"
        url = f"sqlite:///{db}"
        write_project(root)
        clone(str(db), asyncio.run(one_real_run(root, url)), args.runs - 1)
        walls = [cli_round(root, url, args.runs) for _ in range(args.rounds)]
        parts = [asyncio.run(split(root, url, args.runs)) for _ in range(args.rounds)]
        mib = db.stat().st_size / 2**20
    med = {"cli_wall_s": S.median(walls)} | {k: S.median(p[k] for p in parts) for k in parts[0]}
    rows = [(k, v, f"{1000 * v / args.runs:.2f}", f"{args.runs / v:,.0f}") for k, v in med.items()]
    print(
        f"{args.runs:,} unfinished runs of {STEPS} steps, SQLite ({mib:.0f} MiB), medians of {args.rounds}:"
    )
    print(S.table(("part", "s", "ms per run", "runs/s"), rows))
    S.write_json(
        args.json,
        S.environment()
        | {"runs": args.runs, "steps": STEPS, "mib": mib, "medians": med, "walls": walls, "parts": parts},
    )


if __name__ == "__main__":
    main()
