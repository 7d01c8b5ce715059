"""Limits (slots): acquire+release throughput, hand-off latency and flatness, SQLite and PostgreSQL.

Run it from the repo root:

    .venv/bin/python bench/limits.py                        # defaults, about 4 minutes
    .venv/bin/python bench/limits.py --json /tmp/duro-limits.json
    .venv/bin/python bench/limits.py --no-postgres          # SQLite only
    .venv/bin/python bench/limits.py --profile uncontended  # one case under cProfile (top 20 tottime)
    .venv/bin/python bench/limits.py --profile sql          # time inside sqlite3 per pair, by statement
    .venv/bin/python bench/limits.py --no-postgres --no-prefect --window 0.5 --repeats 1 --pairs 100 \
        --waiters 50 --handoffs 50 --floor-pairs 500 --flat-pairs 100 --sizes 10,100   # a smoke run

Every workflow case runs in this one process, on an entered ``Engine(url, workspace=..., options=WorkerOptions(poll_interval=...))`` over a fresh database (a new SQLite file in its own temporary directory, or a
new PostgreSQL database on one server started for the run with tests/support/pgserver.py, which runs
with fsync=off, synchronous_commit=off, full_page_writes=off). Timestamps are ``time.perf_counter``
read inside the workflow code and kept in module-level lists (no replay happens: no crash, no
restart). Every acquire and release is a durable call recorded in the store.

Cases (see the method note in BENCHMARKS.md, section "Limits: slots"):

1. uncontended  limit "bench" (capacity 8); one run looping ``slot = await acquire_slot("bench",
                label=...); await release_slot(slot.id)`` (at least --pairs times, see the windows
                below), and 8 runs each looping (at least --pairs/8 times). pairs/s = pairs / (last
                loop end - first loop start).
2. queue        capacity 8, 8 holder runs take every slot and wait for a signal; 1,000 cycler runs
                queue behind them (the queue is checked to hold exactly 1,000); then the holders
                release. Each cycler loops acquire/release (at least --queue-rounds times), so every
                release hands the slot to the queue's head and the releasing run re-queues at the
                tail: the queue stays at about 1,000 for all grants but the last 1,000. pairs/s =
                those grants / (their last grant - the first grant). The final round (queue draining
                1,000 -> 0) is reported apart.
3. latency      capacity 1; time from just before a holder's ``release_slot`` to just after the next
                run's ``acquire_slot`` returns, in one process. (a) a queue of --handoffs one-shot
                waiter runs behind a holder (depth --handoffs -> 0), in rounds; (b) two runs
                alternating on the slot (depth 1; the releasing run's re-request is inside the
                measured time).
4. flatness     one run's uncontended pairs on "bench" while K requests wait in the queue of another
                limit, "crowd" (capacity 1, held for the whole case). The crowd is inserted through
                the store API before the engine is entered (``store.apply(RequestSlot(config, id, None,
                None, None, now)``, one transaction each, timed), one fresh database per K.
5. floors       bare driver: sqlite3 (WAL, synchronous=NORMAL, autocommit connection) ``BEGIN
                IMMEDIATE; UPDATE counter SET busy = busy + 1; COMMIT`` then the same with -1, per
                pair; psycopg 3 the same two UPDATE+commit transactions. And the slot-row floor: a
                pair inserts a slot row (text id) and deletes it, two transactions (the least a slot
                that has an id writes; on this machine it lands on the issue's 27k anchor).

Peer, measured in the same run: Prefect 3's global concurrency limit, in Prefect's own virtual
environment (bench/.venvs/prefect, made by ``make bench-peers``), one subprocess per round and
per case (bench/peers/prefect_pairs.py: its temporary local API server under a fresh PREFECT_HOME, a
limit of 8 slots, ``async with concurrency("bench", occupy=1)`` looping in 1 task, then in 8, for
--prefect-window seconds). Without that environment the script says "Prefect skipped: run make
bench-peers" and the Prefect columns stay empty. Anchor (not measured here): bare sqlite3 about 27k
pairs/s (the issue). Targets: at least 100x Prefect's pairs/s in the same mode (1 run against 1
task, 8 runs against 8 tasks) and at least 20% of the sqlite3 floor measured in the same run;
release-to-resume median under 2 ms; flatness max/min within 2x.

Timed windows: every timed measurement lasts at least ``--window`` seconds (default 2;
``--window 0`` gives a count-sized sample). How each case reads its count option:

- floors        --floor-pairs is a BATCH: batches until the window has passed (the slot-row floor's
                ids are made before each batch, outside its timed loops); pairs / measured time.
- uncontended   --pairs is a MINIMUM: each run loops at least its share of it and on until
                ``window`` seconds after its own loop began (checked after each release).
- queue         --queue-rounds is a MINIMUM per waiting run: every run re-queues until ``window``
                seconds after the first grant (one deadline for all), so the queue stays at about
                --waiters for the window; the last --waiters grants are the drain (so the steady
                part ends about --queue-capacity grants before the deadline: a few ms short of it).
- latency       (a) --handoffs is the queue's depth per ROUND: rounds (a holder, --handoffs waiters)
                until the rounds' hand-offs (the holder's release to the last grant) add up to the
                window; (b) --handoffs is a MINIMUM: both runs alternate until ``window`` seconds
                after the holder's signal (one deadline; each stops at its first release past it).
- flatness      --flat-pairs is a MINIMUM per sample: the one run loops on for the window.
- Prefect       --prefect-window seconds, which defaults to --window.

Each sample keeps its measured count (``pairs``, ``n``) and, where new, ``batch``, ``min_pairs``,
``rounds``, ``measured_s``, ``pairs_done`` beside the existing keys.

Order: round r runs the stores in turn (reversed on odd rounds) and the cases rotated by r, so no
case always follows the same one. The flatness samples are not in the rounds: each K's samples run
back to back on one database, filled once (100,000 requests take the longest to insert).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import _support
from _support import scratch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import duro  # noqa: E402
from duro import (  # noqa: E402
    Engine,
    Limit,
    WorkerOptions,
    acquire_slot,
    define_workspace,
    release_slot,
    wait_for_signal,
    workflow,
)
from duro.store import RequestSlot  # noqa: E402

PREFECT_PYTHON = REPO / "bench" / ".venvs" / "prefect" / "bin" / "python"
PREFECT_SCRIPT = REPO / "bench" / "peers" / "prefect_pairs.py"
PREFECT_SKIP = f"Prefect skipped: run make bench-peers (no {PREFECT_PYTHON.relative_to(REPO)})"
SQLITE_ANCHOR = 27_000  # pairs/s, bare sqlite3 (the figure)
TARGET_X_PREFECT = 100  # duro's pairs/s over Prefect's, same mode, same run
TARGET_FLOOR_SHARE = 0.20
TARGET_LATENCY_MS = 2.0
TARGET_FLAT = 2.0
WARMUP_PAIRS = 20
RESULT_TIMEOUT = "600s"

# -- workflows (timestamps go to module-level lists: bench code may read the wall clock) -----------

SPANS: dict[str, tuple[float, float]] = {}  # tag -> (loop start, loop end)
STATE: dict[str, float] = {"deadline": 0.0}  # the shared deadline of runs started with "shared": True
GRANTS: list[float] = []  # perf_counter just after acquire_slot returns (cases that record)
EVENTS: list[tuple[str, float]] = []  # ("rel", t) just before release_slot, ("acq", t) just after acquire


@workflow
async def cycler(inp: dict) -> int:
    """Loop acquire+release pairs on ``limit``: at least ``n``, and then on until a deadline, checked
    after each release: ``window`` seconds after the loop began, or, with ``shared``, STATE's deadline
    (set by the case, or by the case's first grant with ``window_after_first_grant``; read each time). Records what the case asks for; returns the pairs done. No
    replay happens in these cases (no crash, no restart), so reading the clock here is safe."""
    limit, n, record, events = (
        inp.get("limit", "bench"),
        inp["n"],
        inp.get("record", False),
        inp.get("events", False),
    )
    window, shared = inp.get("window"), inp.get("shared", False)
    begin = time.perf_counter()
    own = begin + window if window is not None else None
    done = 0
    while True:
        slot = await acquire_slot(limit, label=f"{inp['tag']}-{done}")
        if record:
            GRANTS.append(time.perf_counter())
            if shared and len(GRANTS) == 1 and "window_after_first_grant" in inp:
                STATE["deadline"] = GRANTS[0] + inp["window_after_first_grant"]
        if events:
            EVENTS.append(("acq", time.perf_counter()))
            EVENTS.append(("rel", time.perf_counter()))
        released = await release_slot(slot.id)
        if not released.released:
            raise AssertionError(f"release of {slot.id} returned released=False")
        done += 1
        if done >= n:
            deadline = STATE["deadline"] if shared else own
            if deadline is None or time.perf_counter() >= deadline:
                break
    SPANS[inp["tag"]] = (begin, time.perf_counter())
    return done


@workflow
async def holder(inp: dict) -> bool:
    """Take a slot, wait for "go", release it (recording the release instant when asked)."""
    slot = await acquire_slot(inp.get("limit", "bench"), label=inp["tag"])
    await wait_for_signal("go")
    if inp.get("events"):
        EVENTS.append(("rel", time.perf_counter()))
    return (await release_slot(slot.id)).released


def workspace(bench_capacity: int) -> Any:
    return define_workspace(
        limits={
            "bench": Limit(capacity=bench_capacity, max_hold="1h"),
            "crowd": Limit(capacity=1, max_hold="1h"),
        }
    )


# -- stores ----------------------------------------------------------------------------------------


class Stores(_support.Stores):
    prefix = "limits"


async def _limit_counts(engine: Engine, name: str) -> tuple[int, int, int]:
    info = next(i for i in await engine.limits.list() if i.name == name)
    return info.busy, info.reserved, info.waiting


async def _until(engine: Engine, name: str, waiting: int, busy: int, timeout: float = 300.0) -> None:
    """Wait until the limit shows ``waiting`` queued and ``busy`` held slots (reads every 20 ms)."""
    deadline = time.perf_counter() + timeout
    while True:
        b, r, w = await _limit_counts(engine, name)
        if (b, r, w) == (busy, 0, waiting):
            return
        if time.perf_counter() > deadline:
            raise AssertionError(
                f"limit {name!r}: busy={b} reserved={r} waiting={w}, "
                f"expected busy={busy} waiting={waiting} within {timeout:.0f} s"
            )
        await asyncio.sleep(0.02)


async def _check_idle(engine: Engine, name: str = "bench") -> None:
    counts = await _limit_counts(engine, name)
    if counts != (0, 0, 0):
        raise AssertionError(f"limit {name!r} not idle after the case: busy, reserved, waiting = {counts}")


async def _warm(engine: Engine) -> None:
    handle = await engine.start(cycler, {"n": WARMUP_PAIRS, "tag": "warm"})
    assert await handle.result(timeout=RESULT_TIMEOUT) == WARMUP_PAIRS
    SPANS.pop("warm", None)


# -- cases -----------------------------------------------------------------------------------------


async def case_uncontended(url: str, poll: str, runs: int, pairs: int, window: float = 0.0) -> dict:
    """``runs`` runs, each looping at least its share of ``pairs`` and for ``window`` seconds."""
    SPANS.clear()
    async with Engine(
        url, workspace=workspace(max(8, runs)), options=WorkerOptions(poll_interval=poll)
    ) as engine:
        engine.register(cycler)
        engine.register(holder)
        await _warm(engine)
        split = [pairs // runs + (1 if i < pairs % runs else 0) for i in range(runs)]
        handles = [
            await engine.start(cycler, {"n": split[i], "tag": f"u{i}", "window": window}) for i in range(runs)
        ]
        done = [await h.result(timeout=RESULT_TIMEOUT) for h in handles]
        assert all(d >= s for d, s in zip(done, split, strict=True)), (done, split)
        await _check_idle(engine)
    spans = [SPANS[f"u{i}"] for i in range(runs)]
    wall = max(e for _, e in spans) - min(b for b, _ in spans)
    return {"rate": sum(done) / wall, "wall": wall, "pairs": sum(done), "runs": runs, "min_pairs": pairs}


async def case_queue(
    url: str, poll: str, capacity: int, waiters: int, rounds: int, window: float = 0.0
) -> dict:
    """Each cycler loops at least ``rounds`` pairs and until ``window`` seconds after the case's first
    grant (a shared deadline): the queue stays full until then, and the last ``waiters`` grants are
    the drain (exactly so with a window of 0: waiters x rounds grants, as before)."""
    GRANTS.clear()
    async with Engine(
        url, workspace=workspace(capacity), options=WorkerOptions(poll_interval=poll)
    ) as engine:
        engine.register(cycler)
        engine.register(holder)
        await _warm(engine)
        holders = [await engine.start(holder, {"tag": f"h{i}"}) for i in range(capacity)]
        await _until(engine, "bench", waiting=0, busy=capacity)
        setup = time.perf_counter()
        STATE["deadline"] = float("inf")
        cyclers = [
            await engine.start(
                cycler,
                {
                    "n": rounds,
                    "tag": f"q{i}",
                    "record": True,
                    "shared": True,
                    "window_after_first_grant": window,
                },
            )
            for i in range(waiters)
        ]
        await _until(engine, "bench", waiting=waiters, busy=capacity)
        setup = time.perf_counter() - setup
        go = time.perf_counter()
        for h in holders:
            await h.signal("go")
        assert all([await h.result(timeout=RESULT_TIMEOUT) for h in holders])
        done = [await c.result(timeout=RESULT_TIMEOUT) for c in cyclers]
        assert min(done) >= rounds, min(done)
        await _check_idle(engine)
    grants = list(GRANTS)
    assert len(grants) == sum(done), (len(grants), sum(done))
    steady = len(grants) - waiters
    wall = grants[steady - 1] - grants[0]
    drain = grants[-1] - grants[steady - 1]
    return {
        "rate": (steady - 1) / wall,
        "wall": wall,
        "grants": steady,
        "drain_rate": waiters / drain,
        "drain_wall": drain,
        "first_grant_after_go_ms": (grants[0] - go) * 1e3,
        "setup_seconds": setup,
        "capacity": capacity,
        "waiters": waiters,
        "rounds": rounds,
        "pairs_per_run_max": max(done),
    }


def _handoffs(events: list[tuple[str, float]]) -> list[float]:
    """Latencies (ms) from each release to the next acquire; capacity 1 makes them alternate."""
    out = []
    for (k1, t1), (k2, t2) in zip(events, events[1:], strict=False):
        if k1 == "rel":
            if k2 != "acq":
                raise AssertionError("two releases in a row on a capacity-1 limit")
            out.append((t2 - t1) * 1e3)
        elif k2 != "rel":
            raise AssertionError("two grants in a row on a capacity-1 limit: a slot was granted twice")
    return out


async def case_latency_queue(
    url: str, poll: str, handoffs: int, window: float = 0.0, max_resident_runs: int = 10_000
) -> dict:
    """Rounds of (a holder, a queue of ``handoffs`` one-shot waiters behind it, the holder releases)
    until the rounds' hand-off time (the holder's release to the last grant) adds up to ``window``.
    ``max_resident_runs=0``: every waiter leaves memory while it queues (bench/handover.py)."""
    lat: list[float] = []
    measured, rnd = 0.0, 0
    options = WorkerOptions(poll_interval=poll, max_resident_runs=max_resident_runs)
    async with Engine(url, workspace=workspace(1), options=options) as engine:
        engine.register(cycler)
        engine.register(holder)
        await _warm(engine)
        while rnd == 0 or measured < window:
            EVENTS.clear()
            first = await engine.start(holder, {"tag": f"h{rnd}", "events": True})
            await _until(engine, "bench", waiting=0, busy=1)
            runs = [
                await engine.start(cycler, {"n": 1, "tag": f"l{rnd}-{i}", "events": True})
                for i in range(handoffs)
            ]
            await _until(engine, "bench", waiting=handoffs, busy=1)
            await first.signal("go")
            assert await first.result(timeout=RESULT_TIMEOUT) is True
            assert [await r.result(timeout=RESULT_TIMEOUT) for r in runs] == [1] * handoffs
            await _check_idle(engine)
            got = _handoffs(EVENTS)
            assert len(got) == handoffs, len(got)
            lat += got
            measured += EVENTS[-2][1] - EVENTS[0][1]  # the holder's release -> the last grant
            rnd += 1
    return {**_latency_summary(lat), "rounds": rnd, "measured_s": measured}


async def case_latency_pingpong(url: str, poll: str, handoffs: int, window: float = 0.0) -> dict:
    """Two runs alternating, each at least (``handoffs`` + 1) // 2 pairs, until a shared deadline
    ``window`` seconds after the holder's signal: both stop at their first release past it."""
    EVENTS.clear()
    async with Engine(url, workspace=workspace(1), options=WorkerOptions(poll_interval=poll)) as engine:
        engine.register(cycler)
        engine.register(holder)
        await _warm(engine)
        first = await engine.start(holder, {"tag": "h", "events": True})
        await _until(engine, "bench", waiting=0, busy=1)
        loops = (handoffs + 1) // 2
        STATE["deadline"] = float("inf")
        runs = [
            await engine.start(cycler, {"n": loops, "tag": f"p{i}", "events": True, "shared": True})
            for i in range(2)
        ]
        await _until(engine, "bench", waiting=2, busy=1)
        STATE["deadline"] = time.perf_counter() + window
        await first.signal("go")
        assert await first.result(timeout=RESULT_TIMEOUT) is True
        done = [await r.result(timeout=RESULT_TIMEOUT) for r in runs]
        assert min(done) >= loops, done
        await _check_idle(engine)
    # the first hand-offs come from the holder and go down a queue of two; keep the alternation after it
    lat = _handoffs(EVENTS)[2:]
    return {**_latency_summary(lat), "measured_s": EVENTS[-2][1] - EVENTS[0][1]}


def _latency_summary(lat: list[float]) -> dict:
    ordered = sorted(lat)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "median_ms": statistics.median(lat),
        "p99_ms": p99,
        "max_ms": ordered[-1],
        "n": len(lat),
        "mean_ms": statistics.fmean(lat),
    }


def _fill_crowd(engine: Engine, size: int, chunk: int = 1000) -> dict:
    """The crowd: one request takes "crowd"'s only slot, then ``size`` requests wait behind it, each
    one ``RequestSlot`` transaction (run id None), timed per chunk."""
    store = engine.store
    config = engine.limit_config("crowd")
    now = engine.clock.now_ms()
    assert store.apply(RequestSlot(config, "crowd.holder", None, None, None, now)).row.state == "busy"
    chunks = []
    begin = time.perf_counter()
    for start in range(0, size, chunk):
        t = time.perf_counter()
        for i in range(start, min(size, start + chunk)):
            store.apply(RequestSlot(config, f"crowd.{i}", None, None, None, now))
        chunks.append((min(size, start + chunk) - start) / (time.perf_counter() - t))
    wall = time.perf_counter() - begin
    return {
        "seconds": wall,
        "rate": size / wall if size else None,
        "first_chunk_rate": chunks[0] if chunks else None,
        "last_chunk_rate": chunks[-1] if chunks else None,
    }


async def case_flat(url: str, poll: str, size: int, pairs: int, repeats: int, window: float = 0.0) -> dict:
    """``repeats`` samples, each one run looping at least ``pairs`` pairs and for ``window`` seconds."""
    SPANS.clear()
    engine = Engine(url, workspace=workspace(8), options=WorkerOptions(poll_interval=poll))
    engine.store.create_schema()
    fill = _fill_crowd(engine, size)
    engine.close()
    samples = []
    async with Engine(url, workspace=workspace(8), options=WorkerOptions(poll_interval=poll)) as engine:
        engine.register(cycler)
        engine.register(holder)
        assert await _limit_counts(engine, "crowd") == (1, 0, size)
        await _warm(engine)
        done = []
        for r in range(repeats):
            handle = await engine.start(cycler, {"n": pairs, "tag": f"f{r}", "window": window})
            done.append(await handle.result(timeout=RESULT_TIMEOUT))
            assert done[-1] >= pairs, done
            begin, end = SPANS.pop(f"f{r}")
            samples.append((end - begin) / done[-1] * 1e6)
        await _check_idle(engine)
        assert await _limit_counts(engine, "crowd") == (1, 0, size)
    return {
        "us_per_pair": samples,
        "median_us": statistics.median(samples),
        "fill": fill,
        "size": size,
        "pairs": pairs,
        "pairs_done": done,
    }


def floor_sqlite(path: str, pairs: int, window: float = 0.0) -> dict:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("CREATE TABLE counter (name TEXT PRIMARY KEY, busy INTEGER NOT NULL)")
        conn.execute("INSERT INTO counter VALUES ('bench', 0)")
        up, down = (
            "UPDATE counter SET busy = busy + 1 WHERE name = 'bench'",
            "UPDATE counter SET busy = busy - 1 WHERE name = 'bench'",
        )
        done, begin = 0, time.perf_counter()
        while True:
            for _ in range(pairs):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(up)
                conn.execute("COMMIT")
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(down)
                conn.execute("COMMIT")
            done += pairs
            wall = time.perf_counter() - begin
            if wall >= window:
                break
        assert conn.execute("SELECT busy FROM counter").fetchone()[0] == 0
        pragmas = (
            conn.execute("PRAGMA journal_mode").fetchone()[0],
            conn.execute("PRAGMA synchronous").fetchone()[0],
        )
    finally:
        conn.close()
    return {"rate": done / wall, "wall": wall, "pairs": done, "pragmas": pragmas, "batch": pairs}


ROWS_TABLE = "CREATE TABLE slots (id TEXT PRIMARY KEY, limit_name TEXT NOT NULL, state TEXT NOT NULL)"


def floor_rows_sqlite(path: str, pairs: int, window: float = 0.0) -> dict:
    """The slot-row floor: a pair takes a slot as a row of its own and gives it back by deleting it
    (``BEGIN IMMEDIATE; INSERT; COMMIT`` then ``BEGIN IMMEDIATE; DELETE; COMMIT``), the least a slot
    that can be named (and released from elsewhere) writes."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute(ROWS_TABLE)
        done, wall = 0, 0.0
        while True:
            ids = [uuid.uuid4().hex for _ in range(pairs)]  # untimed, as before
            begin = time.perf_counter()
            for slot_id in ids:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO slots VALUES (?, 'bench', 'busy')", (slot_id,))
                conn.execute("COMMIT")
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("DELETE FROM slots WHERE id = ?", (slot_id,))
                conn.execute("COMMIT")
            wall += time.perf_counter() - begin
            done += pairs
            if wall >= window:
                break
        assert conn.execute("SELECT count(*) FROM slots").fetchone()[0] == 0
    finally:
        conn.close()
    return {"rate": done / wall, "wall": wall, "pairs": done, "batch": pairs}


def floor_rows_pg(dsn: str, pairs: int, window: float = 0.0) -> dict:
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute(ROWS_TABLE)
        conn.commit()
        done, wall = 0, 0.0
        while True:
            ids = [uuid.uuid4().hex for _ in range(pairs)]  # untimed, as before
            begin = time.perf_counter()
            for slot_id in ids:
                conn.execute("INSERT INTO slots VALUES (%s, 'bench', 'busy')", (slot_id,))
                conn.commit()
                conn.execute("DELETE FROM slots WHERE id = %s", (slot_id,))
                conn.commit()
            wall += time.perf_counter() - begin
            done += pairs
            if wall >= window:
                break
        assert conn.execute("SELECT count(*) FROM slots").fetchone()[0] == 0
    return {"rate": done / wall, "wall": wall, "pairs": done, "batch": pairs}


def floor_pg(dsn: str, pairs: int, window: float = 0.0) -> dict:
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE counter (name TEXT PRIMARY KEY, busy INTEGER NOT NULL)")
        conn.execute("INSERT INTO counter VALUES ('bench', 0)")
        conn.commit()
        up, down = (
            "UPDATE counter SET busy = busy + 1 WHERE name = 'bench'",
            "UPDATE counter SET busy = busy - 1 WHERE name = 'bench'",
        )
        done, begin = 0, time.perf_counter()
        while True:
            for _ in range(pairs):
                conn.execute(up)
                conn.commit()
                conn.execute(down)
                conn.commit()
            done += pairs
            wall = time.perf_counter() - begin
            if wall >= window:
                break
        assert conn.execute("SELECT busy FROM counter").fetchone()[0] == 0
    return {"rate": done / wall, "wall": wall, "pairs": done, "batch": pairs}


# -- running ---------------------------------------------------------------------------------------


def prefect_pairs(counts: list[int], window: float) -> dict:
    """Prefect's acquire+release pairs in its own venv (bench/peers/prefect_pairs.py), one subprocess
    (one temporary Prefect server) for every task count: {count: figures}."""
    proc = subprocess.run(
        [
            str(PREFECT_PYTHON),
            str(PREFECT_SCRIPT),
            "--runs",
            ",".join(map(str, counts)),
            "--window",
            str(window),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PREFECT_"))},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"Prefect's case failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return {int(k): {"rate": v["value"], **v} for k, v in json.loads(lines[-1]).items()}


def run_case(stores: Stores, store: str, case: str, args: argparse.Namespace) -> dict:
    window = args.window
    with stores.database(store) as db:
        if case == "floor":
            n = args.floor_pairs
            return (
                floor_sqlite(db["path"], n, window) if store == "sqlite" else floor_pg(db["dsn"], n, window)
            )
        if case == "floor-rows":
            n = args.floor_pairs
            if store == "sqlite":
                return floor_rows_sqlite(db["path"], n, window)
            return floor_rows_pg(db["dsn"], n, window)
        if case == "uncontended-1":
            return asyncio.run(case_uncontended(db["url"], args.poll_interval, 1, args.pairs, window))
        if case == "uncontended-8":
            return asyncio.run(case_uncontended(db["url"], args.poll_interval, 8, args.pairs, window))
        if case in ("queue", "queue-poll-ref"):
            # queue-poll-ref: the same case with another poll interval (reference, SQLite only)
            poll = args.poll_interval if case == "queue" else args.queue_poll_ref
            return asyncio.run(
                case_queue(db["url"], poll, args.queue_capacity, args.waiters, args.queue_rounds, window)
            )
        if case == "latency-queue":
            return asyncio.run(case_latency_queue(db["url"], args.poll_interval, args.handoffs, window))
        if case == "latency-pingpong":
            return asyncio.run(case_latency_pingpong(db["url"], args.poll_interval, args.handoffs, window))
        raise ValueError(case)


CASES = (
    "floor",
    "floor-rows",
    "uncontended-1",
    "uncontended-8",
    "queue",
    "queue-poll-ref",
    "latency-queue",
    "latency-pingpong",
)


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 10 else f"{x:.2f}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def report(
    results: dict, flat: dict, stores_: list[str], args: argparse.Namespace, prefect: dict
) -> tuple[str, list[dict]]:
    out: list[str] = []
    rows: list[dict] = []
    peer = {case: statistics.median(s["rate"] for s in got) for case, got in prefect.items() if got}

    def med(store: str, case: str, key: str = "rate") -> float:
        return statistics.median(s[key] for s in results[(store, case)])

    out.append("Throughput (pairs/s, medians):\n")
    out.append(
        "| store | case | pairs/s | samples | share of the counter floor | share of the slot-row floor "
        "| Prefect, same mode, same run | x Prefect | >= 100x Prefect | >= 20% counter floor "
        "| >= 20% slot-row floor |"
    )
    out.append("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- | --- |")
    labels = {
        "uncontended-1": "uncontended, 1 run",
        "uncontended-8": "uncontended, 8 runs",
        "queue": f"{args.waiters:,} waiters, capacity {args.queue_capacity} (steady)",
    }
    for store in stores_:
        floor, rows_floor = med(store, "floor"), med(store, "floor-rows")
        for case, label in (
            ("floor", "floor: a counter row, 2 tx per pair"),
            ("floor-rows", "floor: a slot row inserted, then deleted, 2 tx per pair"),
        ):
            out.append(
                f"| {store} | {label} | {_fmt(med(store, case))} | "
                f"{' '.join(_fmt(s['rate']) for s in results[(store, case)])} | | | | | | | |"
            )
        for case, label in labels.items():
            rate = med(store, case)
            share, rows_share = rate / floor, rate / rows_floor
            theirs = peer.get(case)
            row = {
                "store": store,
                "case": case,
                "pairs_per_s": rate,
                "floor": floor,
                "share_of_floor": share,
                "rows_floor": rows_floor,
                "share_of_rows_floor": rows_share,
                "prefect_pairs_per_s": theirs,
                "x_prefect": rate / theirs if theirs else None,
                "target_pairs_met": rate >= TARGET_X_PREFECT * theirs if theirs else None,
                "target_floor_met": share >= TARGET_FLOOR_SHARE,
                "target_rows_floor_met": rows_share >= TARGET_FLOOR_SHARE,
            }
            rows.append(row)
            out.append(
                f"| {store} | {label} | **{_fmt(rate)}** | "
                f"{' '.join(_fmt(s['rate']) for s in results[(store, case)])} | {share:.1%} | "
                f"{rows_share:.1%} | {_fmt(theirs) if theirs else '-'} | "
                f"{format(row['x_prefect'], ',.0f') + 'x' if theirs else '-'} | "
                f"{_verdict(row['target_pairs_met']) if theirs else 'no peer'} | "
                f"{_verdict(row['target_floor_met'])} | "
                f"{_verdict(row['target_rows_floor_met'])} |"
            )
    if not peer:
        out.append("")
        out.append(PREFECT_SKIP)
    out.append("")
    out.append(f"Queue case, the final round (queue draining from ~{args.waiters:,} to 0; not a target):\n")
    out.append("| store | drain grants/s (median) | samples | first grant after the holders' signal (ms) |")
    out.append("| --- | ---: | --- | --- |")
    for store in stores_:
        ss = results[(store, "queue")]
        out.append(
            f"| {store} | {_fmt(med(store, 'queue', 'drain_rate'))} | "
            f"{' '.join(_fmt(s['drain_rate']) for s in ss)} | "
            f"{' '.join(format(s['first_grant_after_go_ms'], '.1f') for s in ss)} |"
        )
    if ("sqlite", "queue-poll-ref") in results:
        ss = results[("sqlite", "queue-poll-ref")]
        out.append("")
        out.append(
            f"Reference: the queue case on SQLite with poll_interval={args.queue_poll_ref} instead of "
            f"{args.poll_interval}: steady {_fmt(med('sqlite', 'queue-poll-ref'))} pairs/s "
            f"(samples {' '.join(_fmt(s['rate']) for s in ss)}), drain "
            f"{_fmt(med('sqlite', 'queue-poll-ref', 'drain_rate'))} grants/s."
        )
    out.append("")
    out.append(
        f"Release-to-resume latency (ms; windows >= {args.window} s, queue rounds of {args.handoffs} "
        "hand-offs; medians over samples):\n"
    )
    out.append("| store | variant | median | p99 | max | samples: median / p99 | < 2 ms median |")
    out.append("| --- | --- | ---: | ---: | ---: | --- | --- |")
    for store in stores_:
        for case, label in (
            ("latency-queue", f"queue of {args.handoffs} waiters"),
            ("latency-pingpong", "2 runs alternating (depth 1)"),
        ):
            ss = results[(store, case)]
            m, p = med(store, case, "median_ms"), med(store, case, "p99_ms")
            rows.append(
                {
                    "store": store,
                    "case": case,
                    "median_ms": m,
                    "p99_ms": p,
                    "target_latency_met": m < TARGET_LATENCY_MS,
                }
            )
            out.append(
                f"| {store} | {label} | **{m:.2f}** | {p:.2f} | {med(store, case, 'max_ms'):.2f} | "
                f"{' '.join(format(s['median_ms'], '.2f') + '/' + format(s['p99_ms'], '.2f') for s in ss)} | "
                f"{_verdict(m < TARGET_LATENCY_MS)} |"
            )
    out.append("")
    out.append(
        f"Flatness (µs per uncontended pair, >= {args.flat_pairs} pairs and >= {args.window} s, "
        f"x {args.repeats} per size, "
        "while K requests wait in another limit's queue):\n"
    )
    sizes = sorted({k[1] for k in flat})
    out.append(
        "| store | " + " | ".join(f"K={s:,}" for s in sizes) + " | max/min | within 2x | crowd insert/s "
        "(first / last 1,000) |"
    )
    out.append("| --- | " + " | ".join("---:" for _ in sizes) + " | ---: | --- | --- |")
    for store in stores_:
        meds = [flat[(store, s)]["median_us"] for s in sizes]
        ratio = max(meds) / min(meds)
        rows.append(
            {
                "store": store,
                "case": "flatness",
                "sizes": sizes,
                "median_us": meds,
                "max_over_min": ratio,
                "target_flat_met": ratio <= TARGET_FLAT,
            }
        )
        big = flat[(store, sizes[-1])]["fill"]
        out.append(
            f"| {store} | " + " | ".join(f"{m:,.0f}" for m in meds) + f" | {ratio:.2f} | "
            f"{_verdict(ratio <= TARGET_FLAT)} | "
            f"{_fmt(big['first_chunk_rate'] or 0)} / {_fmt(big['last_chunk_rate'] or 0)} |"
        )
    return "\n".join(out), rows


def environment(pg: Any) -> dict:
    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "?"

    env = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "duro_imported_from": str(Path(duro.__file__).parent),
        "duro_commit": git("rev-parse", "--short", "HEAD"),
        "sdk_uncommitted_changes": git("status", "--porcelain", "sdk").splitlines(),
    }
    import psycopg

    env["psycopg"] = psycopg.__version__
    if pg is not None:
        with psycopg.connect(pg.admin_dsn) as conn:
            env["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]
            env["pg_settings"] = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]
                for name in ("fsync", "synchronous_commit", "full_page_writes")
            }
    return env


# -- profile ---------------------------------------------------------------------------------------


def sql_split(pairs: int) -> None:
    """SQLite: one uncontended run of ``pairs`` pairs with duro's sqlite3 connections made from a
    ``sqlite3.Connection`` subclass that times every ``execute`` (connection and cursor) and
    ``commit``: the time spent inside SQLite per pair, by statement, against the pair's whole time."""
    import collections

    from sqlalchemy import event

    spent: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    on = [False]

    def note(kind: str, begin: float) -> None:
        if on[0]:
            spent[kind] += time.perf_counter() - begin
            count[kind] += 1

    class TimedCursor(sqlite3.Cursor):
        def execute(self, sql: str, *args: Any) -> Any:  # type: ignore[override]
            begin = time.perf_counter()
            try:
                return super().execute(sql, *args)
            finally:
                note(" ".join(sql.split()[:3])[:48], begin)

    class TimedConnection(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> Any:  # type: ignore[override]
            begin = time.perf_counter()
            try:
                return super().execute(sql, *args)
            finally:
                note(" ".join(sql.split()[:3])[:48], begin)

        def commit(self) -> None:
            begin = time.perf_counter()
            try:
                super().commit()
            finally:
                note("COMMIT (commit())", begin)

        def cursor(self, factory: Any = TimedCursor) -> Any:  # type: ignore[override]
            return super().cursor(factory)

    async def loop(url: str) -> float:
        SPANS.clear()
        engine = Engine(url, workspace=workspace(8), options=WorkerOptions(poll_interval="50ms"))
        event.listen(
            engine.store._engine,
            "do_connect",
            lambda dialect, rec, cargs, cparams: cparams.__setitem__("factory", TimedConnection),
        )
        async with engine:
            engine.register(cycler)
            await _warm(engine)
            on[0] = True
            handle = await engine.start(cycler, {"n": pairs, "tag": "s"})
            assert await handle.result(timeout=RESULT_TIMEOUT) == pairs
            on[0] = False
        begin, end = SPANS["s"]
        return (end - begin) / pairs * 1e6

    with scratch("limits-sql") as tmp:
        duro_us = asyncio.run(loop(f"sqlite:///{tmp / 'duro.db'}"))
    inside = sum(spent.values()) / pairs * 1e6
    print(
        f"SQLite, 1 run, {pairs} pairs: {duro_us:.0f} µs/pair ({1e6 / duro_us:,.0f} pairs/s), of which "
        f"{inside:.0f} µs inside sqlite3 calls ({inside / duro_us:.0%}) and {duro_us - inside:.0f} µs in Python; "
        f"{sum(count.values()) / pairs:.1f} statements per pair (the run's start and finish included)\n"
    )
    for kind, seconds in spent.most_common():
        print(f"{seconds / pairs * 1e6:8.1f} µs/pair  {count[kind] / pairs:4.1f} per pair  {kind}")


def profile(args: argparse.Namespace, top: int = 20) -> None:
    """One case, on SQLite (or PostgreSQL with --profile-store postgresql), under cProfile."""
    import cProfile
    import pstats

    pg = None
    if args.profile_store == "postgresql":
        from tests.support.pgserver import start_server

        pg = start_server()
    try:
        stores = Stores(pg)
        profiler = cProfile.Profile()
        with stores.database(args.profile_store) as db:
            url, poll = db["url"], args.poll_interval
            if args.profile == "flat":
                size = max(int(s) for s in args.sizes.split(","))
                profiler.enable()
                out = asyncio.run(case_flat(url, poll, size, args.flat_pairs, 1, args.window))
            else:
                coro = {
                    "uncontended": lambda: case_uncontended(url, poll, 1, args.pairs, args.window),
                    "uncontended-8": lambda: case_uncontended(url, poll, 8, args.pairs, args.window),
                    "queue": lambda: case_queue(
                        url, poll, args.queue_capacity, args.waiters, args.queue_rounds, args.window
                    ),
                    "latency": lambda: case_latency_pingpong(url, poll, args.handoffs, args.window),
                }[args.profile]()
                profiler.enable()
                out = asyncio.run(coro)
            profiler.disable()
    finally:
        if pg is not None:
            pg.destroy()
    print(
        f"{args.profile} on {args.profile_store} under cProfile (whole case incl. setup): "
        f"{json.dumps({k: v for k, v in out.items() if not isinstance(v, (list, dict))})}\n"
    )
    pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(top)


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--window",
        type=float,
        default=2.0,
        help="seconds each timed measurement lasts at least (default 2; 0: the counts alone)",
    )
    parser.add_argument(
        "--pairs", type=int, default=2000, help="uncontended: the fewest pairs per sample (default 2000)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="repeats per case, median reported (default 3)"
    )
    parser.add_argument("--json", type=Path, help="write every sample, the medians and the setup here")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument(
        "--sizes",
        default="100,1000,10000,100000",
        help="flatness: waiting requests in the other limit's queue (default 100,1000,10000,100000)",
    )
    parser.add_argument(
        "--flat-pairs", type=int, default=1000, help="flatness: the fewest pairs per measured loop (1000)"
    )
    parser.add_argument("--waiters", type=int, default=1000, help="queue case: runs in the queue (1000)")
    parser.add_argument("--queue-capacity", type=int, default=8, help="queue case: capacity (8)")
    parser.add_argument(
        "--queue-rounds",
        type=int,
        default=2,
        help="queue case: the fewest pairs per waiting run (2: 1 steady round + the drain)",
    )
    parser.add_argument(
        "--queue-poll-ref",
        default="1s",
        help="queue case: also run it on SQLite with this "
        "poll_interval, as a reference ('' to skip; default 1s, the engine's default)",
    )
    parser.add_argument(
        "--handoffs",
        type=int,
        default=500,
        help="latency: the queue's depth per round; ping-pong: the fewest hand-offs (500)",
    )
    parser.add_argument("--floor-pairs", type=int, default=10000, help="floors: pairs per batch (10000)")
    parser.add_argument("--poll-interval", default="50ms", help="the engines' poll_interval (50ms)")
    parser.add_argument(
        "--profile",
        choices=("uncontended", "uncontended-8", "queue", "latency", "flat", "sql"),
        help="run one case under cProfile (top 20 by tottime) instead of the benchmark; 'sql' "
        "times the uncontended loop's sqlite3 calls per statement against the pair's whole time",
    )
    parser.add_argument(
        "--prefect-window", type=float, help="seconds of Prefect pairs per sample (default: --window)"
    )
    parser.add_argument("--no-prefect", action="store_true", help="skip the Prefect peer")
    parser.add_argument("--profile-store", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    if args.prefect_window is None:
        args.prefect_window = args.window
    if args.profile == "sql":
        sql_split(args.pairs)
        return
    if args.profile:
        profile(args)
        return

    wall_begin = time.perf_counter()
    pg = _support.start_postgres(args.no_postgres)
    stores_ = ["sqlite"] + (["postgresql"] if pg is not None else [])
    stores = Stores(pg)
    results: dict[tuple[str, str], list[dict]] = {}
    prefect: dict[str, list[dict]] = {}
    flat: dict[tuple[str, int], dict] = {}
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    try:
        env = environment(pg)
        have_prefect = not args.no_prefect and PREFECT_PYTHON.exists()
        if not args.no_prefect and not have_prefect:
            print(PREFECT_SKIP, flush=True)
        for r in range(args.repeats):
            if have_prefect:
                t = time.perf_counter()
                try:
                    got = prefect_pairs([1, 8] if r % 2 == 0 else [8, 1], args.prefect_window)
                except (RuntimeError, subprocess.TimeoutExpired) as err:
                    print(f"Prefect skipped from now on: {err}", flush=True)
                    have_prefect = False
                    got = {}
                for runs, sample in sorted(got.items()):
                    prefect.setdefault(f"uncontended-{runs}", []).append(sample)
                    print(
                        f"round {r + 1}/{args.repeats}  prefect    uncontended-{runs:<4} {sample['rate']:.1f} "
                        f"pairs/s ({sample['n']} pairs, Prefect {sample['prefect']})",
                        flush=True,
                    )
                if got:
                    print(f"  (Prefect's subprocess: {time.perf_counter() - t:.1f} s)", flush=True)
            shift = r % len(CASES)
            for store in stores_ if r % 2 == 0 else stores_[::-1]:
                for case in CASES[shift:] + CASES[:shift]:
                    if case == "queue-poll-ref" and (store != "sqlite" or not args.queue_poll_ref):
                        continue
                    t = time.perf_counter()
                    sample = run_case(stores, store, case, args)
                    results.setdefault((store, case), []).append(sample)
                    shown = {
                        k: round(v, 3) if isinstance(v, float) else v
                        for k, v in sample.items()
                        if k in ("rate", "median_ms", "p99_ms", "drain_rate", "wall")
                    }
                    print(
                        f"round {r + 1}/{args.repeats}  {store:10} {case:16} {shown}  "
                        f"({time.perf_counter() - t:.1f} s)",
                        flush=True,
                    )
        for store in stores_:
            for size in sizes:
                t = time.perf_counter()
                with stores.database(store) as db:
                    flat[(store, size)] = asyncio.run(
                        case_flat(
                            db["url"], args.poll_interval, size, args.flat_pairs, args.repeats, args.window
                        )
                    )
                f = flat[(store, size)]
                print(
                    f"flat  {store:10} K={size:<7} {f['median_us']:.0f} µs/pair  "
                    f"samples {[round(x) for x in f['us_per_pair']]}  fill {f['fill']['seconds']:.1f} s  "
                    f"({time.perf_counter() - t:.1f} s)",
                    flush=True,
                )
    finally:
        if pg is not None:
            pg.destroy()

    table, rows = report(results, flat, stores_, args, prefect)
    total = time.perf_counter() - wall_begin
    print(f"\nmedians of {args.repeats}; {total:.0f} s wall\n")
    print(table)
    print(f"\nsetup: {json.dumps(env)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "environment": env,
                    "wall_seconds": total,
                    "anchors": {
                        "bare_sqlite3_pairs_per_s": SQLITE_ANCHOR,
                    },
                    "targets": {
                        "x_prefect_same_mode": TARGET_X_PREFECT,
                        "share_of_floor": TARGET_FLOOR_SHARE,
                        "latency_median_ms": TARGET_LATENCY_MS,
                        "flat_max_over_min": TARGET_FLAT,
                    },
                    "prefect": prefect,
                    "summary": rows,
                    "samples": [{"store": k[0], "case": k[1], "samples": v} for k, v in results.items()],
                    "flatness": [{"store": k[0], **v} for k, v in flat.items()],
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
