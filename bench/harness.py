"""Harness benchmark: wall time to fast-forward 30 simulated days over 100 runs that sleep and wake
every hour (72,000 durable wake-ups, each recorded in the store), against two floors measured in the
same run: the same simulated advance with nothing to do, and the rows each wake-up writes (the run's
timer, the next sleep's record: one transaction per instant, as duro batches them) written through
bare sqlite3 on duro's own schema, in memory like the harness's store.

    .venv/bin/python bench/harness.py                   # defaults: --runs 100 --days 30 --repeats 5
    .venv/bin/python bench/harness.py --json bench/results/harness.json
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import time

import _support as S

from duro import sleep, workflow
from duro.store import SqlStore
from duro_harness import simulated

# freezegun (which the harness starts) swaps every module-level reference to the time functions; a
# reference kept inside a tuple is out of its reach, so the benchmark keeps reading real time.
_REAL = (time.perf_counter,)


def wall() -> float:
    return _REAL[0]()


@workflow(name="bench.hourly")
async def hourly(hours: int) -> int:
    for _ in range(hours):
        await sleep("1h")
    return hours


async def one_repeat(runs: int, days: int) -> dict:
    async with simulated() as env:
        env.engine.register(hourly)
        handles = [await env.start("bench.hourly", days * 24) for _ in range(runs)]
        await env.run_until_idle()
        began = wall()
        await env.advance(f"{days}d")
        elapsed = wall() - began
        assert [await h.status() for h in handles] == ["completed"] * runs
    async with simulated() as idle:
        began = wall()
        await idle.advance(f"{days}d")
        idle_elapsed = wall() - began
    return {"seconds": elapsed, "idle_seconds": idle_elapsed, "wakeups": runs * days * 24}


def row_floor(runs: int, days: int, repeat: int) -> float:
    """The same rows per instant through bare sqlite3, in a shared-cache in-memory database like the
    harness's store: read the runs' owners, update each run's timer, insert each run's next sleep
    record (the constant columns as literals: cheaper than duro, which binds them)."""
    name = f"harness-floor-{repeat}"
    conn = sqlite3.connect(f"file:{name}?mode=memory&cache=shared", uri=True, isolation_level=None)
    schema = SqlStore(f"sqlite:///file:{name}?mode=memory&cache=shared&uri=true")
    schema.create_schema()
    schema.close()
    ids = [f"{index:012x}{'0' * 20}" for index in range(runs)]
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO duro_runs (id, namespace, workflow, version, status, tags, owner, wake_at, "
        "created_at, updated_at) VALUES (?, 'default', 'bench.hourly', '1', 'suspended', '[]', "
        "'worker', 0, 0, 0)",
        [(run_id,) for run_id in ids],
    )
    conn.execute("COMMIT")
    marks = ", ".join("?" * runs)
    began = wall()
    for hour in range(days * 24):
        now = hour * 3_600_000
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"SELECT id, owner, status FROM duro_runs WHERE id IN ({marks})", ids).fetchall()
        conn.executemany(
            "UPDATE duro_runs SET updated_at = ?, wake_at = ? WHERE id = ?",
            [(now, now + 3_600_000, run_id) for run_id in ids],
        )
        conn.executemany(
            "INSERT INTO duro_steps (run_id, seq, kind, name, status, started_at, wake_at) "
            "VALUES (?, ?, 'sleep', 'sleep', 'waiting', ?, ?)",
            [(run_id, hour, now, now + 3_600_000) for run_id in ids],
        )
        conn.execute("COMMIT")
    elapsed = wall() - began
    conn.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    samples = [
        asyncio.run(one_repeat(args.runs, args.days))
        | {"row_floor_seconds": row_floor(args.runs, args.days, repeat)}
        for repeat in range(args.repeats)
    ]
    seconds = [s["seconds"] for s in samples]
    idle = [s["idle_seconds"] for s in samples]
    rows = [s["row_floor_seconds"] for s in samples]
    wakeups = samples[0]["wakeups"]
    result = {
        "runs": args.runs,
        "days": args.days,
        "repeats": args.repeats,
        "wakeups": wakeups,
        "seconds": seconds,
        "median_seconds": statistics.median(seconds),
        "idle_seconds": idle,
        "median_idle_seconds": statistics.median(idle),
        "wakeups_per_second": wakeups / statistics.median(seconds),
        "row_floor_seconds": rows,
        "median_row_floor_seconds": statistics.median(rows),
    }
    print(f"{args.runs} runs x {args.days} days, hourly wake-ups: {wakeups:,}")
    print(
        f"advance {args.days}d: median {result['median_seconds']:.3f} s wall "
        f"(samples {', '.join(f'{s:.3f}' for s in seconds)}); {result['wakeups_per_second']:,.0f} wake-ups/s"
    )
    print(f"floor, the same advance with no runs: median {result['median_idle_seconds'] * 1000:.2f} ms")
    print(
        f"floor, the same rows through bare sqlite3: median {result['median_row_floor_seconds']:.3f} s "
        f"(duro: {result['median_seconds'] / result['median_row_floor_seconds']:.2f}x)"
    )
    S.write_json(args.json, S.environment() | result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
