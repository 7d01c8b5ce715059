"""What a wake costs when the run left memory: the replay of its history.

A run makes ``--calls`` durable calls (async steps returning small JSON values), then sleeps; the
benchmark times its wake: from the sleep's end (the simulated clock moved past it) to the run's
completion, for many runs at once, in one process on an SQLite file:

- resident   the run stayed in memory: its coroutine resumes (``max_resident_runs`` large);
- evicted   it left memory when it slept (``max_resident_runs=0``): the wake is a claim, a read of
             its steps, a replay of ``--calls`` recorded calls through the workflow code, then the
             same end as the resident run.

The difference per run is what replay costs; its part in the evicted wake says whether replay
dominates. Rounds alternate the two forms (noisy shared machine: medians). The store is called
inline, as under the harness, so what is timed is duro's own work and SQLite's, not thread hops.

    .venv/bin/python bench/replay.py --json bench/results/replay.json    # --calls 10,100 --runs 200 --rounds 5
    .venv/bin/python bench/replay.py --calls 10 --runs 20 --rounds 1     # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import _support as S

from duro import Engine, WorkerOptions, sleep, step, workflow
from duro.testing import run_store_inline
from duro_harness import SimulatedClock

_REAL = (time.perf_counter,)  # out of freezegun's reach


@step
async def work(i: int) -> dict:
    return {"i": i, "ok": True}


@workflow(name="bench.replayed")
async def replayed(calls: int) -> int:
    for i in range(calls):
        await work(i)
    await sleep("1h")
    return calls


async def one_round(resident: bool, calls: int, runs: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        clock = SimulatedClock(datetime(2030, 1, 1, tzinfo=UTC))
        options = WorkerOptions(
            poll_interval=None, evict_after=None, max_resident_runs=10**6 if resident else 0
        )
        engine = Engine(f"sqlite:///{Path(tmp) / 'r.db'}", clock=clock, options=options)
        run_store_inline(engine)
        async with engine:
            engine.register(replayed)
            handles = [await engine.start(replayed, calls) for _ in range(runs)]
            await clock.advance(0)
            assert engine.worker is not None and len(engine.worker.live) == (runs if resident else 0)
            began = _REAL[0]()
            await clock.advance("1h")
            elapsed = _REAL[0]() - began
            assert [await h.status() for h in handles] == ["completed"] * runs
    return elapsed * 1000 / runs


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", default="10,100", help="recorded calls per run, a comma list (10,100)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows, report = [], S.environment() | {"runs": args.runs, "rounds": args.rounds, "calls": {}}
    for calls in map(int, args.calls.split(",")):
        samples: dict[str, list[float]] = {"resident": [], "evicted": []}
        for rnd in range(args.rounds):
            for form in S.rotated(list(samples), rnd, 2):
                samples[form].append(await one_round(form == "resident", calls, args.runs))
        resident, evicted = (S.median(samples[f]) for f in samples)
        report["calls"][calls] = {"resident_ms": resident, "evicted_ms": evicted, "samples": samples}
        rows.append((calls, resident, evicted, f"{(evicted - resident) / evicted:.0%}"))
    print(S.table(("recorded calls", "resident wake (ms)", "evicted wake (ms)", "replay's share"), rows))
    S.write_json(args.json, report)


if __name__ == "__main__":
    asyncio.run(main())
