"""A store that lives for years, measured: each hot path and page on a store holding 10 million
finished runs (3 steps each) against the same on an empty store, in the same run; and the prune.

    .venv/bin/python bench/history.py                          # 10 million runs, SQLite and PostgreSQL
    .venv/bin/python bench/history.py --runs 1000000 --no-postgres --rounds 5

The full store is written in bulk through the package's own schema (``SqlStore.create_schema``,
then one ``INSERT ... SELECT`` per million rows): runs that ended between 400 and 2 days ago, 85 %
completed, 10 % failed, 5 % cancelled, a fifth of them with a quota key of 1,000 tenants. Both
stores also hold the same 200 runs of the last hour, so that a page or replay-check finds the same
rows on either: the "empty" store is a store without history. Each sample is a fresh process; cases and stores interleaved, rotated by
round; medians and the full/empty ratio (1.0: history costs nothing).

Cases:

- start: starts of a one-step workflow from a client engine, one after another for the window: starts/s.
- quota-start: the same, each under ``Concurrency("tenant:7", 1_000_000)``: starts/s.
- claim: 1,000 pending runs claimed and executed by a worker: runs/s.
- pairs: one run loops ``acquire_slot`` + ``release_slot``: pairs/s.
- page: what Studio's runs screen reads (the newest 50, the unfinished 50, the limits): ms.
- replay-check: ``duro replay-check --since 1d``'s selection and replays: ms.
- scrape: a Prometheus scrape of ``duro.metrics.collector``: ms.
- prune (full store only): ``engine.prune`` of the oldest 50,000 runs: rows (runs and steps) per s.
- prune-starts (full store only): starts/s for the window while another engine prunes the oldest
  200,000 runs, against the start case on the full store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _support as S

CASES = ("start", "quota-start", "claim", "pairs", "page", "replay-check", "scrape", "prune", "prune-starts")
FULL_ONLY = ("prune", "prune-starts")
UNITS = {
    "start": ("starts/s", True),
    "quota-start": ("starts/s", True),
    "claim": ("runs/s", True),
    "pairs": ("pairs/s", True),
    "page": ("ms", False),
    "replay-check": ("ms", False),
    "scrape": ("ms", False),
    "prune": ("rows/s", True),
    "prune-starts": ("starts/s", True),
}
DAY = 86_400_000
CHUNK = 1_000_000
RECENT = 200  # finished runs of the last hour, in both stores
CLAIMS, REPEAT = 1000, 30
PRUNED, PRUNED_WHILE = 50_000, 200_000

# -- building the full store ------------------------------------------------------------------------

_SQLITE_RUNS = (
    "WITH RECURSIVE c(x) AS (SELECT :lo UNION ALL SELECT x + 1 FROM c WHERE x + 1 < :hi) "
    "INSERT INTO duro_runs (id, namespace, workflow, version, status, input, output, error, tags, "
    "concurrency_key, created_at, updated_at, ended_at) SELECT printf('%s%09d', :prefix, x), 'default', "
    "'history.three', '1', CASE WHEN x % 20 = 0 THEN 'cancelled' WHEN x % 10 = 1 THEN 'failed' "
    "ELSE 'completed' END, '{\"n\": 1}', CASE WHEN x % 10 = 1 OR x % 20 = 0 THEN NULL ELSE '6' END, "
    'CASE WHEN x % 10 = 1 THEN \'{"type": "builtins.ValueError", "message": "no"}\' END, \'[]\', '
    "CASE WHEN x % 5 = 0 THEN printf('tenant:%d', x % 1000) END, :t0 + x * :step, "
    ":t0 + x * :step + 1000, :t0 + x * :step + 1000 FROM c"
)
_SQLITE_STEPS = (
    "WITH RECURSIVE c(x) AS (SELECT :lo UNION ALL SELECT x + 1 FROM c WHERE x + 1 < :hi) "
    "INSERT INTO duro_steps (run_id, seq, kind, name, status, started_at, ended_at, result) "
    "SELECT printf('%s%09d', :prefix, x / 3), x % 3, 'step', 'work', 'completed', :t0 + (x / 3) * :step, "
    ":t0 + (x / 3) * :step + 10, '2' FROM c"
)
_PG_RUNS = (
    "INSERT INTO duro_runs (id, namespace, workflow, version, status, input, output, error, tags, "
    "concurrency_key, created_at, updated_at, ended_at) SELECT %(prefix)s || lpad(x::text, 9, '0'), 'default', "
    "'history.three', '1', CASE WHEN x %% 20 = 0 THEN 'cancelled' WHEN x %% 10 = 1 THEN 'failed' "
    "ELSE 'completed' END, '{\"n\": 1}', CASE WHEN x %% 10 = 1 OR x %% 20 = 0 THEN NULL ELSE '6' END, "
    'CASE WHEN x %% 10 = 1 THEN \'{"type": "builtins.ValueError", "message": "no"}\' END, \'[]\', '
    "CASE WHEN x %% 5 = 0 THEN 'tenant:' || (x %% 1000) END, %(t0)s + x * %(step)s, "
    "%(t0)s + x * %(step)s + 1000, %(t0)s + x * %(step)s + 1000 "
    "FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) AS x"
)
_PG_STEPS = (
    "INSERT INTO duro_steps (run_id, seq, kind, name, status, started_at, ended_at, result) "
    "SELECT %(prefix)s || lpad((x / 3)::text, 9, '0'), x %% 3, 'step', 'work', 'completed', "
    "%(t0)s + (x / 3) * %(step)s, %(t0)s + (x / 3) * %(step)s + 10, '2' "
    "FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) AS x"
)


def build(db: dict, runs: int) -> dict:
    """The schema, then ``runs`` finished runs of 3 steps in bulk: seconds taken and bytes on disk."""
    now = int(time.time() * 1000)
    # the history (400 to 2 days old), then the same RECENT runs in both stores (the last hour's):
    # a page and replay-check --since 1d find the same rows on either
    history = {"t0": now - 400 * DAY, "step": (398 * DAY) // max(1, runs), "prefix": "h", "n": runs}
    recent = {"t0": now - 3_600_000, "step": 3_600_000 // RECENT, "prefix": "r", "n": RECENT}
    batches = [
        (sqlite, postgresql, {**part, "lo": lo, "hi": min(total, lo + CHUNK)})
        for part in (history, recent)
        for sqlite, postgresql, total in (
            (_SQLITE_RUNS, _PG_RUNS, part["n"]),
            (_SQLITE_STEPS, _PG_STEPS, 3 * part["n"]),
        )
        for lo in range(0, total, CHUNK)
    ]
    began = time.perf_counter()
    S.write_bulk(db, batches)
    return {"seconds": time.perf_counter() - began, "bytes": _size(db)}


def _size(db: dict) -> int:
    if "path" in db:
        return sum(p.stat().st_size for p in Path(db["path"]).parent.glob("bench.db*"))
    import psycopg

    with psycopg.connect(db["dsn"]) as conn:
        return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])  # type: ignore[index]


# -- the cases (in the child) -----------------------------------------------------------------------


def _engine(url: str, **options: Any) -> Any:
    from duro import Engine, Limit, WorkerOptions, define_workspace

    space = define_workspace(limits={"bench": Limit(capacity=8, max_hold="1h")})
    return Engine(url, space, options=WorkerOptions(poll_interval="50ms", **options))


def _workflows() -> dict[str, Any]:
    from duro import acquire_slot, release_slot, step, workflow

    @step
    async def add_one(x: int) -> int:
        return x + 1

    @workflow(name="bench.one")
    async def one(n: int) -> int:
        return await add_one(n)

    @workflow(name="bench.cycler")
    async def cycler(seconds: float) -> list[float]:
        done, deadline = 0, time.perf_counter() + seconds
        began = time.perf_counter()
        while time.perf_counter() < deadline:
            slot = await acquire_slot("bench")
            await release_slot(slot.id)
            done += 1
        return [done, time.perf_counter() - began]

    return {"one": one, "cycler": cycler}


async def _starts(engine: Any, wf: Any, seconds: float, quota: bool, tag: str) -> float:
    """Starts, one after another, for ``seconds``: starts/s."""
    from duro import Concurrency

    concurrency = Concurrency("tenant:7", 1_000_000) if quota else None
    began = time.perf_counter()
    n = 0
    while time.perf_counter() - began < seconds:
        await engine.start(wf, n, run_id=f"{tag}-{n}", concurrency=concurrency)
        n += 1
    return n / (time.perf_counter() - began)


def _forget(url: str, tag: str) -> None:
    """Delete the runs a case made (ids ``<tag>-<n>``) with their steps: a later sample's worker must
    not find them pending, nor replay-check replay them (it replays the runs of the last day)."""
    import sqlalchemy as sa

    from duro.store import SqlStore

    store = SqlStore(url)
    with store._engine.begin() as conn:
        bounds = {"lo": f"{tag}-", "hi": f"{tag}."}
        conn.execute(sa.text("DELETE FROM duro_steps WHERE run_id >= :lo AND run_id < :hi"), bounds)
        conn.execute(sa.text("DELETE FROM duro_slots WHERE id >= :lo AND id < :hi"), bounds)
        conn.execute(sa.text("DELETE FROM duro_runs WHERE id >= :lo AND id < :hi"), bounds)
    store.close()


async def start_case(url: str, quota: bool, window: float) -> dict:
    engine = _engine(url)
    wf = _workflows()["one"]
    engine.register(wf)
    tag = f"s{time.time_ns()}"
    await _starts(engine, wf, 0.2, quota, f"{tag}w")  # warm
    rate = await _starts(engine, wf, window, quota, tag)
    _forget(url, f"{tag}w")
    _forget(url, tag)
    return {"value": rate}


async def claim_case(url: str) -> dict:
    wfs = _workflows()
    client = _engine(url)
    client.register(wfs["one"])
    tag = f"c{time.time_ns()}"
    handles = [await client.start(wfs["one"], n, run_id=f"{tag}-{n}") for n in range(CLAIMS)]
    engine = _engine(url)
    engine.register(wfs["one"])
    began = time.perf_counter()
    async with engine:
        for handle in handles:
            await engine.result(handle.id, timeout="600s")
    rate = CLAIMS / (time.perf_counter() - began)
    _forget(url, tag)
    return {"value": rate}


async def pairs_case(url: str, window: float) -> dict:
    engine = _engine(url)
    cycler = _workflows()["cycler"]
    engine.register(cycler)
    tag = f"y{time.time_ns()}"
    async with engine:
        await (await engine.start(cycler, 0.2, run_id=f"{tag}-0")).result(timeout="60s")  # warm
        done, took = await (await engine.start(cycler, window, run_id=f"{tag}-1")).result(timeout="600s")
    _forget(url, tag)
    return {"value": done / took}


async def page_case(url: str) -> dict:
    engine = _engine(url)
    times = []
    for _ in range(REPEAT):
        began = time.perf_counter()
        page = await engine.runs_page(limit=50)
        await engine.runs_page(status=["pending", "running", "suspended", "blocked"], limit=50)
        await engine.runs_page(cursor=page.next_cursor, limit=50) if page.next_cursor else None
        await engine.limits.list()
        times.append((time.perf_counter() - began) * 1000)
    return {"value": statistics.median(times)}


def replay_check_case(url: str) -> dict:
    from duro_devserver.cli_replay import _check

    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "workflows").mkdir()
        (project / "duro.config.py").write_text(
            "from duro import define_workspace\nworkspace = define_workspace()\n"
        )
        (project / "workflows" / "three.py").write_text(
            "from duro import step, workflow\n\n\n@step\nasync def work(n: int) -> int:\n    return 2\n\n\n"
            "@workflow(name='history.three')\nasync def three(inp: dict) -> int:\n"
            "    return await work(1) + await work(2) + await work(3)\n"
        )
        times = []
        for _ in range(5):
            began = time.perf_counter()
            asyncio.run(_check(project, url, None, DAY))
            times.append((time.perf_counter() - began) * 1000)
    return {"value": statistics.median(times)}


def scrape_case(url: str) -> dict:
    from prometheus_client import CollectorRegistry, generate_latest

    from duro.metrics import collector

    engine = _engine(url)
    engine.register(_workflows()["one"])
    registry = CollectorRegistry()
    registry.register(collector(engine))
    generate_latest(registry)
    times = []
    for _ in range(REPEAT):
        began = time.perf_counter()
        generate_latest(registry)
        times.append((time.perf_counter() - began) * 1000)
    return {"value": statistics.median(times)}


def _older_than(url: str, nth: int) -> int:
    """How old the ``nth`` oldest finished run is, in ms (a prune older than that takes ``nth``)."""
    from duro.store import SqlStore

    store = SqlStore(url)
    with store._engine.connect() as conn:
        import sqlalchemy as sa

        ended = conn.execute(
            sa.text(
                "SELECT ended_at FROM duro_runs WHERE namespace = 'default' AND ended_at IS NOT NULL "
                "ORDER BY ended_at, id LIMIT 1 OFFSET :n"
            ),
            {"n": nth},
        ).scalar_one()
    store.close()
    return int(time.time() * 1000) - int(ended)


async def prune_case(url: str, runs: int) -> dict:
    engine = _engine(url)
    older = _older_than(url, min(PRUNED, runs // 40))
    began = time.perf_counter()
    report = await engine.prune(older)
    took = time.perf_counter() - began
    return {"value": (report.runs + report.steps) / took, "runs": report.runs, "seconds": took}


async def prune_starts_case(url: str, runs: int, window: float) -> dict:
    """Starts for ``window`` seconds while another engine (another process, as far as the database
    can tell) prunes the oldest runs; the prune is stopped after."""
    engine = _engine(url)
    wf = _workflows()["one"]
    engine.register(wf)
    warm = f"w{time.time_ns()}"
    await _starts(engine, wf, 0.2, False, warm)
    _forget(url, warm)
    older = _older_than(url, min(PRUNED_WHILE, runs // 10))
    pruner = _engine(url)
    loop = asyncio.new_event_loop()
    task = loop.create_task(pruner.prune(older))
    thread = threading.Thread(target=lambda: loop.run_until_complete(asyncio.wait([task])))
    thread.start()
    await asyncio.sleep(0.2)
    tag = f"p{time.time_ns()}"
    rate = await _starts(engine, wf, window, False, tag)
    overlapped = not task.done()
    loop.call_soon_threadsafe(task.cancel)
    thread.join()
    loop.close()
    _forget(url, tag)
    return {"value": rate, "overlapped": overlapped}


def sample(case: str, url: str, window: float, runs: int) -> dict:
    if case in ("start", "quota-start"):
        return asyncio.run(start_case(url, case == "quota-start", window))
    if case == "claim":
        return asyncio.run(claim_case(url))
    if case == "pairs":
        return asyncio.run(pairs_case(url, window))
    if case == "page":
        return asyncio.run(page_case(url))
    if case == "replay-check":
        return replay_check_case(url)
    if case == "scrape":
        return scrape_case(url)
    if case == "prune":
        return asyncio.run(prune_case(url, runs))
    return asyncio.run(prune_starts_case(url, runs, window))


# -- the parent --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000_000)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=2.0, help="seconds of the start and pairs loops")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--json", type=Path, help="write every sample and the medians here")
    parser.add_argument("--child", nargs=4, metavar=("CASE", "URL", "WINDOW", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        for sub in ("sdk", "devserver", "harness"):
            sys.path.insert(0, str(S.ROOT / sub))
        case, url, window, runs = args.child
        print(json.dumps(sample(case, url, float(window), int(runs))))
        return 0
    for sub in ("sdk", "devserver", "harness"):
        sys.path.insert(0, str(S.ROOT / sub))
    cases = [c for c in args.cases.split(",") if c]
    pg = S.start_postgres(args.no_postgres)
    stores = ([] if args.no_sqlite else ["sqlite"]) + (["postgresql"] if pg is not None else [])
    databases = S.Stores(pg)
    built: dict[str, Any] = {}
    results: dict[str, Any] = {"environment": S.environment(pg), "runs": args.runs}
    try:
        with __import__("contextlib").ExitStack() as stack:
            urls: dict[tuple[str, str], str] = {}
            for store in stores:
                for kind, runs in (("empty", 0), ("full", args.runs)):
                    db = stack.enter_context(databases.database(store))
                    S.log(f"building the {kind} {store} store ({runs:,} runs)...")
                    built[f"{store}/{kind}"] = build(db, runs)
                    S.log(f"  {built[f'{store}/{kind}']}")
                    urls[(store, kind)] = db["url"]
            plan = [
                (store, case, kind)
                for store in stores
                for case in cases
                for kind in ("empty", "full")
                if kind == "full" or case not in FULL_ONLY
            ]

            def run(item: Any, rnd: int) -> dict:
                store, case, kind = item
                cmd = [
                    sys.executable,
                    __file__,
                    "--child",
                    case,
                    urls[(store, kind)],
                    str(args.window),
                    str(args.runs),
                ]
                return S.child_json(cmd, timeout=3600)

            samples = S.interleave(plan, args.rounds, run)
    finally:
        if pg is not None:
            pg.stop()
    medians = {"/".join(k): S.median(s["value"] for s in got) for k, got in samples.items() if got}
    rows = []
    for store in stores:
        for case in cases:
            unit, higher = UNITS[case]
            full = medians.get(f"{store}/{case}/full")
            if case == "prune-starts":
                base = medians.get(f"{store}/start/full")
                note = "vs start on the full store, no prune"
            else:
                base = medians.get(f"{store}/{case}/empty")
                note = ""
            ratio = None
            if full is not None and base:
                ratio = full / base if higher else base / full
            rows.append([store, case, unit, base, full, ratio, note])
    print(S.table(["store", "case", "unit", "empty", f"{args.runs:,} runs", "full/empty", "note"], rows))
    for name, figures in built.items():
        print(f"{name}: built in {figures['seconds']:.0f} s, {figures['bytes'] / 2**30:.2f} GiB")
    results |= {"built": built, "samples": {"/".join(k): v for k, v in samples.items()}, "medians": medians}
    S.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
