"""Re-driving runs, measured: a bulk retry of 10,000 failed runs against plain starts of the same
run, per run, on SQLite and PostgreSQL, in the same run.

    .venv/bin/python bench/redrive.py                       # 10,000 runs, 3 rounds, both stores
    .venv/bin/python bench/redrive.py --runs 2000 --rounds 5 --no-postgres

Each sample is a fresh process on a fresh database. The failed runs are written in bulk through the
package's own schema: 10,000 runs of a three-step workflow that failed at its third step (two
completed steps and the failed one each), as an engine leaves them. Cases:

- retry: ``engine.retry_runs(workflow=..., limit=runs)`` from a client engine: one transaction a run
  (read the run and its steps, decide the resume point, move the failed call to the earlier
  attempt, put the run back to pending): microseconds a run, end to end.
- start: ``engine.start`` of the same workflow with the same input, one after another, from a client
  engine: microseconds a run.

The report gives the medians and the retry/start ratio per store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import _support as S

CASES = ("retry", "start")
WORKFLOW = "bench.checkout"

_SQLITE_RUNS = (
    "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x + 1 < :n) "
    "INSERT INTO duro_runs (id, namespace, workflow, version, status, input, error, tags, created_at, "
    "updated_at, ended_at) SELECT printf('f%09d', x), 'default', :wf, '1', 'failed', '\"order\"', "
    '\'{"type": "builtins.RuntimeError", "qualname": "RuntimeError", "message": "refused"}\', '
    "'[]', :t0 + x, :t0 + x + 100, :t0 + x + 100 FROM c"
)
_SQLITE_STEPS = (
    "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x + 1 < :n * 3) "
    "INSERT INTO duro_steps (run_id, seq, kind, name, status, started_at, ended_at, result, error) "
    "SELECT printf('f%09d', x / 3), x % 3, 'step', 'work', CASE WHEN x % 3 = 2 THEN 'failed' ELSE "
    "'completed' END, :t0 + x / 3 + x % 3, :t0 + x / 3 + x % 3 + 1, CASE WHEN x % 3 = 2 THEN NULL "
    "ELSE '1' END, CASE WHEN x % 3 = 2 THEN '{\"type\": \"builtins.RuntimeError\"}' END FROM c"
)
_PG_RUNS = (
    "INSERT INTO duro_runs (id, namespace, workflow, version, status, input, error, tags, created_at, "
    "updated_at, ended_at) SELECT 'f' || lpad(x::text, 9, '0'), 'default', %(wf)s, '1', 'failed', "
    '\'"order"\', \'{"type": "builtins.RuntimeError", "qualname": "RuntimeError", "message": '
    "\"refused\"}', '[]', %(t0)s + x, %(t0)s + x + 100, %(t0)s + x + 100 FROM generate_series(0, %(n)s - 1) AS x"
)
_PG_STEPS = (
    "INSERT INTO duro_steps (run_id, seq, kind, name, status, started_at, ended_at, result, error) "
    "SELECT 'f' || lpad((x / 3)::text, 9, '0'), x %% 3, 'step', 'work', CASE WHEN x %% 3 = 2 THEN 'failed' "
    "ELSE 'completed' END, %(t0)s + x / 3 + x %% 3, %(t0)s + x / 3 + x %% 3 + 1, CASE WHEN x %% 3 = 2 THEN "
    "NULL ELSE '1' END, CASE WHEN x %% 3 = 2 THEN '{\"type\": \"builtins.RuntimeError\"}' END "
    "FROM generate_series(0, %(n)s * 3 - 1) AS x"
)


def build(db: dict, runs: int) -> None:
    """The schema, then ``runs`` failed runs of three steps (the third failed), in bulk."""
    params = {"n": runs, "t0": int(time.time() * 1000) - 3_600_000, "wf": WORKFLOW}
    S.write_bulk(db, [(_SQLITE_RUNS, _PG_RUNS, params), (_SQLITE_STEPS, _PG_STEPS, params)])


def _engine(url: str) -> Any:
    from duro import Engine, step, workflow

    @step
    async def work(order: str) -> str:
        return order

    @workflow(name=WORKFLOW)
    async def checkout(order: str) -> str:
        await work(order)
        await work(order)
        return await work(order)

    engine = Engine(url)
    engine.register(checkout)
    return engine


async def retry_case(url: str, runs: int) -> dict:
    engine = _engine(url)
    try:
        began = time.perf_counter()
        report = await engine.retry_runs(workflow=WORKFLOW, limit=runs)
        seconds = time.perf_counter() - began
    finally:
        engine.close()
    assert len(report.run_ids) == runs and not report.refused, (len(report.run_ids), report.refused)
    return {"value": seconds / runs * 1e6, "seconds": seconds}


async def start_case(url: str, runs: int) -> dict:
    engine = _engine(url)
    try:
        began = time.perf_counter()
        for _ in range(runs):
            await engine.start(WORKFLOW, "order")
        seconds = time.perf_counter() - began
    finally:
        engine.close()
    return {"value": seconds / runs * 1e6, "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--json", type=Path, help="write every sample and the medians here")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "URL", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    for sub in ("sdk", "devserver", "harness"):
        sys.path.insert(0, str(S.ROOT / sub))
    if args.child:
        case, url, runs = args.child
        run = retry_case if case == "retry" else start_case
        print(json.dumps(asyncio.run(run(url, int(runs)))))
        return 0
    pg = S.start_postgres(args.no_postgres)
    stores = ([] if args.no_sqlite else ["sqlite"]) + (["postgresql"] if pg is not None else [])
    databases = S.Stores(pg)
    results: dict[str, Any] = {"environment": S.environment(pg), "runs": args.runs}
    try:

        def run(item: Any, rnd: int) -> dict:
            store, case = item
            with databases.database(store) as db:
                if case == "retry":
                    build(db, args.runs)
                else:
                    build(db, 0)
                cmd = [sys.executable, __file__, "--child", case, db["url"], str(args.runs)]
                return S.child_json(cmd, timeout=3600)

        samples = S.interleave([(store, case) for store in stores for case in CASES], args.rounds, run)
    finally:
        if pg is not None:
            pg.stop()
    medians = {"/".join(k): S.median(s["value"] for s in got) for k, got in samples.items() if got}
    rows = []
    for store in stores:
        retry, start = medians.get(f"{store}/retry"), medians.get(f"{store}/start")
        rows.append([store, args.runs, retry, start, None if not (retry and start) else retry / start])
    print(S.table(["store", "runs", "retry µs/run", "start µs/run", "retry/start"], rows))
    results |= {"samples": {"/".join(k): v for k, v in samples.items()}, "medians": medians}
    S.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
