"""The A/B runner: duro's hot paths on one tree against another (or the checkout), or the checkout in
several instrumentation modes, the same benchmark code on every variant, interleaved in one run.

    .venv/bin/python bench/ab.py --base b682bd8                      # A = b682bd8, B = the checkout
    .venv/bin/python bench/ab.py --base b682bd8 --head 1c27fc7       # B exported from a commit
    .venv/bin/python bench/ab.py --base b682bd8 --cases starts,pairs/sqlite,harness --rounds 5 --no-postgres
    .venv/bin/python bench/ab.py --modes off,metrics,tracing --cases starts,runs,pairs --no-postgres

Variants: ``--base`` (A) and ``--head`` (B) are exported with ``git archive`` (sdk/, harness/);
without ``--head`` B is the working tree as it is. ``--modes`` measures the checkout instead, once per
mode: ``off`` (``opentelemetry`` unimportable, no collector), ``metrics`` (``off`` plus a
``duro.metrics.collector`` on every engine, scraped when it closes), ``tracing`` (the OpenTelemetry
API importable, no provider set). The first variant is the reference of the ratios.

Samples: each one a fresh process (this file with one tree's sdk/ and harness/ first on
``sys.path``, checked) and a fresh database (SQLite: a new file; PostgreSQL: one server per round, a
new database per sample), measuring for at least ``--window`` seconds. Within a round every case
runs once per variant; the case order rotates from round to round and the variant order by round
and case. Each sample gives its figure and the same operations per CPU second of its process. The
table: medians, and each variant over the first, oriented so that above 1 is better; the verdict
flags a ratio below 0.9 (and the exit status is 1). Cases, through duro's public API only:

- starts, qstarts: a client ``Engine`` (never entered) starting one-step runs, without a quota and
  under one every start passes (one key): starts/s.
- runs, seqruns: an entered engine runs one-step workflows in batches (500 on SQLite, 200 on
  PostgreSQL), or one at a time: runs/s.
- pairs, pairs8: 1 or 8 runs looping ``acquire_slot`` + ``release_slot`` (capacity 8): pairs/s.
- kpairs, kpairs8: the same on a keyed limit (capacity 8, ``per_key=2``), the runs over 4 keys (no
  run ever waits for its key): what keys cost a pair (trees with keyed limits only).
- queue: release-to-resume down a queue of 200 waiters on a capacity-1 limit: the median, ms.
- pingpong: release-to-resume between two runs alternating on a capacity-1 limit: the median, ms.
- xpingpong: the same between two workers (two engines in one process, PostgreSQL): every
  hand-off crosses workers.
- harness: ``duro_harness.simulated()``, 100 runs sleeping an hour 720 times, the seconds of
  ``env.advance("30d")`` (SQLite only).
- scale: 2 worker processes (this file, ``--worker``) drain a backlog enqueued while they were
  stopped, sized to last 2.5 windows: runs/s (PostgreSQL only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _support as S

TREE_PATHS = ["sdk", "harness"]
STORES = ("sqlite", "postgresql")
MODES = ("off", "metrics", "tracing")
# case -> (unit, higher is better, stores)
CASES: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "starts": ("starts/s", True, STORES),
    "qstarts": ("starts/s", True, STORES),
    "runs": ("runs/s", True, STORES),
    "seqruns": ("runs/s", True, STORES),
    "pairs": ("pairs/s", True, STORES),
    "pairs8": ("pairs/s", True, STORES),
    "kpairs": ("pairs/s", True, STORES),
    "kpairs8": ("pairs/s", True, STORES),
    "queue": ("ms median", False, STORES),
    "pingpong": ("ms median", False, STORES),
    "xpingpong": ("ms median", False, ("postgresql",)),
    "harness": ("s / 30 days", False, ("sqlite",)),
    "scale": ("runs/s", True, ("postgresql",)),
}
POLL, WORKER_POLL, WARMUP, QUEUE_DEPTH = "50ms", "100ms", 20, 200
RUN_BATCH = {"sqlite": 500, "postgresql": 200}
RESULT_TIMEOUT = "600s"
WORKFLOW = "bench.one_step"


# -- compat: the only code that knows more than one version of duro -------------------------------


def make_engine(url: str, workspace: Any = None, **worker: Any) -> Any:
    """``Engine(url, workspace)`` with worker options: through ``duro.WorkerOptions`` when the tree
    has it, else as keyword arguments of ``Engine`` (older trees)."""
    import duro

    if getattr(duro, "WorkerOptions", None) is not None and worker:
        return duro.Engine(url, workspace, options=duro.WorkerOptions(**worker))
    return duro.Engine(url, workspace, **worker)


# freezegun (which the harness starts) swaps every module-level reference to the time functions; a
# reference kept inside a tuple is out of its reach, so the cases keep reading real time.
_REAL = (time.perf_counter, time.process_time)


def clock() -> tuple[float, float]:
    return _REAL[0](), _REAL[1]()


def figure(value: float, n: int, began: tuple[float, float], **extra: Any) -> dict:
    wall, cpu = (now - then for now, then in zip(clock(), began, strict=True))
    return {"value": value, "n": n, "window_s": wall, "per_cpu_s": n / cpu if cpu > 0 else None, **extra}


# -- workflows (defined in the child, on the tree's duro) -----------------------------------------

STATE: dict[str, Any] = {"deadline": 0.0}
SPANS: dict[str, tuple[float, float, int]] = {}  # tag -> (loop start, loop end, pairs)
EVENTS: list[tuple[str, float]] = []  # ("rel", t) just before release_slot, ("acq", t) just after acquire


def define_workflows() -> dict[str, Any]:
    from duro import acquire_slot, release_slot, sleep, step, wait_for_signal, workflow

    @step
    async def add_one(x: int) -> int:
        return x + 1

    @workflow(name=WORKFLOW)
    async def one_step(x: int) -> int:
        return await add_one(x)

    @workflow(name="bench.cycler")
    async def cycler(inp: dict) -> int:
        """acquire+release pairs: ``n`` of them, or until STATE's deadline (no replay happens)."""
        n, begin, done = inp.get("n"), time.perf_counter(), 0
        keyed = {"key": inp["key"]} if "key" in inp else {}  # older trees have no key=
        while True:
            slot = await acquire_slot("bench", label=f"{inp['tag']}-{done}", **keyed)
            if inp.get("events"):
                EVENTS.extend((("acq", time.perf_counter()), ("rel", time.perf_counter())))
            assert (await release_slot(slot.id)).released
            done += 1
            if (n is not None and done >= n) or (n is None and time.perf_counter() >= STATE["deadline"]):
                break
        SPANS[inp["tag"]] = (begin, time.perf_counter(), done)
        return done

    @workflow(name="bench.holder")
    async def holder(inp: dict) -> bool:
        slot = await acquire_slot("bench", label=inp["tag"])
        await wait_for_signal("go")
        EVENTS.append(("rel", time.perf_counter()))
        return (await release_slot(slot.id)).released

    @workflow(name="bench.hourly")
    async def hourly(hours: int) -> int:
        for _ in range(hours):
            await sleep("1h")
        return hours

    return {"one_step": one_step, "cycler": cycler, "holder": holder, "hourly": hourly}


# -- the cases (in the child) ---------------------------------------------------------------------


async def case_starts(url: str, window: float, quota: bool) -> dict:
    from duro import Concurrency

    engine = make_engine(url)
    try:
        engine.register_remote(WORKFLOW)
        conc = Concurrency(key="tenant:shared", limit=10**9) if quota else None
        for i in range(WARMUP):  # the schema, the connection, statement caches
            await engine.start(WORKFLOW, -i, concurrency=conc)
        count, began = 0, clock()
        while count == 0 or clock()[0] - began[0] < window:
            for _ in range(50):
                await engine.start(WORKFLOW, count, concurrency=conc)
                count += 1
        got = figure(0, count, began)
    finally:
        engine.close()
    return got | {"value": count / got["window_s"]}


async def case_runs(url: str, store: str, window: float, sequential: bool) -> dict:
    engine = make_engine(url)
    engine.register(define_workflows()["one_step"])
    try:
        async with engine:
            for i in range(WARMUP):
                assert await (await engine.start(WORKFLOW, i)).result(timeout=RESULT_TIMEOUT) == i + 1
            count, began = 0, clock()
            while count == 0 or clock()[0] - began[0] < window:
                batch = range(count, count + (20 if sequential else RUN_BATCH[store]))
                if sequential:
                    for i in batch:
                        assert await (await engine.start(WORKFLOW, i)).result(timeout=RESULT_TIMEOUT) == i + 1
                else:
                    handles = [await engine.start(WORKFLOW, i) for i in batch]
                    results = await asyncio.gather(*(h.result(timeout=RESULT_TIMEOUT) for h in handles))
                    assert results == [i + 1 for i in batch]
                count += len(batch)
            got = figure(0, count, began)
    finally:
        engine.close()
    return got | {"value": count / got["window_s"]}


async def _limits(engine: Any) -> tuple[int, int, int]:
    info = next(i for i in await engine.limits.list() if i.name == "bench")
    return info.busy, info.reserved, info.waiting


async def _until(engine: Any, waiting: int, busy: int) -> None:
    deadline = time.perf_counter() + 300
    while (counts := await _limits(engine)) != (busy, 0, waiting):
        assert time.perf_counter() < deadline, f"limit: {counts}, expected {busy}, 0, {waiting}"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def limit_engine(url: str, capacity: int, per_key: int | None = None) -> Any:
    """An entered engine with a limit "bench" of ``capacity`` (keyed: ``per_key``), warmed with 20
    pairs."""
    from duro import Limit, define_workspace

    wfs = define_workflows()
    keyed = {} if per_key is None else {"per_key": per_key}
    space = define_workspace(limits={"bench": Limit(capacity=capacity, max_hold="1h", **keyed)})
    engine = make_engine(url, space, poll_interval=POLL)
    engine.register(wfs["cycler"])
    engine.register(wfs["holder"])
    try:
        async with engine:
            warm = {"n": WARMUP, "tag": "warm"} | ({} if per_key is None else {"key": "k0"})
            handle = await engine.start(wfs["cycler"], warm)
            assert await handle.result(timeout=RESULT_TIMEOUT) == WARMUP
            EVENTS.clear()
            SPANS.clear()
            yield engine, wfs
    finally:
        engine.close()


async def case_pairs(url: str, window: float, runs: int, keyed: bool = False) -> dict:
    async with limit_engine(url, max(8, runs), 2 if keyed else None) as (engine, wfs):
        began = clock()
        STATE["deadline"] = time.perf_counter() + window + 0.25  # the runs start a little later
        inputs = [{"tag": f"u{i}"} | ({"key": f"k{i % 4}"} if keyed else {}) for i in range(runs)]
        handles = [await engine.start(wfs["cycler"], inp) for inp in inputs]
        done = sum([await h.result(timeout=RESULT_TIMEOUT) for h in handles])
        got = figure(0, done, began)
        assert await _limits(engine) == (0, 0, 0)
    span = max(e for _, e, _ in SPANS.values()) - min(b for b, _, _ in SPANS.values())
    return got | {"value": done / span, "window_s": span}


async def case_queue(url: str, window: float) -> dict:
    lat: list[float] = []
    measured = 0.0
    async with limit_engine(url, 1) as (engine, wfs):
        began = clock()
        while measured < window:
            EVENTS.clear()
            first = await engine.start(wfs["holder"], {"tag": f"h{len(lat)}"})
            await _until(engine, waiting=0, busy=1)
            tags = [{"n": 1, "tag": f"l{len(lat)}-{i}", "events": True} for i in range(QUEUE_DEPTH)]
            waiters = [await engine.start(wfs["cycler"], t) for t in tags]
            await _until(engine, waiting=QUEUE_DEPTH, busy=1)
            await first.signal("go")
            assert [await w.result(timeout=RESULT_TIMEOUT) for w in [first, *waiters]] == [True] + [
                1
            ] * QUEUE_DEPTH
            lat += S.handoffs(EVENTS)
            measured += EVENTS[-2][1] - EVENTS[0][1]  # the holder's release -> the last grant
        got = figure(0, len(lat), began)
    return got | {"value": statistics.median(lat), "p99_ms": S.percentile(lat, 99), "window_s": measured}


async def case_pingpong(url: str, window: float) -> dict:
    async with limit_engine(url, 1) as (engine, wfs):
        began = clock()
        first = await engine.start(wfs["holder"], {"tag": "h"})
        await _until(engine, waiting=0, busy=1)
        STATE["deadline"] = math.inf
        runs = [await engine.start(wfs["cycler"], {"tag": f"p{i}", "events": True}) for i in range(2)]
        await _until(engine, waiting=2, busy=1)
        STATE["deadline"] = time.perf_counter() + window + 0.1
        await first.signal("go")
        for r in [first, *runs]:
            await r.result(timeout=RESULT_TIMEOUT)
        lat = S.handoffs(EVENTS)[2:]  # after the holder's hand-off down a queue of two
        got = figure(0, len(lat), began)
    return got | {"value": statistics.median(lat), "window_s": EVENTS[-2][1] - EVENTS[0][1]}


async def case_xpingpong(url: str, window: float) -> dict:
    """``pingpong`` between two workers (two engines in this process): every hand-off crosses
    workers, as a reservation, its notice and the other worker's confirm."""
    from duro import Limit, define_workspace

    wfs = define_workflows()
    space = define_workspace(limits={"bench": Limit(capacity=1, max_hold="1h")})
    engines = [make_engine(url, space, poll_interval=POLL, worker_id=f"ab-x{i}") for i in range(2)]
    for engine in engines:
        engine.register(wfs["cycler"])
    try:
        async with engines[0], engines[1]:
            warm = await engines[0].start(wfs["cycler"], {"n": WARMUP, "tag": "warm"})
            assert await warm.result(timeout=RESULT_TIMEOUT) == WARMUP
            EVENTS.clear()
            began = clock()
            STATE["deadline"] = time.perf_counter() + window + 0.25
            runs = [
                await e.start(wfs["cycler"], {"tag": f"x{i}", "events": True}) for i, e in enumerate(engines)
            ]
            for run in runs:
                await run.result(timeout=RESULT_TIMEOUT)
            lat = S.handoffs(EVENTS)
            got = figure(0, len(lat), began)
    finally:
        for engine in engines:
            engine.close()
    return got | {"value": statistics.median(lat), "window_s": EVENTS[-1][1] - EVENTS[0][1]}


async def case_harness(window: float) -> dict:
    from duro_harness import simulated

    repeats: list[float] = []
    began = clock()
    while sum(repeats) < window:
        async with simulated() as env:
            env.engine.register(define_workflows()["hourly"])
            handles = [await env.start("bench.hourly", 30 * 24) for _ in range(100)]
            await env.run_until_idle()
            start = clock()[0]
            await env.advance("30d")
            repeats.append(clock()[0] - start)
            assert [await h.status() for h in handles] == ["completed"] * 100
    got = figure(0, len(repeats), began, repeats=repeats)
    return got | {"value": statistics.fmean(repeats), "per_cpu_s": None, "window_s": sum(repeats)}


def worker_main(tree: str, url: str, worker_id: str) -> None:
    """A scale worker: an entered engine running the one-step workflow until SIGTERM."""
    use_tree(tree, "-")
    wfs = define_workflows()

    async def serve() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        engine = make_engine(url, poll_interval=WORKER_POLL, worker_id=worker_id)
        engine.register(wfs["one_step"])
        try:
            async with engine:
                print("ready", flush=True)
                await stop.wait()
        finally:
            engine.close()

    asyncio.run(serve())


async def _backlog(client: Any, procs: list[subprocess.Popen], size: int) -> float:
    """``size`` runs enqueued while the workers are stopped; runs/s from SIGCONT to the last end."""
    for p in procs:
        p.send_signal(signal.SIGSTOP)
    try:
        since = time.time() - 0.001
        for i in range(size):
            await client.start(WORKFLOW, i)
    finally:
        t0 = time.time()
        for p in procs:
            p.send_signal(signal.SIGCONT)
    deadline = time.perf_counter() + max(120.0, size / 20)
    while await client.list_runs(workflow=WORKFLOW, status=["pending", "running"], limit=1):
        assert all(p.poll() is None for p in procs), "a worker exited"
        assert time.perf_counter() < deadline, "the backlog did not drain in time"
        await asyncio.sleep(0.05)
    assert not await client.list_runs(workflow=WORKFLOW, status=["failed", "cancelled"], limit=1)
    done = [r for r in await client.list_runs(workflow=WORKFLOW, status="completed", limit=10_000)
            if r.created_at.timestamp() >= since]  # fmt: skip
    assert len(done) == size, (len(done), size)
    return size / (max(r.ended_at.timestamp() for r in done) - t0)


async def case_scale(tree: str, url: str, window: float) -> dict:
    client = make_engine(url)
    client.register_remote(WORKFLOW)
    procs: list[subprocess.Popen] = []
    try:
        await client.start(WORKFLOW, -1)  # the schema, before any worker
        for i in range(2):
            cmd = [sys.executable, __file__, "--worker", tree, url, f"ab-worker-{i}"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", f"worker {p.pid}"
        for h in [await client.start(WORKFLOW, i) for i in range(WARMUP * 2)]:
            await h.result(timeout=RESULT_TIMEOUT)
        await asyncio.sleep(0.2)  # every worker's pass done before it is stopped
        first = await _backlog(client, procs, 1_000)
        size = min(9_000, max(1_000, round(first * window * 2.5)))
        await asyncio.sleep(0.2)
        began = time.perf_counter()
        rate = await _backlog(client, procs, size)
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
        client.close()
    return {"value": rate, "n": size, "window_s": time.perf_counter() - began, "per_cpu_s": None}


def instrument(mode: str) -> None:
    """Set a mode up before duro is imported (``-``: nothing)."""
    if mode in ("off", "metrics"):
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # ImportError from here on
    if mode != "metrics":
        return
    global make_engine
    plain = make_engine

    def with_collector(url: str, workspace: Any = None, **worker: Any) -> Any:
        from prometheus_client import CollectorRegistry, generate_latest

        from duro.metrics import collector

        engine = plain(url, workspace, **worker)
        registry = CollectorRegistry()
        registry.register(collector(engine))
        close, scraped = engine.close, []

        def scrape_and_close() -> None:
            if not scraped:  # a case's ``async with`` closes, then its ``finally`` closes again
                scraped.append(len(generate_latest(registry)))
            close()

        engine.close = scrape_and_close
        return engine

    make_engine = with_collector


def use_tree(tree: str, mode: str) -> None:
    instrument(mode)
    sys.path[:0] = [f"{tree}/{p}" for p in TREE_PATHS]
    import duro

    if not duro.__file__ or not duro.__file__.startswith(tree.rstrip("/") + "/"):
        raise SystemExit(f"imported duro from {duro.__file__}, not from {tree}")


def one_case(tree: str, mode: str, case: str, store: str, url: str, window: float) -> dict:
    """In the child process: one sample of ``case`` on ``store`` with ``tree``'s duro."""
    use_tree(tree, mode)
    with tempfile.TemporaryDirectory(prefix="duro-ab-") as tmp:
        if store == "sqlite":
            url = f"sqlite:///{tmp}/bench.db"
        run = {
            "starts": lambda: case_starts(url, window, False),
            "qstarts": lambda: case_starts(url, window, True),
            "runs": lambda: case_runs(url, store, window, False),
            "seqruns": lambda: case_runs(url, store, window, True),
            "pairs": lambda: case_pairs(url, window, 1),
            "pairs8": lambda: case_pairs(url, window, 8),
            "kpairs": lambda: case_pairs(url, window, 1, keyed=True),
            "kpairs8": lambda: case_pairs(url, window, 8, keyed=True),
            "queue": lambda: case_queue(url, window),
            "pingpong": lambda: case_pingpong(url, window),
            "xpingpong": lambda: case_xpingpong(url, window),
            "harness": lambda: case_harness(window),
            "scale": lambda: case_scale(tree, url, window),
        }[case]
        return asyncio.run(run())


# -- the parent -----------------------------------------------------------------------------------


def select(spec: str | None, postgres: bool) -> list[tuple[str, str]]:
    """The (case, store) pairs, in table order: every case on SQLite, then on PostgreSQL."""
    every = [(c, s) for s in STORES for c, (_, _, stores) in CASES.items() if s in stores]
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


def run_sample(
    variant: dict, case: str, store: str, url: str, args: argparse.Namespace
) -> tuple[dict | None, str]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        variant["tree"],
        variant["mode"],
        case,
        store,
        url,
        str(args.window),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OTEL_PYTHON_TRACER_PROVIDER")}
    try:
        return S.child_json(cmd, args.timeout, env), ""
    except subprocess.TimeoutExpired:
        return None, f"timed out after {args.timeout:.0f} s"
    except RuntimeError as err:
        return None, str(err)


def fmt(unit: str, value: float | None) -> str:
    if value is None:
        return "-"
    return (
        f"{value:.3f}"
        if unit.startswith("s ")
        else f"{value:.2f}"
        if unit.startswith("ms")
        else f"{value:,.0f}"
    )


def summarize(samples: dict, cases: list[tuple[str, str]], names: list[str]) -> list[dict]:
    rows = []
    for case, store in cases:
        unit, higher, _ = CASES[case]
        got = samples[f"{case}/{store}"]
        row: dict[str, Any] = {"case": case, "store": store, "unit": unit, "higher_is_better": higher}
        for key, label in (("value", ""), ("per_cpu_s", "cpu_")):
            med = {n: S.median(v[key] for v in got[n] if v.get(key)) for n in names}
            med = {n: (None if math.isnan(m) else m) for n, m in med.items()}
            row[f"{label}medians"] = med
            ref = med[names[0]]
            row[f"{label}ratios"] = {
                n: (med[n] / ref if higher or key != "value" else ref / med[n]) if ref and med[n] else None
                for n in names[1:]
            }
        ratios = [r for r in row["ratios"].values() if r is not None]
        row["verdict"] = None if not ratios else ("ok" if min(ratios) >= 0.9 else "BELOW 0.9")
        if names == ["A", "B"]:
            row |= {"A": row["medians"]["A"], "B": row["medians"]["B"], "B_over_A": row["ratios"]["B"]}
        rows.append(row)
    return rows


def table(rows: list[dict], samples: dict, labels: dict[str, str]) -> str:
    names = list(labels)
    head = ["case", "store", "unit", *(labels[n] for n in names[:1])]
    for n in names[1:]:
        head += [labels[n], f"{n} / {names[0]}", f"per CPU s, {n} / {names[0]}"]
    lines = []
    for row in rows:
        unit = row["unit"]
        cells = [row["case"], row["store"], unit, fmt(unit, row["medians"][names[0]])]
        for n in names[1:]:
            ratio, cpu = row["ratios"][n], row["cpu_ratios"][n]
            cells += [
                fmt(unit, row["medians"][n]),
                "-" if ratio is None else f"{ratio:.2f}",
                "-" if cpu is None else f"{cpu:.2f}",
            ]
        each = "; ".join(
            " ".join(fmt(unit, v["value"]) for v in samples[f"{row['case']}/{row['store']}"][n])
            for n in names
        )
        lines.append([*cells, row["verdict"] or "-", each])
    return S.table([*head, "verdict", "samples"], lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="A: the commit to compare with")
    parser.add_argument("--head", help="B: a commit, exported like --base, or 'checkout' (the default)")
    parser.add_argument("--only-base", action="store_true", help="measure A alone")
    parser.add_argument("--modes", help=f"instead of trees: the checkout in these modes ({','.join(MODES)})")
    parser.add_argument("--rounds", type=int, default=3, help="samples per case and variant (3)")
    parser.add_argument(
        "--cases", help=f"comma list of cases or case/store (default all: {', '.join(CASES)})"
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--window", type=float, default=2.0, help="seconds each sample measures at least (2)")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per sample (600)")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(*args.worker)
        return 0
    if args.child:
        tree, mode, case, store, url, window = args.child
        print(json.dumps(one_case(tree, mode, case, store, url, float(window))))
        return 0
    if not args.base and not args.modes:
        parser.error("--base or --modes is required")
    cases = select(args.cases, not args.no_postgres)
    if not cases:
        raise SystemExit("no case selected")
    checkout = S.git("rev-parse", "--short", "HEAD")
    dirty = S.git("status", "--porcelain", "--", *TREE_PATHS) != ""
    here = f"checkout {checkout}" + (" + changes" if dirty else "")
    with tempfile.TemporaryDirectory(prefix="duro-ab-") as tmp:
        variants: dict[str, dict] = {}
        if args.modes:
            modes = args.modes.split(",")
            assert set(modes) <= set(MODES), f"modes: {', '.join(MODES)}"
            variants = {m: {"tree": str(S.ROOT), "mode": m, "label": f"{m} ({checkout})"} for m in modes}
        else:
            revs = {"A": args.base} | ({} if args.only_base else {"B": args.head})
            for name, rev in revs.items():
                if rev in (None, "checkout"):
                    variants[name] = {"tree": str(S.ROOT), "mode": "-", "label": here}
                    continue
                short = S.git("rev-parse", "--short", rev)
                (Path(tmp) / name).mkdir()
                S.export_tree(short, TREE_PATHS, Path(tmp) / name)
                variants[name] = {"tree": f"{tmp}/{name}", "mode": "-", "label": short, "commit": short}
        names = list(variants)
        samples: dict[str, dict[str, list[dict]]] = {f"{c}/{s}": {n: [] for n in names} for c, s in cases}
        failures: dict[str, str] = {}
        began = time.perf_counter()
        what = ", ".join(f"{n} = {v['label']}" for n, v in variants.items())
        S.log(f"{what}; {len(cases)} cases x {args.rounds} rounds")
        for rnd in range(args.rounds):
            pg = S.start_postgres() if any(s == "postgresql" for _, s in cases) else None
            try:
                for index, (case, store) in enumerate(S.rotated(cases, rnd, args.rounds)):
                    for name in S.rotated(names, rnd + index, len(names)):
                        key, dbname = (
                            f"{case}/{store}",
                            pg.create_database() if store == "postgresql" else None,
                        )
                        try:
                            value, err = run_sample(
                                variants[name], case, store, pg.url(dbname) if dbname else "-", args
                            )
                        finally:
                            if dbname:
                                pg.drop_database(dbname)
                        unit = CASES[case][0]
                        say = f"[{time.perf_counter() - began:5.0f}s] round {rnd + 1} {key:20s} {name}:"
                        if value is None:
                            failures.setdefault(f"{key} {name}", err)
                            S.log(f"{say} FAILED\n{err}")
                            continue
                        samples[key][name].append(value)
                        S.log(
                            f"{say} {fmt(unit, value['value'])} {unit} (n {value['n']}, {value['window_s']:.1f} s)"
                        )
            finally:
                if pg is not None:
                    pg.stop()
    wall_s = time.perf_counter() - began
    rows = summarize(samples, cases, names)
    print(f"\n{what}; medians of {args.rounds} rounds, interleaved; {wall_s:.0f} s\n")
    print(table(rows, samples, {n: v["label"] for n, v in variants.items()}))
    below = [f"{r['case']}/{r['store']}" for r in rows if r["verdict"] == "BELOW 0.9"]
    if below:
        print(f"\nbelow 0.9x: {', '.join(below)}")
    if failures:
        print(f"\nfailed: {', '.join(failures)} (the first error of each above, on stderr)")
    out = {"variants": variants, "rounds": args.rounds, "window_s": args.window, "wall_seconds": wall_s}
    if not args.modes:
        out |= {
            "A": variants["A"]["label"],
            "B": variants["B"]["label"] if "B" in variants else None,
            "B_dirty": dirty,
        }
    S.write_json(
        args.json, S.environment() | out | {"summary": rows, "samples": samples, "failures": failures}
    )
    return 1 if failures or below else 0


if __name__ == "__main__":
    sys.exit(main())
