"""The hot paths, one commit against another (or the checkout) in the same run: starts, one-step runs,
slot pairs, release-to-resume and the harness's 30 days, on SQLite and PostgreSQL, interleaved so
that the machine's noise falls on both alike.

    .venv/bin/python bench/fence_ab.py --base b13b6b5                 # A = b13b6b5, B = the checkout
    .venv/bin/python bench/fence_ab.py --base b13b6b5 --head HEAD     # B exported from a commit
    .venv/bin/python bench/fence_ab.py --base b13b6b5 --rounds 5 --no-postgres --json /tmp/ab.json
    .venv/bin/python bench/fence_ab.py --base b13b6b5 --cases starts,pairs/sqlite,harness

Trees. ``--base`` (A) is exported with ``git archive`` (sdk/, harness/, bench/) into a temporary
directory; B is the working tree as it is (uncommitted changes included), or ``--head COMMIT``
exported the same way. Each sample is a fresh process that puts one tree's sdk/, harness/ and bench/
first on ``sys.path``, checks that ``duro`` was imported from that tree, and runs one case through
that tree's own bench module (bench/quota.py, core.py, limits.py, harness.py), so each tree runs the
same benchmark code on its own duro. In every round each case runs A then B, or B then A (the order
alternates every round); the table gives medians and B / A.

Stores. SQLite: a new file in its own temporary directory per sample. PostgreSQL: one server per
round (tests/support/pgserver.py: fsync=off, synchronous_commit=off, full_page_writes=off; starting
one takes about 7 s here), a new database per sample, dropped after it.

Cases (``--cases`` takes names, or name/store, comma-separated):

- starts     a client ``Engine(url)`` (never entered), ``register_remote`` + ``await engine.start``
             in a loop, no quota (bench/quota.py ``_duro_client``, its "noquota" case, one client):
             starts/s. 10,000 starts on SQLite, 2,000 on PostgreSQL.
- qstarts    the same with a quota every start passes (``Concurrency(key="tenant:shared",
             limit=10**9)``: quota.py's "duro" case, one client, one key): starts/s. 6,000 / 1,500.
- runs       an entered engine runs one-step workflows, all started then gathered (bench/core.py
             ``bench_duro_e2e``, mode "conc", duro's default pragmas; 20 warm-up runs): runs/s.
             3,000 on SQLite; 1,000 on PostgreSQL (core.py's function builds a SQLite URL, so on
             PostgreSQL the same loop, written here, runs on core.py's workflow).
- seqruns    the same, one run at a time (start, await its result): runs/s. 1,500 / 500.
- pairs      one run looping acquire_slot + release_slot, uncontended (bench/limits.py
             ``case_uncontended``, poll 50 ms, 1 run): pairs/s. 2,000 on SQLite, 500 on PostgreSQL.
- queue      release-to-resume, a queue of 300 one-shot waiters behind a holder (limits.py
             ``case_latency_queue``): median ms per hand-off.
- pingpong   release-to-resume, two runs alternating on a capacity-1 limit, 300 hand-offs
             (limits.py ``case_latency_pingpong``): median ms.
- harness    SQLite only: bench/harness.py ``one_repeat(100, 30)``, the wall time of ``await
             env.advance("30d")`` over 100 runs that sleep an hour 720 times (72,000 wake-ups in the
             harness's in-memory store): seconds.

A full run (both stores, 3 rounds: 15 cases x 2 trees x 3 rounds = 90 samples) took 12 minutes on
this 2-core machine with other work running on it (load average 6-12); less when it is quiet. Progress goes to stderr, one line per sample; the table to
stdout. A sample that fails is reported (the end of its stderr) and left out; the script then
exits 1 after the table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TREE_PATHS = ["sdk", "harness", "bench"]

# case -> (unit, higher is better, {store: size})
CASES: dict[str, tuple[str, bool, dict[str, int]]] = {
    "starts": ("starts/s", True, {"sqlite": 10_000, "postgresql": 2_000}),
    "qstarts": ("starts/s", True, {"sqlite": 6_000, "postgresql": 1_500}),
    "runs": ("runs/s", True, {"sqlite": 3_000, "postgresql": 1_000}),
    "seqruns": ("runs/s", True, {"sqlite": 1_500, "postgresql": 500}),
    "pairs": ("pairs/s", True, {"sqlite": 2_000, "postgresql": 500}),
    "queue": ("ms median", False, {"sqlite": 300, "postgresql": 300}),
    "pingpong": ("ms median", False, {"sqlite": 300, "postgresql": 300}),
    "harness": ("s", False, {"sqlite": 100}),
}
STORES = ("sqlite", "postgresql")
POLL = "50ms"
WARMUP = 20
HARNESS_DAYS = 30


# -- the child: one sample ---------------------------------------------------------------------------


class _NoBarrier:
    """quota.py's client waits at a barrier shared by its clients; alone, there is nothing to wait for."""

    def wait(self, timeout: float | None = None) -> int:
        return 0


async def _e2e_any_store(core: Any, url: str, runs: int, mode: str) -> float:
    """bench/core.py's ``bench_duro_e2e`` loop on any store URL (core's own builds a SQLite file's URL
    and reads SQLite pragmas): runs/s of core's one-step workflow on an entered engine."""
    from duro import Engine

    engine = Engine(url)
    engine.register(core._duro_workflow())
    try:
        async with engine:
            for i in range(WARMUP):
                assert await (await engine.start(core.WORKFLOW, i)).result() == i + 1
            begin = time.perf_counter()
            if mode == "seq":
                for i in range(runs):
                    assert await (await engine.start(core.WORKFLOW, i)).result() == i + 1
            else:
                handles = [await engine.start(core.WORKFLOW, i) for i in range(runs)]
                results = await asyncio.gather(*(h.result() for h in handles))
                assert results == [i + 1 for i in range(runs)]
            elapsed = time.perf_counter() - begin
    finally:
        engine.close()
    return runs / elapsed


def one_case(tree: str, case: str, store: str, url: str) -> float:
    """In the child process: run ``case`` on ``store`` with ``tree``'s duro and bench modules."""
    sys.path[:0] = [f"{tree}/{p}" for p in TREE_PATHS] + [tree]
    import duro

    if not duro.__file__ or not duro.__file__.startswith(tree.rstrip("/") + "/"):
        raise SystemExit(f"imported duro from {duro.__file__}, not from {tree}")
    size = CASES[case][2][store]
    if case == "harness":
        import harness

        return float(asyncio.run(harness.one_repeat(size, HARNESS_DAYS))["seconds"])
    if case in ("runs", "seqruns"):
        import core

        mode = "conc" if case == "runs" else "seq"
        if store == "sqlite":
            return float(asyncio.run(core.bench_duro_e2e(size, WARMUP, None, mode))[0])
        return asyncio.run(_e2e_any_store(core, url, size, mode))
    import _support

    with contextlib.ExitStack() as stack:
        if store == "sqlite":
            url = stack.enter_context(_support.Stores(None).database("sqlite"))["url"]
        if case in ("starts", "qstarts"):
            import quota

            key, limit = ("tenant:shared", quota.ADMIT_LIMIT) if case == "qstarts" else (None, None)
            out = asyncio.run(quota._duro_client(url, key, limit, size, _NoBarrier(), False))
            assert out["started"] == size, out
            return size / (out["end"] - out["begin"])
        import limits

        if case == "pairs":
            return float(asyncio.run(limits.case_uncontended(url, POLL, 1, size))["rate"])
        runner = limits.case_latency_queue if case == "queue" else limits.case_latency_pingpong
        return float(asyncio.run(runner(url, POLL, size))["median_ms"])


# -- the parent ----------------------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def select(spec: str | None, postgres: bool) -> list[tuple[str, str]]:
    """The (case, store) pairs to run, in table order: every case on SQLite, then on PostgreSQL."""
    every = [(c, s) for s in STORES for c, (_, _, sizes) in CASES.items() if s in sizes]
    if spec:
        wanted = [w.strip() for w in spec.split(",") if w.strip()]
        unknown = [
            w
            for w in wanted
            if w.split("/")[0] not in CASES or ("/" in w and w.split("/", 1)[1] not in STORES)
        ]
        if unknown:
            raise SystemExit(
                f"unknown cases {unknown}; cases: {', '.join(CASES)}, stores: {', '.join(STORES)}"
            )
        every = [(c, s) for c, s in every if c in wanted or f"{c}/{s}" in wanted]
    return [(c, s) for c, s in every if postgres or s != "postgresql"]


def run_sample(tree: str, case: str, store: str, url: str, timeout: float) -> tuple[float | None, str]:
    cmd = [sys.executable, __file__, "--child", tree, case, store, url]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ)
    except subprocess.TimeoutExpired as err:
        return None, f"timed out after {timeout:.0f} s\n{(err.stderr or b'')[-3000:]!r}"
    if out.returncode != 0:
        return None, out.stderr[-3000:] or out.stdout[-3000:]
    try:
        return float(json.loads(out.stdout.strip().splitlines()[-1])), ""
    except (ValueError, IndexError):
        return None, f"no figure in the output:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


def _fmt(unit: str, value: float | None) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.3f}"
    if unit.startswith("ms"):
        return f"{value:.2f}"
    return f"{value:,.0f}"


def table(samples: dict, cases: list[tuple[str, str]], label_a: str, label_b: str) -> str:
    lines = [
        f"| case | store | unit | better | {label_a} | {label_b} | B / A | samples A | samples B |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for case, store in cases:
        unit, higher, _ = CASES[case]
        got = samples[f"{case}/{store}"]
        a = statistics.median(got["A"]) if got["A"] else None
        b = statistics.median(got["B"]) if got["B"] else None
        ratio = f"{b / a:.2f}" if a and b else "-"
        lines.append(
            f"| {case} | {store} | {unit} | {'higher' if higher else 'lower'} | {_fmt(unit, a)} | "
            f"{_fmt(unit, b)} | {ratio} | {' '.join(_fmt(unit, v) for v in got['A'])} | "
            f"{' '.join(_fmt(unit, v) for v in got['B'])} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="A: the commit to compare with (required)")
    parser.add_argument(
        "--head", help="B: a commit, exported like --base (default: the working tree as it is)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="samples per case and tree (default 3)")
    parser.add_argument(
        "--cases", help=f"comma list of cases or case/store (default all: {', '.join(CASES)})"
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per sample (default 600)")
    parser.add_argument("--child", nargs=4, metavar=("TREE", "CASE", "STORE", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_case(*args.child)))
        return 0
    if not args.base:
        parser.error("--base is required")
    cases = select(args.cases, not args.no_postgres)
    if not cases:
        raise SystemExit("no case selected")
    base = _git("rev-parse", "--short", args.base)
    head = _git("rev-parse", "--short", args.head) if args.head else None
    checkout = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--", *TREE_PATHS)) if head is None else False
    label_a = base
    label_b = head if head else f"checkout {checkout}" + (" + changes" if dirty else "")
    samples: dict[str, dict[str, list[float]]] = {f"{c}/{s}": {"A": [], "B": []} for c, s in cases}
    failures: dict[str, str] = {}
    pg_needed = any(s == "postgresql" for _, s in cases)
    began = time.perf_counter()
    total = len(cases) * 2 * args.rounds
    done = 0
    with tempfile.TemporaryDirectory(prefix="duro-fence-ab-") as tmp:
        sys.path.append(str(ROOT))
        import _support

        from tests.support.pgserver import start_server

        trees = {}
        for name, commit in (("A", base), ("B", head)):
            if commit is None:
                trees[name] = str(ROOT)
                continue
            dest = Path(tmp) / name
            dest.mkdir()
            _support.export_tree(commit, TREE_PATHS, dest)
            trees[name] = str(dest)
        print(
            f"A = {label_a} ({trees['A']}), B = {label_b} ({trees['B']}); {len(cases)} cases x 2 trees x "
            f"{args.rounds} rounds",
            file=sys.stderr,
            flush=True,
        )
        for rnd in range(args.rounds):
            pg = start_server() if pg_needed else None
            try:
                for case, store in cases:
                    order = ["A", "B"] if rnd % 2 == 0 else ["B", "A"]
                    for name in order:
                        key = f"{case}/{store}"
                        dbname = pg.create_database() if store == "postgresql" else None
                        try:
                            url = pg.url(dbname) if dbname else "-"
                            value, err = run_sample(trees[name], case, store, url, args.timeout)
                        finally:
                            if dbname:
                                pg.drop_database(dbname)
                        done += 1
                        clock = f"[{done}/{total} {time.perf_counter() - began:5.0f}s]"
                        if value is None:
                            failures.setdefault(f"{key} {name}", err)
                            print(
                                f"{clock} round {rnd + 1} {case:8s} {store:10s} {name}: FAILED\n{err}",
                                file=sys.stderr,
                                flush=True,
                            )
                            continue
                        samples[key][name].append(value)
                        print(
                            f"{clock} round {rnd + 1} {case:8s} {store:10s} {name}: "
                            f"{_fmt(CASES[case][0], value)} {CASES[case][0]}",
                            file=sys.stderr,
                            flush=True,
                        )
            finally:
                if pg is not None:
                    pg.stop()
    wall = time.perf_counter() - began
    print(
        f"\nA = {label_a}, B = {label_b}; medians of {args.rounds} round{'s' if args.rounds != 1 else ''}, interleaved; {wall:.0f} s wall\n"
    )
    print(table(samples, cases, label_a, label_b))
    if failures:
        print(f"\nfailed: {', '.join(failures)} (the first error of each above, on stderr)")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "A": base,
                    "B": head or checkout,
                    "B_is_working_tree": head is None,
                    "B_dirty": dirty,
                    "rounds": args.rounds,
                    "wall_seconds": wall,
                    "poll_interval": POLL,
                    "cases": {
                        f"{c}/{s}": {
                            "unit": CASES[c][0],
                            "higher_is_better": CASES[c][1],
                            "size": CASES[c][2][s],
                            **samples[f"{c}/{s}"],
                        }
                        for c, s in cases
                    },
                    "failures": failures,
                },
                indent=1,
            )
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
