"""What metrics and tracing cost on the hot paths. The same duro (the checkout), three
modes, interleaved in one run; SQLite only.

    .venv/bin/python bench/observability.py                                  # 5 rounds
    .venv/bin/python bench/observability.py --rounds 5 --json bench/results/observability.json
    .venv/bin/python bench/observability.py --cases pairs --rounds 3 --window 3

The cases are bench/ab.py's, imported from it (``case_starts``, ``case_runs``, ``case_pairs``; see its
docstring): ``starts`` (a client engine, starts/s), ``runs`` (one-step runs in batches of 500, runs/s)
and ``pairs`` (one run looping ``acquire_slot`` + ``release_slot``, pairs/s). The modes:

- ``off``      ``opentelemetry`` made unimportable before duro is imported
               (``sys.modules["opentelemetry"] = None``: ``duro._tracing.ENABLED`` is False) and no
               collector: what an app without the ``otel`` extra and without metrics runs.
- ``metrics``  ``off`` plus ``duro.metrics.collector(engine)`` registered on a fresh
               ``CollectorRegistry`` for every engine the case makes (bench/ab.py's ``make_engine``,
               wrapped here), so its meter counts every run event and slot decision; the registry is
               scraped (``generate_latest``) when the engine closes, after the timed window, and the
               sample reports what the meter counted.
- ``tracing``  ``opentelemetry-api`` importable and no SDK provider set: duro's spans go to the API's
               proxy provider, which hands out no-op spans (the cost an app pays for installing
               ``duro[otel]`` before it configures an exporter).

Each sample is a fresh interpreter (this file with ``--child``) and a fresh SQLite file, measuring for
at least ``--window`` seconds (2). Within a round every case runs once in each mode; the case order
rotates from round to round as in bench/ab.py, and the mode order rotates by round and by case, so
each mode takes each place in the order.

Two figures per sample: ``wall``, the case's own (bench/ab.py: operations over the timed window's
wall time), and ``cpu``, the same operations per CPU second of the sample's process (every thread,
SQLite's included), read around the timed part (see ``_CpuClock``). On a quiet machine they agree;
on a shared one other processes take wall time from a sample at random, while the CPU time that
metrics or tracing add stays theirs. The table gives each mode's median, its ratio to ``off``'s
median (higher is better for all three cases, so a ratio below 1 is a cost) with the median of the
per-round ratios in brackets, and the verdict: a ratio below 0.95 (the issue's "at most 5%") is
flagged. The JSON also keeps every sample, the per-round figures and the load average per round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ab

ROOT = Path(__file__).resolve().parents[1]
MODES = ("off", "metrics", "tracing")
CASES = ("starts", "runs", "pairs")
BAR = 0.95


# -- the child: one sample ------------------------------------------------------------------------


def _instrument(mode: str) -> dict[str, Any]:
    """Set the mode up before duro is imported; returns what the sample reports about it."""
    if mode not in MODES:
        raise ValueError(mode)
    if mode in ("off", "metrics"):
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # ImportError from here on
    sys.path[:0] = [str(ROOT / p) for p in ab.TREE_PATHS]
    import duro
    from duro import _tracing

    if not duro.__file__ or not duro.__file__.startswith(str(ROOT) + "/"):
        raise SystemExit(f"imported duro from {duro.__file__}, not from {ROOT}")
    if _tracing.ENABLED != (mode == "tracing"):
        raise SystemExit(f"mode {mode}: duro._tracing.ENABLED is {_tracing.ENABLED}")
    about: dict[str, Any] = {"tracing": _tracing.ENABLED}
    if mode == "tracing":
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        if not isinstance(provider, trace.ProxyTracerProvider):
            raise SystemExit(f"mode tracing: a tracer provider is set ({provider!r}); expected none")
        about["provider"] = type(provider).__name__
    if mode == "metrics":
        about["scrapes"] = _collect_on_every_engine()
    return about


def _collect_on_every_engine() -> list[dict[str, float]]:
    """Wrap bench/ab.py's ``make_engine``: every engine gets a collector on its own registry, scraped
    once when the engine closes. Returns the list the scrapes' counts are appended to."""
    from prometheus_client import CollectorRegistry, generate_latest

    from duro.metrics import collector

    scrapes: list[dict[str, float]] = []
    make_engine = ab.make_engine

    def with_collector(url: str, workspace: Any = None, **worker: Any) -> Any:
        engine = make_engine(url, workspace, **worker)
        registry = CollectorRegistry()
        registry.register(collector(engine))
        close = engine.close
        scraped = False

        def scrape_and_close() -> None:
            nonlocal scraped
            if not scraped:  # the case's ``async with`` closes, then its ``finally`` closes again
                scraped = True
                text = generate_latest(registry)
                scrapes.append(
                    {
                        "bytes": len(text),
                        "runs_started": registry.get_sample_value(
                            "duro_runs_started_total", {"workflow": ab.WORKFLOW}
                        )
                        or 0.0,
                        "runs_finished": registry.get_sample_value(
                            "duro_runs_finished_total", {"workflow": ab.WORKFLOW, "status": "completed"}
                        )
                        or 0.0,
                        "slot_waits": registry.get_sample_value(
                            "duro_slot_wait_seconds_count", {"limit": "bench"}
                        )
                        or 0.0,
                        "slot_holds": registry.get_sample_value(
                            "duro_slot_hold_seconds_count", {"limit": "bench"}
                        )
                        or 0.0,
                    }
                )
            close()

        engine.close = scrape_and_close
        return engine

    ab.make_engine = with_collector  # the cases look it up in ab's globals at call time
    return scrapes


class _CpuClock:
    """bench/ab.py's ``time`` module, noting the process's CPU time (every thread: SQLite's too) at
    the first and the last ``perf_counter`` reading, which bracket each case's timed part (its warm-up
    reads no clock). Throughput per CPU second shows a cost that the machine's load hides in wall
    time: on a busy machine the other processes take wall time from every mode alike, not CPU time."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def perf_counter(self) -> float:
        now = time.perf_counter()
        self.last = time.process_time()
        if self.first is None:
            self.first = self.last
        return now


def one_sample(mode: str, case: str, window: float) -> dict:
    about = _instrument(mode)
    clock = _CpuClock()
    ab.time = clock  # type: ignore[assignment]  # the cases read ``time.perf_counter`` from ab's globals
    with tempfile.TemporaryDirectory(prefix="duro-obs-") as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        if case == "starts":
            got = asyncio.run(ab.case_starts(url, window, False))
        elif case == "runs":
            got = asyncio.run(ab.case_runs(url, "sqlite", window, False))
        elif case == "pairs":
            got = asyncio.run(ab.case_pairs(url, window, 1))
        else:
            raise ValueError(case)
    assert clock.first is not None
    cpu = clock.last - clock.first
    return {**got, "cpu_s": cpu, "per_cpu_s": got["n"] / cpu if cpu > 0 else None, **about}


# -- the parent -----------------------------------------------------------------------------------


def run_sample(mode: str, case: str, window: float, timeout: float) -> tuple[dict | None, str]:
    cmd = [sys.executable, __file__, "--child", mode, case, str(window)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OTEL_PYTHON_TRACER_PROVIDER")}
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tempfile.gettempdir()
        )
    except subprocess.TimeoutExpired as err:
        return None, f"timed out after {timeout:.0f} s\n{(err.stderr or b'')[-3000:]!r}"
    if out.returncode != 0:
        return None, out.stderr[-3000:] or out.stdout[-3000:]
    try:
        return json.loads(out.stdout.strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return None, f"no figure in the output:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


def mode_order(rnd: int, case: str) -> list[str]:
    """Round ``rnd``'s mode order for ``case``: rotated by one a round, each case starting elsewhere."""
    shift = (rnd + CASES.index(case)) % len(MODES)
    return [*MODES[shift:], *MODES[:shift]]


FIGURES = {"value": "wall", "per_cpu_s": "cpu"}  # a sample's figure -> its name in the summary


def _median(got: list[dict], key: str) -> float | None:
    values = [v[key] for v in got if v.get(key)]
    return statistics.median(values) if values else None


def summarize(samples: dict[str, dict[str, list[dict]]], by_round: dict[str, list[dict]]) -> list[dict]:
    """Per case and figure (``wall``: the case's own figure; ``cpu``: the same work per CPU second of
    the sample's process): each mode's median, its ratio to ``off``'s median, the median of the
    per-round ratios, and the verdict against :data:`BAR`."""
    rows = []
    for case, got in samples.items():
        row: dict[str, Any] = {"case": case, "store": "sqlite", "unit": ab.CASES[case][0]}
        for key, figure in FIGURES.items():
            medians = {m: _median(got[m], key) for m in MODES}
            row[figure] = {"medians": medians}
            for mode in MODES[1:]:
                off, on = medians["off"], medians[mode]
                ratio = on / off if off and on else None
                paired = [
                    r[mode][key] / r["off"][key]
                    for r in by_round[case]
                    if mode in r and "off" in r and r[mode].get(key) and r["off"].get(key)
                ]
                row[figure][mode] = {
                    "ratio": ratio,
                    "paired_median": statistics.median(paired) if paired else None,
                    "verdict": None if ratio is None else ("ok" if ratio >= BAR else f"BELOW {BAR}"),
                }
        rows.append(row)
    return rows


def _per_cpu(unit: str) -> str:
    return unit.split("/")[0] + " per CPU s"


def table(rows: list[dict], samples: dict) -> str:
    lines = [
        "| case | figure | off | metrics | ratio (paired) | tracing, no-op | ratio (paired) | verdict |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        for figure in FIGURES.values():
            got = row[figure]
            unit = row["unit"] if figure == "wall" else _per_cpu(row["unit"])
            cells = [row["case"], unit, ab._fmt(unit, got["medians"]["off"])]
            verdicts = []
            for mode in MODES[1:]:
                ratio, paired = got[mode]["ratio"], got[mode]["paired_median"]
                shown = (
                    "-" if ratio is None else f"{ratio:.3f}" + ("" if paired is None else f" ({paired:.3f})")
                )
                cells += [ab._fmt(unit, got["medians"][mode]), shown]
                verdicts.append(f"{mode} {got[mode]['verdict'] or '-'}")
            lines.append("| " + " | ".join([*cells, ", ".join(verdicts)]) + " |")
    lines += ["", "samples, wall figure / per CPU second (in round order):"]
    for case, got in samples.items():
        unit = ab.CASES[case][0]
        for mode in MODES:
            each = " ".join(
                f"{ab._fmt(unit, v['value'])}/{ab._fmt(unit, v.get('per_cpu_s'))}" for v in got[mode]
            )
            lines.append(f"  {case:7s} {mode:8s} {each}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="samples per case and mode (default 5)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    parser.add_argument("--window", type=float, default=2.0, help="seconds each sample measures at least (2)")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per sample (default 600)")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "CASE", "WINDOW"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, case, window = args.child
        print(json.dumps(one_sample(mode, case, float(window))))
        return 0
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not cases or any(c not in CASES for c in cases):
        raise SystemExit(f"cases: a comma list of {', '.join(CASES)}")
    samples: dict[str, dict[str, list[dict]]] = {c: {m: [] for m in MODES} for c in cases}
    by_round: dict[str, list[dict]] = {c: [] for c in cases}
    failures: dict[str, str] = {}
    load = [os.getloadavg()]
    began = time.perf_counter()
    total, done = len(cases) * len(MODES) * args.rounds, 0
    print(
        f"{len(cases)} cases x {len(MODES)} modes x {args.rounds} rounds, SQLite, windows >= {args.window} s, "
        f"{os.cpu_count()} CPUs, load {load[0][0]:.2f}",
        file=sys.stderr,
        flush=True,
    )
    for rnd in range(args.rounds):
        for case in ab.round_order(cases, rnd, args.rounds):
            this_round: dict[str, dict] = {}
            for mode in mode_order(rnd, case):
                value, err = run_sample(mode, case, args.window, args.timeout)
                done += 1
                clock = f"[{done}/{total} {time.perf_counter() - began:5.0f}s]"
                if value is None:
                    failures.setdefault(f"{case} {mode}", err)
                    print(f"{clock} round {rnd + 1} {case:7s} {mode:8s} FAILED\n{err}", file=sys.stderr)
                    continue
                value["round"] = rnd + 1
                samples[case][mode].append(value)
                this_round[mode] = {k: value.get(k) for k in FIGURES}
                unit = ab.CASES[case][0]
                counted = f" counted {value['scrapes']}" if mode == "metrics" else ""
                print(
                    f"{clock} round {rnd + 1} {case:7s} {mode:8s} {ab._fmt(unit, value['value'])} {unit} "
                    f"(n {value['n']}, {value['window_s']:.1f} s, {ab._fmt(unit, value['per_cpu_s'])} per CPU s)"
                    f"{counted}",
                    file=sys.stderr,
                    flush=True,
                )
            by_round[case].append(this_round)
        load.append(os.getloadavg())
    wall_s = time.perf_counter() - began
    rows = summarize(samples, by_round)
    print(
        f"\nmedians of {args.rounds} rounds, interleaved, SQLite; {wall_s:.0f} s wall; "
        f"load (1 min) {min(x[0] for x in load):.1f} to {max(x[0] for x in load):.1f}\n"
    )
    print(table(rows, samples))
    below = [
        f"{r['case']} {m} ({f})"
        for r in rows
        for f in FIGURES.values()
        for m in MODES[1:]
        if (r[f][m]["verdict"] or "").startswith("BELOW")
    ]
    if below:
        print(f"\nbelow {BAR}: {', '.join(below)}")
    if failures:
        print(f"\nfailed: {', '.join(failures)} (the first error of each above, on stderr)")
    if args.json:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "commit": commit,
                    "store": "sqlite",
                    "rounds": args.rounds,
                    "window_s": args.window,
                    "bar": BAR,
                    "wall_seconds": wall_s,
                    "machine": {
                        "cpus": os.cpu_count(),
                        "python": platform.python_version(),
                        "platform": platform.platform(),
                        "loadavg_per_round": load,
                    },
                    "summary": rows,
                    "per_round": by_round,
                    "samples": samples,
                    "failures": failures,
                },
                indent=1,
            )
            + "\n"
        )
    return 1 if failures or below else 0


if __name__ == "__main__":
    sys.exit(main())
