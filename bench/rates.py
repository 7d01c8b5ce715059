"""Rates, measured: what a grant costs, how it scales with its queue, how soon a due waiter resumes,
and DBOS's rate-limited queue beside it, in the same run.

    .venv/bin/python bench/rates.py                        # every case, SQLite and PostgreSQL, 3 rounds
    .venv/bin/python bench/rates.py --cases grants,pairs --no-postgres --rounds 5
    .venv/bin/python bench/rates.py --no-dbos --window 1

Cases (each sample a fresh process and a fresh database; cases interleaved, rotated by round;
medians):

- grants: one run loops ``acquire_rate`` on a rate that never binds (1,000,000 a second): grants/s.
- pairs: one run loops ``acquire_slot`` + ``release_slot`` (capacity 8): pairs/s, the yardstick.
- cost10, cost100k: the store's cost of one grant at its due instant (``rates_due``) with 10 or
  100,000 waiters in the queue (written with bulk SQL, the window full): ms.
- resume: a rate of 1 a second, 6 runs: from each waiter's due instant (the previous grant plus a
  second) to its run executing again after ``acquire_rate``: ms (median of 5 per sample).
- paced, dbos-paced: 40 one-step runs through a rate of 10 a second (duro: ``acquire_rate`` then
  the step; DBOS: a ``Queue`` with ``limiter={"limit": 10, "period": 1}``, polling every 0.1 s):
  seconds until the last completes (the rate allows 3.0 at the least; duro's grants are checked
  against the window as they were recorded).
- runs, dbos-runs: 200 one-step runs through a rate that never binds (DBOS: a limiter that never
  binds): runs/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _support as S

CASES = ("grants", "pairs", "cost10", "cost100k", "resume", "paced", "runs", "dbos-paced", "dbos-runs")
UNITS = {
    "grants": ("grants/s", True),
    "pairs": ("pairs/s", True),
    "cost10": ("ms", False),
    "cost100k": ("ms", False),
    "resume": ("ms median", False),
    "paced": ("s for 40", False),
    "runs": ("runs/s", True),
    "dbos-paced": ("s for 40", False),
    "dbos-runs": ("runs/s", True),
}
UNBOUND = 1_000_000
PACED, PACED_RATE, BATCH, RESUMES = 40, 10, 200, 5


# -- duro cases (in the child) ----------------------------------------------------------------------


def _engine(url: str) -> Any:
    from duro import Engine, Limit, Rate, WorkerOptions, define_workspace

    space = define_workspace(
        limits={"bench": Limit(capacity=8, max_hold="1h")},
        rates={
            "open": Rate(limit=UNBOUND, per="1s"),
            "paced": Rate(limit=PACED_RATE, per="1s"),
            "slow": Rate(limit=1, per="1s"),
        },
    )
    return Engine(url, space, options=WorkerOptions(poll_interval="50ms"))


def _workflows() -> dict[str, Any]:
    from duro import acquire_rate, acquire_slot, release_slot, step, workflow

    @step
    async def add_one(x: int) -> int:
        return x + 1

    @workflow(name="bench.granter")
    async def granter(seconds: float) -> list[float]:
        done, deadline = 0, time.perf_counter() + seconds
        began = time.perf_counter()
        while time.perf_counter() < deadline:
            await acquire_rate("open")
            done += 1
        return [done, time.perf_counter() - began]

    @workflow(name="bench.cycler")
    async def cycler(seconds: float) -> list[float]:
        done, deadline = 0, time.perf_counter() + seconds
        began = time.perf_counter()
        while time.perf_counter() < deadline:
            slot = await acquire_slot("bench")
            await release_slot(slot.id)
            done += 1
        return [done, time.perf_counter() - began]

    @workflow(name="bench.rated")
    async def rated(inp: dict) -> float:
        await acquire_rate(inp["rate"])
        resumed = time.time() * 1000  # when the run executed again, on the wall clock
        await add_one(inp["n"])
        return resumed

    return {"granter": granter, "cycler": cycler, "rated": rated}


async def loop_case(url: str, window: float, name: str) -> dict:
    engine = _engine(url)
    wfs = _workflows()
    engine.register(wfs[name])
    async with engine:
        await (await engine.start(wfs[name], 0.2)).result(timeout="60s")  # warm
        done, took = await (await engine.start(wfs[name], window)).result(timeout="600s")
    return {"value": done / took}


async def runs_case(url: str, rate: str, count: int) -> dict:
    engine = _engine(url)
    wfs = _workflows()
    engine.register(wfs["rated"])
    async with engine:
        began = time.perf_counter()
        handles = [await engine.start(wfs["rated"], {"rate": rate, "n": n}) for n in range(count)]
        for h in handles:
            await h.result(timeout="600s")
        took = time.perf_counter() - began
        grants = [(await h.steps())[0].result["granted_at"] for h in handles]
    if rate == "paced":  # the promise, checked on the grants as recorded
        assert max(sum(1 for g in grants if at <= g < at + 1000) for at in grants) <= PACED_RATE
    return {"value": took if rate == "paced" else count / took}


async def resume_case(url: str) -> dict:
    """Six runs on a rate of 1 a second: the first is granted at once, each next one a second after
    the one before. Its lateness: when its run executed again, past that instant."""
    engine = _engine(url)
    wfs = _workflows()
    engine.register(wfs["rated"])
    async with engine:
        handles = [await engine.start(wfs["rated"], {"rate": "slow", "n": n}) for n in range(RESUMES + 1)]
        for h in handles:
            await h.result(timeout="120s")
        steps = [await h.steps() for h in handles]
        ends = [await h.result() for h in handles]
    granted = sorted((s[0].result["granted_at"], end) for s, end in zip(steps, ends, strict=True))
    late = [end - (prev + 1000) for (prev, _), (_, end) in zip(granted, granted[1:], strict=False)]
    return {"value": statistics.median(late), "max_ms": max(late)}


def cost_case(url: str, waiters: int) -> dict:
    """One grant at its due instant with ``waiters`` queued behind a full window, at the store."""
    import sqlalchemy as sa

    from duro.definitions._config import check_rate
    from duro.store import SqlStore

    config = check_rate("cost", 1, "1s")
    store = SqlStore(url, decisions_clock="caller")
    store.create_schema()
    t0 = 1_000_000
    assert store.rates.request(config, "first", None, None, 1, None, t0).wait.state == "granted"
    rows = [{"id": f"w{i:06d}", "pos": i + 1, "at": t0 + 1} for i in range(waiters)]
    insert = sa.text(
        "INSERT INTO duro_rate_waits (id, rate_name, rate_key, run_id, cost, pos, state, enqueued_at) "
        "VALUES (:id, 'cost', '', NULL, 1, :pos, 'waiting', :at)"
    )
    with store._engine.begin() as conn:
        for start in range(0, len(rows), 5000):
            conn.execute(insert, rows[start : start + 5000])
        conn.execute(
            sa.text("UPDATE duro_rate_keys SET waiting = :n, next_due = :due WHERE rate_name = 'cost'"),
            {"n": waiters, "due": t0 + 1000},
        )
        conn.execute(sa.text("UPDATE duro_rates SET next_pos = :n WHERE name = 'cost'"), {"n": waiters + 1})
        if store.dialect == "postgresql":
            conn.execute(sa.text("ANALYZE duro_rate_waits"))
    times = []
    for k in range(5):  # each a second later: one grant each, the head of the queue
        began = time.perf_counter()
        granted = store.rates.due({"cost": config}, t0 + 1000 * (k + 1)).granted
        times.append((time.perf_counter() - began) * 1000)
        assert [w.id for w in granted] == [f"w{k:06d}"], granted
    store.close()
    return {"value": statistics.median(times)}


def duro_sample(case: str, url: str, window: float) -> dict:
    if case == "grants":
        return asyncio.run(loop_case(url, window, "granter"))
    if case == "pairs":
        return asyncio.run(loop_case(url, window, "cycler"))
    if case in ("cost10", "cost100k"):
        return cost_case(url, 10 if case == "cost10" else 100_000)
    if case == "resume":
        return asyncio.run(resume_case(url))
    if case == "paced":
        return asyncio.run(runs_case(url, "paced", PACED))
    return asyncio.run(runs_case(url, "open", BATCH))


# -- DBOS (in the child) ----------------------------------------------------------------------------


def dbos_sample(case: str, url: str) -> dict:
    import logging

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    paced = case == "dbos-paced"
    limiter = {"limit": PACED_RATE if paced else UNBOUND, "period": 1}

    @DBOS.step()
    async def add_one(x: int) -> int:
        return x + 1

    @DBOS.workflow()
    async def rated(n: int) -> float:
        await add_one(n)
        return time.time() * 1000

    DBOS(config={"name": "duro-bench", "system_database_url": url, "log_level": "WARNING"})  # type: ignore[typeddict-unknown-key]
    try:
        DBOS.launch()
        queue = DBOS.register_queue("bench", limiter=limiter, polling_interval_sec=0.1)  # type: ignore[arg-type]

        async def go() -> dict:
            count = PACED if paced else BATCH
            began = time.perf_counter()
            handles = [await queue.enqueue_async(rated, n) for n in range(count)]
            for h in handles:
                await h.get_result()
            took = time.perf_counter() - began
            return {"value": took if paced else count / took}

        return asyncio.run(go())
    finally:
        DBOS.destroy()


# -- the parent --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=2.0, help="seconds of the grants and pairs loops")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-dbos", action="store_true")
    parser.add_argument("--json", type=Path, help="write every sample and the medians here")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "URL", "WINDOW"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, url, window = args.child
        sys.path.insert(0, str(S.ROOT / "sdk"))
        got = dbos_sample(case, url) if case.startswith("dbos") else duro_sample(case, url, float(window))
        print(json.dumps(got), flush=True)
        return 0
    wanted = [c for c in args.cases.split(",") if c]
    unknown = set(wanted) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}: choose from {', '.join(CASES)}")
    if args.no_dbos or not S.dbos_installed():
        if not args.no_dbos:
            S.log(S.MISSING_DBOS)
        wanted = [c for c in wanted if not c.startswith("dbos")]
    pg = S.start_postgres(args.no_postgres)
    stores = S.Stores(pg)
    kinds = ["sqlite"] + (["postgresql"] if pg else [])
    cases = [(case, kind) for kind in kinds for case in wanted]

    def run(case: Any, rnd: int) -> dict:
        name, kind = case
        with stores.database(kind) as db:
            cmd = [sys.executable, __file__, "--child", name, db["url"], str(args.window)]
            return S.child_json(cmd, timeout=1800)

    try:
        samples = S.interleave(cases, args.rounds, run)
    finally:
        if pg:
            pg.destroy()
    medians = {f"{c}/{k}": S.median(s["value"] for s in got) for (c, k), got in samples.items() if got}
    rows = []
    for (case, kind), got in samples.items():
        if not got:
            continue
        unit, _ = UNITS[case]
        extra = ""
        if "max_ms" in got[0]:
            extra = f"worst: {max(s['max_ms'] for s in got):.2f} ms"
        rows.append([kind, case, unit, f"{medians[f'{case}/{kind}']:.3f}", len(got), extra])
    print(S.table(["store", "case", "unit", "median", "samples", "note"], rows))
    for kind in kinds:
        ratios = []
        if f"grants/{kind}" in medians and f"pairs/{kind}" in medians:
            ratios.append(f"grants/pairs {medians[f'grants/{kind}'] / medians[f'pairs/{kind}']:.2f}")
        if f"cost100k/{kind}" in medians and f"cost10/{kind}" in medians:
            ratios.append(f"cost 100k/10 {medians[f'cost100k/{kind}'] / medians[f'cost10/{kind}']:.2f}")
        if f"runs/{kind}" in medians and f"dbos-runs/{kind}" in medians:
            ratios.append(f"runs duro/DBOS {medians[f'runs/{kind}'] / medians[f'dbos-runs/{kind}']:.2f}")
        if ratios:
            print(f"{kind}: " + ", ".join(ratios))
    S.write_json(args.json, {"samples": {f"{c}/{k}": v for (c, k), v in samples.items()}, "medians": medians})
    return 0


if __name__ == "__main__":
    sys.exit(main())
