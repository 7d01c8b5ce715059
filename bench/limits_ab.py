"""Limits, one commit against the checkout in the same run: acquire+release pairs and
release-to-resume latency, interleaved so that the machine's noise falls on both alike.

    .venv/bin/python bench/limits_ab.py --base a43200e            # 3 rounds, medians and ratios
    .venv/bin/python bench/limits_ab.py --base a43200e --rounds 5 --no-postgres

``--base`` is exported with ``git archive`` (sdk/, harness/, bench/) into a temporary directory. Each
sample is a fresh process that puts one tree's sdk/ first on ``sys.path`` and runs one case of
``bench/limits.py`` (that tree's own copy) on a fresh database: SQLite file, or a new PostgreSQL
server (tests/support/pgserver.py). Cases: uncontended pairs (1 run; 2,000 pairs on SQLite, 500 on
PostgreSQL), and the latency cases with 300 hand-offs (a queue of 300 one-shot waiters; two runs
alternating). Poll interval 50 ms, as in bench/limits.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _support

ROOT = Path(__file__).resolve().parents[1]
CASES = (
    ("pairs", "sqlite"),
    ("queue", "sqlite"),
    ("pairs", "postgresql"),
    ("queue", "postgresql"),
    ("pingpong", "postgresql"),
)
UNITS = {"pairs": "pairs/s", "queue": "ms median", "pingpong": "ms median"}


def one_case(tree: str, case: str, store: str) -> float:
    """In the child process: run ``case`` on ``store`` with ``tree``'s duro and print the figure."""
    sys.path[:0] = [f"{tree}/sdk", f"{tree}/harness", f"{tree}/bench", tree, str(ROOT)]
    import duro

    if not duro.__file__ or not duro.__file__.startswith(tree):
        raise SystemExit(f"imported duro from {duro.__file__}, not from {tree}")
    import limits

    from tests.support.pgserver import start_server

    pg = start_server() if store == "postgresql" else None
    try:
        with limits.Stores(pg).database(store) as db:
            if case == "pairs":
                pairs = 2000 if store == "sqlite" else 500
                return float(asyncio.run(limits.case_uncontended(db["url"], "50ms", 1, pairs))["rate"])
            runner = limits.case_latency_queue if case == "queue" else limits.case_latency_pingpong
            return float(asyncio.run(runner(db["url"], "50ms", 300))["median_ms"])
    finally:
        if pg is not None:
            pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the commit to compare the checkout with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--child", nargs=3, metavar=("TREE", "CASE", "STORE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_case(*args.child)))
        return
    cases = [c for c in CASES if not (args.no_postgres and c[1] == "postgresql")]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    samples: dict[str, dict[str, list[float]]] = {f"{c}/{s}": {"base": [], "head": []} for c, s in cases}
    with tempfile.TemporaryDirectory(prefix="duro-limits-ab-") as tmp:
        _support.export_tree(commit, ["sdk", "harness", "bench"], Path(tmp))
        trees = {"base": tmp, "head": str(ROOT)}
        for rnd in range(args.rounds):
            for case, store in cases:
                order = list(trees.items()) if rnd % 2 == 0 else list(reversed(trees.items()))
                for name, tree in order:
                    out = subprocess.run(
                        [sys.executable, __file__, "--base", commit, "--child", tree, case, store],
                        capture_output=True,
                        text=True,
                        timeout=900,
                        env=os.environ,
                    )
                    if out.returncode != 0:
                        raise SystemExit(f"{name} {case} {store} failed:\n{out.stderr[-3000:]}")
                    value = json.loads(out.stdout.strip().splitlines()[-1])
                    samples[f"{case}/{store}"][name].append(value)
                    print(
                        f"round {rnd + 1}/{args.rounds} {case:8s} {store:10s} {name}: {value:.2f}", flush=True
                    )
    print(f"\nbase {commit} vs checkout {head}; medians of {args.rounds}, interleaved\n")
    print("| case | store | unit | base | checkout | checkout / base | samples base | samples checkout |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- | --- |")
    for case, store in cases:
        got = samples[f"{case}/{store}"]
        b, h = statistics.median(got["base"]), statistics.median(got["head"])
        fmt = (lambda v: f"{v:,.0f}") if case == "pairs" else (lambda v: f"{v:.2f}")
        print(
            f"| {case} | {store} | {UNITS[case]} | {fmt(b)} | {fmt(h)} | {h / b:.2f} | "
            f"{' '.join(fmt(v) for v in got['base'])} | {' '.join(fmt(v) for v in got['head'])} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"base": commit, "head": head, "samples": samples}, indent=1))


if __name__ == "__main__":
    main()
