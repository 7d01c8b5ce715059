"""The A/B runner: the hot paths of one duro tree against another (or the checkout), the same benchmark
code running on both, interleaved in one run so that the machine's noise falls on both alike.

    .venv/bin/python bench/ab.py --base b682bd8                      # A = b682bd8, B = the checkout
    .venv/bin/python bench/ab.py --base b682bd8 --head 1c27fc7       # B exported from a commit
    .venv/bin/python bench/ab.py --base b682bd8 --rounds 5 --no-postgres --json /tmp/ab.json
    .venv/bin/python bench/ab.py --base b682bd8 --cases starts,pairs/sqlite,harness
    .venv/bin/python bench/ab.py --base b682bd8 --only-base --rounds 1 --json out.json   # A alone

One benchmark, two trees. Every case lives in this file and uses duro's public API only (``Engine``,
``workflow``, ``step``, ``Concurrency``, ``acquire_slot``/``release_slot``, ``wait_for_signal``,
``define_workspace``, ``Limit``, the engine's ``limits.list()`` and ``list_runs()``, and
``duro_harness.simulated``'s env). What differs between trees goes through the compat section below
(the one place that knows about more than one version of duro): today only the worker options, which
older trees take as ``Engine(..., poll_interval=, lease=, worker_id=)`` and newer ones as ``Engine(...,
options=WorkerOptions(...))``. ``--base`` (A) and ``--head`` (B, when given) are exported with
``git archive`` (sdk/ and harness/) into a temporary directory; without ``--head``, B is the working
tree as it is (uncommitted changes included). Each sample is a fresh process running THIS file with
one tree's sdk/ and harness/ first on ``sys.path``; it checks that ``duro`` came from that tree.

Samples. A fresh process and a fresh database per sample. SQLite: a new file in its own temporary
directory. PostgreSQL: one server per round (tests/support/pgserver.py: fsync=off,
synchronous_commit=off, full_page_writes=off), a new database per sample, dropped after it. Rounds:
within a round every selected case runs once on each tree; the case order is rotated from one round
to the next (round r starts ceil(cases / rounds) x r cases further down the list), and which tree
goes first alternates by round and by case (so each round has both orders). The table gives medians
and B / A, where B / A > 1 is always "B is better" (for the lower-is-better cases it is A / B); the
verdict flags any case below 0.9.

Timed windows: every sample measures for at least ``--window`` seconds (default 2): the operation
repeats until that much time has passed, and the figure is the count over the measured time:

- starts    a client ``Engine(url)`` (never entered), ``register_remote`` + ``await engine.start`` in
            a loop, no quota: starts/s.
- qstarts   the same, every start under ``Concurrency(key="tenant:shared", limit=10**9)`` (a quota
            every start passes, one key): starts/s.
- runs      an entered engine runs one-step workflows (one async ``@step`` returning x + 1), in
            batches: start a batch (500 on SQLite, 200 on PostgreSQL), gather its results, repeat
            until the window is over: runs/s. 20 untimed warm-up runs.
- seqruns   the same one run at a time (start, await its result): runs/s.
- pairs     one run looping ``acquire_slot`` + ``release_slot`` on a capacity-8 limit, uncontended,
            until a deadline (the window) set before it starts: pairs/s over the loop (poll 50 ms).
- pairs8    the same with 8 runs looping at once: all pairs / (last loop end - first loop start).
- queue     release-to-resume: a capacity-1 limit, a holder run, a queue of 200 one-shot waiter
            runs behind it; the holder releases and the slot goes down the queue. Rounds of that
            until the hand-offs (first release to last grant) add up to the window: the median
            release-to-acquire time (ms) over every hand-off.
- pingpong  release-to-resume between two runs alternating on a capacity-1 limit, each looping until
            the deadline: the median hand-off (ms).
- harness   SQLite only (the harness's in-memory store): ``duro_harness.simulated()``, 100 runs
            that sleep an hour 720 times, the wall time of ``await env.advance("30d")`` (72,000
            wake-ups); repeated on a fresh env until the advances add up to the window: seconds per
            30 days (the mean of the repeats).
- scale     PostgreSQL only: 2 worker processes (each this file in ``--worker`` mode: an entered
            engine with its own ``worker_id``, poll 100 ms, the one-step workflow) are warmed with
            20 runs, stopped (SIGSTOP), a client enqueues a backlog, then SIGCONT at t0; rate = the
            backlog / (the last run's ``ended_at`` - t0), read with ``engine.list_runs``. A first
            backlog of 1,000 calibrates; the measured one is sized to last 2.5 x the window at that
            rate (at least 1,000, at most 9,000): runs/s.

Progress goes to stderr, one line per sample; the table to stdout. A sample that fails is reported
(the end of its stderr) and left out; the script then exits 1 after the table.
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

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
TREE_PATHS = ["sdk", "harness"]
STORES = ("sqlite", "postgresql")

# case -> (unit, higher is better, stores)
CASES: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "starts": ("starts/s", True, STORES),
    "qstarts": ("starts/s", True, STORES),
    "runs": ("runs/s", True, STORES),
    "seqruns": ("runs/s", True, STORES),
    "pairs": ("pairs/s", True, STORES),
    "pairs8": ("pairs/s", True, STORES),
    "queue": ("ms median", False, STORES),
    "pingpong": ("ms median", False, STORES),
    "harness": ("s / 30 days", False, ("sqlite",)),
    "scale": ("runs/s", True, ("postgresql",)),
}
POLL = "50ms"
WORKER_POLL = "100ms"
WARMUP = 20
RUN_BATCH = {"sqlite": 500, "postgresql": 200}
QUEUE_DEPTH = 200
HARNESS_RUNS, HARNESS_DAYS = 100, 30
SCALE_WORKERS = 2
SCALE_CALIBRATE, SCALE_MAX = 1_000, 9_000
RESULT_TIMEOUT = "600s"
WORKFLOW = "bench.one_step"
QUOTA_LIMIT = 10**9


# -- compat: the only code that knows more than one version of duro -------------------------------


def make_engine(url: str, workspace: Any = None, **worker: Any) -> Any:
    """``Engine(url, workspace)`` with worker options (``poll_interval``, ``lease``, ``worker_id``):
    through ``duro.WorkerOptions`` when the tree exports it, else as keyword arguments
    of ``Engine`` (the trees before it)."""
    import duro

    options = getattr(duro, "WorkerOptions", None)
    if options is not None and worker:
        return duro.Engine(url, workspace, options=options(**worker))
    return duro.Engine(url, workspace, **worker)


def harness_env() -> Any:
    """The harness's ``simulated()`` context (public in every tree so far: ``duro_harness``)."""
    from duro_harness import simulated

    return simulated()


# freezegun (which the harness starts) swaps every module-level reference to the time functions; a
# reference kept inside a tuple is out of its reach, so the harness case keeps reading real time.
_REAL = (time.perf_counter,)


def wall() -> float:
    return _REAL[0]()


# -- workflows (defined in the child, on the tree's duro) -----------------------------------------

STATE: dict[str, Any] = {"deadline": 0.0}
SPANS: dict[str, tuple[float, float, int]] = {}  # tag -> (loop start, loop end, pairs)
EVENTS: list[tuple[str, float]] = []  # ("rel", t) just before release_slot, ("acq", t) just after acquire


def define_workflows() -> dict[str, Any]:
    from duro import acquire_slot, release_slot, step, wait_for_signal, workflow

    @step
    async def add_one(x: int) -> int:
        return x + 1

    @workflow(name=WORKFLOW)
    async def one_step(x: int) -> int:
        return await add_one(x)

    @workflow(name="bench.cycler")
    async def cycler(inp: dict) -> int:
        """acquire+release pairs: ``n`` of them, or until STATE's deadline (no replay happens here,
        so reading the clock in the workflow is safe); records events when asked."""
        n, events, limit = inp.get("n"), inp.get("events", False), inp.get("limit", "bench")
        begin, done = time.perf_counter(), 0
        while True:
            slot = await acquire_slot(limit, label=f"{inp['tag']}-{done}")
            if events:
                EVENTS.append(("acq", time.perf_counter()))
                EVENTS.append(("rel", time.perf_counter()))
            released = await release_slot(slot.id)
            if not released.released:
                raise AssertionError(f"release of {slot.id} returned released=False")
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
        from duro import sleep

        for _ in range(hours):
            await sleep("1h")
        return hours

    return {"one_step": one_step, "cycler": cycler, "holder": holder, "hourly": hourly}


def workspace(capacity: int) -> Any:
    from duro import Limit, define_workspace

    return define_workspace(limits={"bench": Limit(capacity=capacity, max_hold="1h")})


# -- the cases (in the child) ---------------------------------------------------------------------


async def case_starts(url: str, window: float, quota: bool) -> dict:
    from duro import Concurrency

    engine = make_engine(url)
    try:
        engine.register_remote(WORKFLOW)
        conc = Concurrency(key="tenant:shared", limit=QUOTA_LIMIT) if quota else None
        for i in range(WARMUP):  # the schema, the connection, statement caches
            await engine.start(WORKFLOW, -i, concurrency=conc)
        count, begin = 0, time.perf_counter()
        while True:
            for _ in range(50):
                await engine.start(WORKFLOW, count, concurrency=conc)
                count += 1
            elapsed = time.perf_counter() - begin
            if elapsed >= window:
                break
    finally:
        engine.close()
    return {"value": count / elapsed, "n": count, "window_s": elapsed}


async def case_runs(url: str, store: str, window: float, sequential: bool) -> dict:
    wfs = define_workflows()
    engine = make_engine(url)
    engine.register(wfs["one_step"])
    try:
        async with engine:
            for i in range(WARMUP):
                assert await (await engine.start(WORKFLOW, i)).result(timeout=RESULT_TIMEOUT) == i + 1
            count, begin = 0, time.perf_counter()
            while True:
                if sequential:
                    for _ in range(20):
                        handle = await engine.start(WORKFLOW, count)
                        assert await handle.result(timeout=RESULT_TIMEOUT) == count + 1
                        count += 1
                else:
                    batch = range(count, count + RUN_BATCH[store])
                    handles = [await engine.start(WORKFLOW, i) for i in batch]
                    results = await asyncio.gather(*(h.result(timeout=RESULT_TIMEOUT) for h in handles))
                    assert results == [i + 1 for i in batch]
                    count += len(batch)
                elapsed = time.perf_counter() - begin
                if elapsed >= window:
                    break
    finally:
        engine.close()
    return {"value": count / elapsed, "n": count, "window_s": elapsed}


async def _limit_counts(engine: Any) -> tuple[int, int, int]:
    info = next(i for i in await engine.limits.list() if i.name == "bench")
    return info.busy, info.reserved, info.waiting


async def _until(engine: Any, waiting: int, busy: int, timeout: float = 300.0) -> None:
    deadline = time.perf_counter() + timeout
    while (counts := await _limit_counts(engine)) != (busy, 0, waiting):
        if time.perf_counter() > deadline:
            raise AssertionError(
                f"limit: (busy, reserved, waiting) = {counts}, expected {busy}, 0, {waiting}"
            )
        await asyncio.sleep(0.02)


async def _limit_engine(url: str, capacity: int) -> tuple[Any, dict]:
    wfs = define_workflows()
    engine = make_engine(url, workspace(capacity), poll_interval=POLL)
    engine.register(wfs["cycler"])
    engine.register(wfs["holder"])
    return engine, wfs


async def _warm(engine: Any, wfs: dict) -> None:
    handle = await engine.start(wfs["cycler"], {"n": WARMUP, "tag": "warm"})
    assert await handle.result(timeout=RESULT_TIMEOUT) == WARMUP


async def case_pairs(url: str, window: float, runs: int) -> dict:
    SPANS.clear()
    engine, wfs = await _limit_engine(url, max(8, runs))
    try:
        async with engine:
            await _warm(engine, wfs)
            SPANS.clear()
            STATE["deadline"] = time.perf_counter() + window + 0.25  # the runs start a little later
            handles = [await engine.start(wfs["cycler"], {"tag": f"u{i}"}) for i in range(runs)]
            done = [await h.result(timeout=RESULT_TIMEOUT) for h in handles]
            assert await _limit_counts(engine) == (0, 0, 0)
    finally:
        engine.close()
    spans = [SPANS[f"u{i}"] for i in range(runs)]
    span = max(e for _, e, _ in spans) - min(b for b, _, _ in spans)
    return {"value": sum(done) / span, "n": sum(done), "window_s": span}


def _handoffs(events: list[tuple[str, float]]) -> list[float]:
    """Latencies (ms) from each release to the next acquire; capacity 1 makes them alternate."""
    out = []
    for (k1, t1), (k2, t2) in zip(events, events[1:], strict=False):
        if k1 == "rel":
            if k2 != "acq":
                raise AssertionError("two releases in a row on a capacity-1 limit")
            out.append((t2 - t1) * 1e3)
        elif k2 != "rel":
            raise AssertionError("two grants in a row on a capacity-1 limit")
    return out


def _latency(lat: list[float], window: float) -> dict:
    ordered = sorted(lat)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"value": statistics.median(lat), "p99_ms": p99, "n": len(lat), "window_s": window}


async def case_queue(url: str, window: float) -> dict:
    engine, wfs = await _limit_engine(url, 1)
    lat: list[float] = []
    measured = 0.0
    try:
        async with engine:
            await _warm(engine, wfs)
            rnd = 0
            while measured < window:
                EVENTS.clear()
                first = await engine.start(wfs["holder"], {"tag": f"h{rnd}"})
                await _until(engine, waiting=0, busy=1)
                waiters = [
                    await engine.start(wfs["cycler"], {"n": 1, "tag": f"l{rnd}-{i}", "events": True})
                    for i in range(QUEUE_DEPTH)
                ]
                await _until(engine, waiting=QUEUE_DEPTH, busy=1)
                await first.signal("go")
                assert await first.result(timeout=RESULT_TIMEOUT) is True
                assert [await w.result(timeout=RESULT_TIMEOUT) for w in waiters] == [1] * QUEUE_DEPTH
                got = _handoffs(EVENTS)
                assert len(got) == QUEUE_DEPTH, len(got)
                lat += got
                measured += EVENTS[-2][1] - EVENTS[0][1]  # the holder's release -> the last grant
                rnd += 1
    finally:
        engine.close()
    return _latency(lat, measured)


async def case_pingpong(url: str, window: float) -> dict:
    engine, wfs = await _limit_engine(url, 1)
    try:
        async with engine:
            await _warm(engine, wfs)
            EVENTS.clear()
            first = await engine.start(wfs["holder"], {"tag": "h"})
            await _until(engine, waiting=0, busy=1)
            STATE["deadline"] = math.inf
            runs = [await engine.start(wfs["cycler"], {"tag": f"p{i}", "events": True}) for i in range(2)]
            await _until(engine, waiting=2, busy=1)
            STATE["deadline"] = time.perf_counter() + window + 0.1
            await first.signal("go")
            assert await first.result(timeout=RESULT_TIMEOUT) is True
            for r in runs:
                await r.result(timeout=RESULT_TIMEOUT)
    finally:
        engine.close()
    # the first hand-offs come from the holder and go down a queue of two; keep the alternation after
    lat = _handoffs(EVENTS)[2:]
    return _latency(lat, EVENTS[-2][1] - EVENTS[0][1])


async def _harness_once() -> float:
    wfs = define_workflows()
    async with harness_env() as env:
        env.engine.register(wfs["hourly"])
        handles = [await env.start("bench.hourly", HARNESS_DAYS * 24) for _ in range(HARNESS_RUNS)]
        await env.run_until_idle()
        began = wall()
        await env.advance(f"{HARNESS_DAYS}d")
        elapsed = wall() - began
        assert [await h.status() for h in handles] == ["completed"] * HARNESS_RUNS
    return elapsed


async def case_harness(window: float) -> dict:
    repeats: list[float] = []
    while sum(repeats) < window:
        repeats.append(await _harness_once())
    return {
        "value": statistics.fmean(repeats),
        "n": len(repeats),
        "window_s": sum(repeats),
        "repeats": repeats,
    }


# scale: worker processes (this file, --worker mode) and a client in the sample's process


def worker_main(tree: str, url: str, worker_id: str) -> None:
    """A worker process: an entered engine running the one-step workflow until SIGTERM."""
    use_tree(tree)
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


async def _scale_backlog(client: Any, procs: list[subprocess.Popen], size: int) -> dict:
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
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a worker exited")
        if time.perf_counter() > deadline:
            raise RuntimeError("the backlog did not drain in time")
        await asyncio.sleep(0.05)
    if await client.list_runs(workflow=WORKFLOW, status=["failed", "cancelled"], limit=1):
        raise RuntimeError("a backlog run failed")
    done = [
        r
        for r in await client.list_runs(workflow=WORKFLOW, status="completed", limit=10_000)
        if r.created_at.timestamp() >= since
    ]
    assert len(done) == size, (len(done), size)
    last = max(r.ended_at.timestamp() for r in done)
    return {"rate": size / (last - t0), "wall_s": last - t0}


async def case_scale(tree: str, url: str, window: float) -> dict:
    client = make_engine(url)
    client.register_remote(WORKFLOW)
    procs: list[subprocess.Popen] = []
    try:
        await client.start(WORKFLOW, -1)  # the schema, before any worker
        for i in range(SCALE_WORKERS):
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--worker", tree, url, f"ab-worker-{i}"],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"worker {p.pid} did not start")
        warm = [await client.start(WORKFLOW, i) for i in range(WARMUP * SCALE_WORKERS)]
        for h in warm:
            await h.result(timeout=RESULT_TIMEOUT)
        await asyncio.sleep(0.2)  # let every worker finish its pass before it is paused
        first = await _scale_backlog(client, procs, SCALE_CALIBRATE)
        size = min(SCALE_MAX, max(SCALE_CALIBRATE, round(first["rate"] * window * 2.5)))
        await asyncio.sleep(0.2)
        got = await _scale_backlog(client, procs, size)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        client.close()
    return {"value": got["rate"], "n": size, "window_s": got["wall_s"], "calibration_rate": first["rate"]}


def use_tree(tree: str) -> None:
    sys.path[:0] = [f"{tree}/{p}" for p in TREE_PATHS]
    import duro

    if not duro.__file__ or not duro.__file__.startswith(tree.rstrip("/") + "/"):
        raise SystemExit(f"imported duro from {duro.__file__}, not from {tree}")


def one_case(tree: str, case: str, store: str, url: str, window: float) -> dict:
    """In the child process: one sample of ``case`` on ``store`` with ``tree``'s duro."""
    use_tree(tree)
    with contextlib.ExitStack() as stack:
        if store == "sqlite":
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="duro-ab-"))
            url = f"sqlite:///{tmp}/bench.db"
        if case in ("starts", "qstarts"):
            return asyncio.run(case_starts(url, window, case == "qstarts"))
        if case in ("runs", "seqruns"):
            return asyncio.run(case_runs(url, store, window, case == "seqruns"))
        if case in ("pairs", "pairs8"):
            return asyncio.run(case_pairs(url, window, 1 if case == "pairs" else 8))
        if case == "queue":
            return asyncio.run(case_queue(url, window))
        if case == "pingpong":
            return asyncio.run(case_pingpong(url, window))
        if case == "harness":
            return asyncio.run(case_harness(window))
        if case == "scale":
            return asyncio.run(case_scale(tree, url, window))
    raise ValueError(case)


# -- the parent -----------------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


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


def round_order(cases: list[tuple[str, str]], rnd: int, rounds: int) -> list[tuple[str, str]]:
    """Round ``rnd``'s case order: the list rotated by ceil(len / rounds) x rnd."""
    if not cases:
        return cases
    shift = (math.ceil(len(cases) / max(1, rounds)) * rnd) % len(cases)
    return cases[shift:] + cases[:shift]


def run_sample(
    tree: str, case: str, store: str, url: str, window: float, timeout: float
) -> tuple[dict | None, str]:
    cmd = [sys.executable, __file__, "--child", tree, case, store, url, str(window)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
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


def _fmt(unit: str, value: float | None) -> str:
    if value is None:
        return "-"
    if unit.startswith("s "):
        return f"{value:.3f}"
    if unit.startswith("ms"):
        return f"{value:.2f}"
    return f"{value:,.0f}"


def summarize(samples: dict, cases: list[tuple[str, str]]) -> list[dict]:
    rows = []
    for case, store in cases:
        unit, higher, _ = CASES[case]
        got = samples[f"{case}/{store}"]
        a = statistics.median(v["value"] for v in got["A"]) if got["A"] else None
        b = statistics.median(v["value"] for v in got["B"]) if got["B"] else None
        ratio = (b / a if higher else a / b) if a and b else None
        rows.append(
            {
                "case": case,
                "store": store,
                "unit": unit,
                "higher_is_better": higher,
                "A": a,
                "B": b,
                "B_over_A": ratio,
                "verdict": None if ratio is None else ("ok" if ratio >= 0.9 else "BELOW 0.9"),
                "window_s": statistics.median(v["window_s"] for v in got["A"] + got["B"]),
            }
        )
    return rows


def table(rows: list[dict], samples: dict, label_a: str, label_b: str | None) -> str:
    if label_b is None:
        lines = [
            f"| case | store | unit | better | {label_a} | window s | samples |",
            "| --- | --- | --- | --- | ---: | ---: | --- |",
        ]
    else:
        lines = [
            f"| case | store | unit | better | {label_a} | {label_b} | B / A | verdict | window s "
            "| samples A | samples B |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | --- | --- |",
        ]
    for row in rows:
        got = samples[f"{row['case']}/{row['store']}"]
        unit = row["unit"]
        each = {k: " ".join(_fmt(unit, v["value"]) for v in got[k]) for k in ("A", "B")}
        head = (
            f"| {row['case']} | {row['store']} | {unit} | {'higher' if row['higher_is_better'] else 'lower'} "
            f"| {_fmt(unit, row['A'])} |"
        )
        if label_b is None:
            lines.append(f"{head} {row['window_s']:.1f} | {each['A']} |")
        else:
            ratio = f"{row['B_over_A']:.2f}" if row["B_over_A"] is not None else "-"
            lines.append(
                f"{head} {_fmt(unit, row['B'])} | {ratio} | {row['verdict'] or '-'} | {row['window_s']:.1f} "
                f"| {each['A']} | {each['B']} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="A: the commit to compare with (required)")
    parser.add_argument("--head", help="B: a commit, exported like --base, or 'checkout' (the default)")
    parser.add_argument("--only-base", action="store_true", help="measure A alone (a record of A's figures)")
    parser.add_argument("--rounds", type=int, default=3, help="samples per case and tree (default 3)")
    parser.add_argument(
        "--cases", help=f"comma list of cases or case/store (default all: {', '.join(CASES)})"
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--window", type=float, default=2.0, help="seconds each sample measures at least (2)")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per sample (default 600)")
    parser.add_argument(
        "--child", nargs=5, metavar=("TREE", "CASE", "STORE", "URL", "WINDOW"), help=argparse.SUPPRESS
    )
    parser.add_argument("--worker", nargs=3, metavar=("TREE", "URL", "ID"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(*args.worker)
        return 0
    if args.child:
        tree, case, store, url, window = args.child
        print(json.dumps(one_case(tree, case, store, url, float(window))))
        return 0
    if not args.base:
        parser.error("--base is required")
    cases = select(args.cases, not args.no_postgres)
    if not cases:
        raise SystemExit("no case selected")
    base = _git("rev-parse", "--short", args.base)
    head = None if args.head in (None, "checkout") else _git("rev-parse", "--short", args.head)
    checkout = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--", *TREE_PATHS)) if head is None else False
    label_a = base
    label_b = None if args.only_base else head or f"checkout {checkout}" + (" + changes" if dirty else "")
    names = ["A"] if args.only_base else ["A", "B"]
    samples: dict[str, dict[str, list[dict]]] = {f"{c}/{s}": {"A": [], "B": []} for c, s in cases}
    failures: dict[str, str] = {}
    pg_needed = any(s == "postgresql" for _, s in cases)
    began = time.perf_counter()
    total = len(cases) * len(names) * args.rounds
    done = 0
    with tempfile.TemporaryDirectory(prefix="duro-ab-") as tmp:
        sys.path[:0] = [str(BENCH), str(ROOT)]
        import _support

        from tests.support.pgserver import start_server

        trees = {}
        for name, commit in (("A", base), ("B", head)):
            if name not in names:
                continue
            if commit is None:
                trees[name] = str(ROOT)
                continue
            dest = Path(tmp) / name
            dest.mkdir()
            _support.export_tree(commit, TREE_PATHS, dest)
            trees[name] = str(dest)
        print(
            f"A = {label_a} ({trees['A']})"
            + (f", B = {label_b} ({trees['B']})" if label_b else "")
            + f"; {len(cases)} cases x {len(names)} trees x {args.rounds} rounds, windows >= {args.window} s",
            file=sys.stderr,
            flush=True,
        )
        for rnd in range(args.rounds):
            pg = start_server() if pg_needed else None
            try:
                for index, (case, store) in enumerate(round_order(cases, rnd, args.rounds)):
                    order = names if (rnd + index) % 2 == 0 else names[::-1]
                    for name in order:
                        key = f"{case}/{store}"
                        dbname = pg.create_database() if store == "postgresql" else None
                        try:
                            url = pg.url(dbname) if dbname else "-"
                            value, err = run_sample(trees[name], case, store, url, args.window, args.timeout)
                        finally:
                            if dbname:
                                pg.drop_database(dbname)
                        done += 1
                        clock = f"[{done}/{total} {time.perf_counter() - began:5.0f}s]"
                        if value is None:
                            failures.setdefault(f"{key} {name}", err)
                            print(
                                f"{clock} round {rnd + 1} {key:20s} {name}: FAILED\n{err}",
                                file=sys.stderr,
                                flush=True,
                            )
                            continue
                        samples[key][name].append(value)
                        unit = CASES[case][0]
                        print(
                            f"{clock} round {rnd + 1} {key:20s} {name}: {_fmt(unit, value['value'])} {unit} "
                            f"(n {value['n']}, {value['window_s']:.1f} s)",
                            file=sys.stderr,
                            flush=True,
                        )
            finally:
                if pg is not None:
                    pg.stop()
    wall_s = time.perf_counter() - began
    rows = summarize(samples, cases)
    what = f"A = {label_a}" + (f", B = {label_b}" if label_b else " alone")
    print(
        f"\n{what}; medians of {args.rounds} round{'s' if args.rounds != 1 else ''}, interleaved; {wall_s:.0f} s wall\n"
    )
    print(table(rows, samples, label_a, label_b))
    below = [f"{r['case']}/{r['store']}" for r in rows if r["verdict"] == "BELOW 0.9"]
    if below:
        print(f"\nbelow 0.9x: {', '.join(below)}")
    if failures:
        print(f"\nfailed: {', '.join(failures)} (the first error of each above, on stderr)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "A": base,
                    "B": None if args.only_base else head or checkout,
                    "B_is_working_tree": not args.only_base and head is None,
                    "B_dirty": dirty,
                    "rounds": args.rounds,
                    "window_s": args.window,
                    "wall_seconds": wall_s,
                    "poll_interval": POLL,
                    "summary": rows,
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
