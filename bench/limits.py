"""Limits (slots): acquire+release pairs against Prefect 3 and two bare-driver floors, release-to-resume
(resident and evicted waiters) and the cost of a pair with a long queue elsewhere; SQLite and
PostgreSQL.

    .venv/bin/python bench/limits.py --json bench/results/limits.json      # about 8 minutes
    .venv/bin/python bench/limits.py --no-postgres --no-prefect --window 0.5 --repeats 1 --sizes 10,100

Every case runs in this process on an entered ``Engine`` (poll 50 ms) over a fresh database; the
workflows read ``time.perf_counter`` (no replay happens) and every acquire and release is a durable
call. Cases, interleaved by round (each lasts at least ``--window`` seconds):

- floor, floor-rows: the bare driver, two transactions per pair: a counter row's ``UPDATE`` +1 and
  -1; or a slot row (text id) inserted, then deleted (the least a slot that has an id writes).
- pairs-1, pairs-8: 1 or 8 runs looping ``acquire_slot`` + ``release_slot`` on a capacity-8 limit.
- queue: capacity 8, 8 holders, 1,000 runs queued behind them, each looping acquire+release so every
  release hands the slot to the queue's head: pairs/s while the queue stays at about 1,000.
- latency, latency-evicted: capacity 1, a holder and a queue of 500 one-shot waiters behind it;
  each release to the next acquire (ms); evicted: every waiter left memory (``max_resident_runs=0``).
- pingpong: two runs alternating on a capacity-1 limit.
- flat (apart from the rounds): µs per uncontended pair while K requests wait on another limit.

Prefect (``make bench-peers``: its own venv) runs bench/peers/prefect_pairs.py once a round: its
temporary local server, a global concurrency limit of 8, ``async with concurrency(...)`` in 1 task
and in 8, for the window; its figure is the peer of pairs-1 and pairs-8.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import _support as S

from duro import (
    Engine,
    Limit,
    WorkerOptions,
    acquire_slot,
    define_workspace,
    release_slot,
    wait_for_signal,
    workflow,
)
from duro.store import RequestSlot

PREFECT = S.ROOT / "bench" / ".venvs" / "prefect" / "bin" / "python"
PREFECT_SKIP = "Prefect skipped: run make bench-peers"
TIMEOUT = "600s"
SPANS: dict[str, tuple[float, float]] = {}  # tag -> (loop start, loop end)
STATE = {"deadline": 0.0}
GRANTS: list[float] = []  # just after acquire_slot returns, in the queue case
EVENTS: list[tuple[str, float]] = []  # ("rel", t) just before release_slot, ("acq", t) just after acquire


@workflow
async def cycler(inp: dict) -> int:
    """acquire+release pairs on ``limit``: at least ``n``, and until STATE's deadline or ``window``
    seconds after its own start."""
    begin, done = time.perf_counter(), 0
    own = begin + inp["window"] if "window" in inp else None
    while True:
        slot = await acquire_slot(inp.get("limit", "bench"), label=f"{inp['tag']}-{done}")
        now = time.perf_counter()
        if inp.get("grants"):
            GRANTS.append(now)
        if inp.get("events"):
            EVENTS.extend((("acq", now), ("rel", time.perf_counter())))
        assert (await release_slot(slot.id)).released
        done += 1
        if done >= inp["n"] and time.perf_counter() >= (own or STATE["deadline"]):
            break
    SPANS[inp["tag"]] = (begin, time.perf_counter())
    return done


@workflow
async def holder(inp: dict) -> bool:
    slot = await acquire_slot("bench", label=inp["tag"])
    await wait_for_signal("go")
    EVENTS.append(("rel", time.perf_counter()))
    return (await release_slot(slot.id)).released


def engine(url: str, capacity: int, resident: int = 10_000) -> Engine:
    limits = {"bench": Limit(capacity=capacity, max_hold="1h"), "crowd": Limit(capacity=1, max_hold="1h")}
    options = WorkerOptions(poll_interval="50ms", max_resident_runs=resident)
    eng = Engine(url, workspace=define_workspace(limits=limits), options=options)
    eng.register(cycler)
    eng.register(holder)
    return eng


async def until(eng: Engine, busy: int, waiting: int, name: str = "bench") -> None:
    deadline = time.perf_counter() + 300
    while True:
        info = next(i for i in await eng.limits.list() if i.name == name)
        if (info.busy, info.reserved, info.waiting) == (busy, 0, waiting):
            return
        assert time.perf_counter() < deadline, (
            f"limit {name}: {info}, expected {busy} busy, {waiting} waiting"
        )
        await asyncio.sleep(0.02)


async def warm(eng: Engine) -> None:
    assert (
        await (await eng.start(cycler, {"n": 20, "tag": "warm", "window": 0})).result(timeout=TIMEOUT) == 20
    )


async def case_pairs(url: str, runs: int, window: float) -> dict:
    SPANS.clear()
    async with engine(url, 8) as eng:
        await warm(eng)
        handles = [await eng.start(cycler, {"n": 1, "tag": f"u{i}", "window": window}) for i in range(runs)]
        done = sum([await h.result(timeout=TIMEOUT) for h in handles])
        await until(eng, 0, 0)
    spans = [SPANS[f"u{i}"] for i in range(runs)]
    return {"rate": done / (max(e for _, e in spans) - min(b for b, _ in spans)), "pairs": done}


async def case_queue(url: str, window: float, capacity: int = 8, waiters: int = 1000) -> dict:
    GRANTS.clear()
    STATE["deadline"] = float("inf")
    async with engine(url, capacity) as eng:
        await warm(eng)
        holders = [await eng.start(holder, {"tag": f"h{i}"}) for i in range(capacity)]
        await until(eng, capacity, 0)
        runs = [await eng.start(cycler, {"n": 2, "tag": f"q{i}", "grants": True}) for i in range(waiters)]
        await until(eng, capacity, waiters)
        STATE["deadline"] = time.perf_counter() + window
        for h in holders:
            await h.signal("go")
        assert all([await h.result(timeout=TIMEOUT) for h in holders + runs])
    steady = len(GRANTS) - waiters  # the last ``waiters`` grants are the queue draining
    return {"rate": (steady - 1) / (GRANTS[steady - 1] - GRANTS[0]), "grants": steady}


async def case_latency(url: str, window: float, resident: int = 10_000, depth: int = 500) -> dict:
    lat: list[float] = []
    measured = 0.0
    async with engine(url, 1, resident) as eng:
        await warm(eng)
        while not lat or measured < window:
            EVENTS.clear()
            first = await eng.start(holder, {"tag": "h"})
            await until(eng, 1, 0)
            runs = [
                await eng.start(cycler, {"n": 1, "tag": f"l{i}", "events": True, "window": 0})
                for i in range(depth)
            ]
            await until(eng, 1, depth)
            await first.signal("go")
            assert [await r.result(timeout=TIMEOUT) for r in [first, *runs]] == [True] + [1] * depth
            lat += S.handoffs(EVENTS)
            measured += EVENTS[-2][1] - EVENTS[0][1]
    return S.latency(lat)


async def case_pingpong(url: str, window: float) -> dict:
    EVENTS.clear()
    STATE["deadline"] = float("inf")
    async with engine(url, 1) as eng:
        await warm(eng)
        first = await eng.start(holder, {"tag": "h"})
        await until(eng, 1, 0)
        runs = [await eng.start(cycler, {"n": 1, "tag": f"p{i}", "events": True}) for i in range(2)]
        await until(eng, 1, 2)
        STATE["deadline"] = time.perf_counter() + window
        await first.signal("go")
        for r in [first, *runs]:
            await r.result(timeout=TIMEOUT)
    return S.latency(S.handoffs(EVENTS)[2:])  # after the holder's hand-off down a queue of two


async def case_flat(url: str, size: int, repeats: int, window: float) -> dict:
    """µs per pair of one run on "bench" while ``size`` requests (no run behind them) wait on "crowd"."""
    eng = engine(url, 8)
    eng.store.create_schema()
    config, now = eng.limit_config("crowd"), eng.clock.now_ms()
    for i in range(size + 1):  # the first takes crowd's only slot
        eng.store.steps.apply(RequestSlot(config, f"crowd.{i}", None, None, None, now))
    eng.close()
    samples = []
    async with engine(url, 8) as eng:
        await until(eng, 1, size, "crowd")
        await warm(eng)
        for r in range(repeats):
            done = await (await eng.start(cycler, {"n": 1000, "tag": f"f{r}", "window": window})).result(
                timeout=TIMEOUT
            )
            begin, end = SPANS.pop(f"f{r}")
            samples.append((end - begin) / done * 1e6)
    return {"us_per_pair": S.median(samples), "samples": samples}


def floor(db: dict, store: str, rows: bool, window: float, batch: int = 10_000) -> dict:
    """Bare-driver pairs: a counter row's UPDATE +1 then -1, or a slot row inserted then deleted."""
    if store == "sqlite":
        conn, mark = S.sqlite_floor_conn(db["path"]), "?"
        begin_tx, commit = (lambda: conn.execute("BEGIN IMMEDIATE")), (lambda: conn.execute("COMMIT"))
    else:
        import psycopg

        conn, mark = psycopg.connect(db["dsn"], autocommit=True), "%s"
        begin_tx, commit = (lambda: conn.execute("BEGIN")), (lambda: conn.execute("COMMIT"))
    conn.execute("CREATE TABLE slots (id TEXT PRIMARY KEY, limit_name TEXT NOT NULL, state TEXT NOT NULL)")
    conn.execute("CREATE TABLE counter (name TEXT PRIMARY KEY, busy INTEGER NOT NULL)")
    conn.execute("INSERT INTO counter VALUES ('bench', 0)")
    if rows:
        take, give = (
            f"INSERT INTO slots VALUES ({mark}, 'bench', 'busy')",
            f"DELETE FROM slots WHERE id = {mark}",
        )
    else:
        take = f"UPDATE counter SET busy = busy + 1 WHERE name = {mark}"
        give = f"UPDATE counter SET busy = busy - 1 WHERE name = {mark}"
    done, spent = 0, 0.0
    while spent < window or not done:
        ids = [uuid.uuid4().hex if rows else "bench" for _ in range(batch)]  # made untimed
        began = time.perf_counter()
        for slot in ids:
            for sql in (take, give):
                begin_tx()
                conn.execute(sql, (slot,))
                commit()
        spent += time.perf_counter() - began
        done += batch
    conn.close()
    return {"rate": done / spent, "pairs": done}


def prefect(window: float, rnd: int) -> dict[str, dict]:
    """Prefect's pairs in its own venv: {"pairs-1": ..., "pairs-8": ...}."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PREFECT_"))}
    script = str(S.ROOT / "bench" / "peers" / "prefect_pairs.py")
    got = S.child_json(
        [str(PREFECT), script, "--runs", "1,8" if rnd % 2 == 0 else "8,1", "--window", str(window)], 900, env
    )
    return {f"pairs-{k}": v for k, v in got.items()}


def run(stores: S.Stores, case: tuple[str, str], window: float) -> dict:
    store, name = case
    with stores.database(store) as db:
        url = db["url"]
        if name.startswith("floor"):
            return floor(db, store, name == "floor-rows", window)
        if name.startswith("pairs-"):
            return asyncio.run(case_pairs(url, int(name[6:]), window))
        if name == "queue":
            return asyncio.run(case_queue(url, window))
        if name.startswith("latency"):
            return asyncio.run(case_latency(url, window, 0 if name == "latency-evicted" else 10_000))
        return asyncio.run(case_pingpong(url, window))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=2.0, help="seconds each case lasts at least (2)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; medians (3)")
    parser.add_argument("--sizes", default="100,1000,10000,100000", help="flat: requests waiting elsewhere")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--no-prefect", action="store_true", help="skip Prefect")
    parser.add_argument("--json", type=Path, help="write every sample and the medians here")
    args = parser.parse_args()
    pg = S.start_postgres(args.no_postgres)
    stores = S.Stores(pg)
    kinds = ["sqlite"] + (["postgresql"] if pg else [])
    names = ["floor", "floor-rows", "pairs-1", "pairs-8", "queue", "latency", "latency-evicted", "pingpong"]
    cases: list[Any] = [
        (k, n) for k in kinds for n in names if not (k != "sqlite" and n == "latency-evicted")
    ]
    peer = not args.no_prefect and PREFECT.exists()
    if not args.no_prefect and not peer:
        S.log(PREFECT_SKIP)
    cases += [("prefect", "-")] if peer else []
    peers: dict[str, list[dict]] = {"pairs-1": [], "pairs-8": []}

    def sample(case: Any, rnd: int) -> dict | None:
        if case[0] != "prefect":
            return run(stores, case, args.window)
        for k, v in prefect(args.window, rnd).items():
            peers[k].append(v)
        return None

    try:
        env = S.environment(pg)
        got = S.interleave(cases, args.repeats, sample)
        flat = {}
        for kind in kinds:
            for size in map(int, args.sizes.split(",")):
                with stores.database(kind) as db:
                    flat[f"{kind}/{size}"] = asyncio.run(
                        case_flat(db["url"], size, args.repeats, args.window)
                    )
                S.log(f"flat {kind} {size}: {flat[f'{kind}/{size}']['us_per_pair']:.0f} us/pair")
    finally:
        if pg is not None:
            pg.destroy()
    med = {
        f"{k}/{n}": {m: S.median(s[m] for s in v) for m in v[0] if m != "n"} for (k, n), v in got.items() if v
    }
    prefect_rate = {k: S.median(s["value"] for s in v) for k, v in peers.items() if v}
    env["prefect"] = peers["pairs-1"][0]["prefect"] if peers["pairs-1"] else None
    rows = []
    for kind in kinds:
        for n in ("pairs-1", "pairs-8", "queue"):
            rate, theirs = med[f"{kind}/{n}"]["rate"], prefect_rate.get(n)
            counter, slot_row = med[f"{kind}/floor"]["rate"], med[f"{kind}/floor-rows"]["rate"]
            rows.append(
                (
                    kind,
                    n,
                    rate,
                    theirs,
                    f"{rate / theirs:,.0f}x" if theirs else "-",
                    f"{rate / counter:.1%}",
                    f"{rate / slot_row:.1%}",
                )
            )
    print(
        S.table(
            (
                "store",
                "case",
                "pairs/s",
                "Prefect pairs/s",
                "x Prefect",
                "of counter floor",
                "of slot-row floor",
            ),
            rows,
        )
    )
    lat = [
        (k, n, med[f"{k}/{n}"]["median_ms"], med[f"{k}/{n}"]["p99_ms"])
        for k in kinds
        for n in ("latency", "latency-evicted", "pingpong")
        if f"{k}/{n}" in med
    ]
    print("\n" + S.table(("store", "release-to-resume", "median ms", "p99 ms"), lat))
    sizes = args.sizes.split(",")
    print(
        "\n"
        + S.table(
            ("store", *(f"K={s} (us/pair)" for s in sizes)),
            [(k, *(flat[f"{k}/{s}"]["us_per_pair"] for s in sizes)) for k in kinds],
        )
    )
    samples = {f"{k}/{n}": v for (k, n), v in got.items()}
    S.write_json(
        args.json,
        env
        | {
            "params": vars(args),
            "medians": med,
            "prefect": prefect_rate,
            "flat": flat,
            "samples": samples,
            "prefect_samples": peers,
        },
    )


if __name__ == "__main__":
    main()
