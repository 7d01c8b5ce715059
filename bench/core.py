"""Core throughput on SQLite and PostgreSQL: one-step workflows end to end, duro against DBOS
Transact at the same durability and against a bare driver floor, and duro's starts on SQLite.

    .venv/bin/python bench/core.py --json bench/results/core.json       # about 4 minutes
    .venv/bin/python bench/core.py --window 0.5 --runs 100 --repeats 1 --no-dbos   # a smoke run

Each case on a fresh database (a file, or a new database on a PostgreSQL server), at least
``--window`` seconds in batches of ``--runs`` (the sqlite3 floor's: ``--floor-rows``), after 20
untimed runs; cases interleaved by round (DBOS first on odd rounds), medians:

- floor: stdlib sqlite3, one ``INSERT`` + ``COMMIT`` per transaction, WAL, synchronous NORMAL / FULL.
  On PostgreSQL, psycopg 3 on duro's own schema sending the statements duro sends for a one-step
  run, each its own transaction in autocommit (insert the run; its step behind its fence; finish
  it), one round trip each, nothing read back: one run at a time on one connection (seq), or 8
  connections in threads at once (conc).
- starts: a client ``Engine`` (never entered) starting a registered one-step workflow.
- duro: an entered engine; the workflow awaits one async ``@step`` returning x + 1; sequential
  (start, await the result, one at a time) or concurrent (start a batch, gather the results); at
  duro's default (WAL, synchronous=NORMAL) and ``?synchronous=FULL``.
- dbos: DBOS Transact, the same workflow (async: ``DBOS.start_workflow_async``, ``get_result``) on
  its SQLite system database in WAL mode, at SQLite's default synchronous=FULL and with NORMAL set on
  each of its connections; one subprocess per round (DBOS is a process-wide singleton).
- PostgreSQL (``pg_fast``, ``pg_durable``): the floor, duro and DBOS on a fresh database of one of
  two servers started for the run (tests/support/pgserver.py), fast (fsync, synchronous_commit and
  full_page_writes off, as the tests run it) or durable (all three on, PostgreSQL's defaults).

The headline pairs like with like: duro default against DBOS WAL+NORMAL, duro FULL against DBOS
WAL (FULL), each PostgreSQL server against itself, sequential against sequential and concurrent
against concurrent. ``--no-postgres`` measures SQLite alone, ``--no-sqlite`` PostgreSQL alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _support as S

WORKFLOW = "bench.one_step"
LIKE_FOR_LIKE = {"default": "wal_normal", "full": "wal"}  # duro's durability: DBOS's same
SERVERS = {"pg_fast": {}, "pg_durable": {"durable": True, "fsync": True}}  # start_server's options
FLOOR_CONNECTIONS = 8
ACTIVE = "status IN ('pending', 'running', 'suspended', 'blocked')"
PG_RUN = (  # a one-step run's writes on PostgreSQL as duro sends them: three statements in autocommit
    "INSERT INTO duro_runs (id, namespace, workflow, version, status, input, tags, owner, created_at, "
    "updated_at, due_at) VALUES (%(id)s, 'default', %(wf)s, '1', 'running', %(input)s, '[]', %(owner)s, "
    "%(now)s, %(now)s, %(now)s) ON CONFLICT (id) DO NOTHING",
    f"WITH fence AS (UPDATE duro_runs SET updated_at = %(now)s WHERE id = %(id)s AND owner = %(owner)s "
    f"AND {ACTIVE} RETURNING id) INSERT INTO duro_steps (run_id, seq, kind, name, status, started_at, "
    "ended_at, result) SELECT id, 0, 'step', 'add_one', 'completed', %(now)s, %(now)s, %(output)s FROM fence "
    "ON CONFLICT (run_id, seq) DO UPDATE SET kind = excluded.kind, name = excluded.name, status = "
    "excluded.status, started_at = excluded.started_at, ended_at = excluded.ended_at, result = excluded.result",
    "UPDATE duro_runs SET status = 'completed', output = %(output)s, error = NULL, ended_at = %(now)s, "
    f"updated_at = %(now)s, wake_at = NULL, due_at = NULL WHERE id = %(id)s AND owner = %(owner)s AND {ACTIVE} "
    "RETURNING parent_id",
)  # fmt: skip


def floor(synchronous: str, rows: int, window: float) -> dict:
    with S.scratch("floor") as tmp:
        conn = sqlite3.connect(tmp / "floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE t (id TEXT PRIMARY KEY, payload TEXT NOT NULL, created_at INTEGER)")
        count, spent = 0, 0.0
        while spent < window or not count:
            ids = [uuid.uuid4().hex for _ in range(rows)]  # made untimed
            began = time.perf_counter()
            for i, key in enumerate(ids):
                conn.execute("BEGIN")
                conn.execute("INSERT INTO t VALUES (?, ?, ?)", (key, str(i), i))
                conn.execute("COMMIT")
            spent += time.perf_counter() - began
            count += rows
        conn.close()
    return {"rate": count / spent}


@contextlib.contextmanager
def database(setting: str, servers: dict) -> Iterator[str]:
    """A fresh database's URL: a new database on a PostgreSQL server, or a SQLite file at duro's
    default or ``full`` synchronous."""
    if setting in servers:
        with S.Stores(servers[setting]).database("postgresql") as db:
            yield db["url"]
        return
    with S.scratch("e2e") as tmp:
        yield f"sqlite:///{tmp / 'duro.db'}" + ("?synchronous=FULL" if setting == "full" else "")


def pg_floor(url: str, mode: str, runs: int, window: float) -> dict:
    """PG_RUN on bare psycopg, one run at a time or on FLOOR_CONNECTIONS at once: runs/s."""
    import psycopg

    from duro.store import SqlStore

    store = SqlStore(url)
    store.create_schema()
    store.close()
    width = 1 if mode == "seq" else FLOOR_CONNECTIONS
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(width)]

    def some(conn: Any, ids: range) -> None:
        for i in ids:
            now = time.time_ns() // 1_000_000
            values = {"id": uuid.uuid4().hex, "wf": WORKFLOW, "owner": "floor", "now": now}
            values |= {"input": str(i), "output": str(i + 1)}
            for sql in PG_RUN:  # each statement its own transaction
                conn.execute(sql, values)

    with ThreadPoolExecutor(width) as pool:

        def batch(ids: range) -> None:
            list(pool.map(some, conns, [ids[k::width] for k in range(width)]))

        try:
            batch(range(-20, 0))
            count, began = 0, time.perf_counter()
            while count == 0 or time.perf_counter() - began < window:
                batch(range(count, count + runs))
                count += runs
            return {"rate": count / (time.perf_counter() - began)}
        finally:
            for conn in conns:
                conn.close()


def one_step() -> Any:
    from duro import step, workflow

    @step
    async def add_one(x: int) -> int:
        return x + 1

    @workflow(name=WORKFLOW)
    async def one_step(x: int) -> int:
        return await add_one(x)

    return one_step


async def duro_starts(runs: int, window: float) -> dict:
    from duro import Engine

    with S.scratch("starts") as tmp:
        engine = Engine(f"sqlite:///{tmp / 'duro.db'}")
        engine.register(one_step())
        try:
            for i in range(20):
                await engine.start(WORKFLOW, -i)

            async def batch(done: int) -> int:
                for i in range(done, done + runs):
                    await engine.start(WORKFLOW, i)
                return runs

            count, began = 0, time.perf_counter()
            while count == 0 or time.perf_counter() - began < window:
                count += await batch(count)
            return {"rate": count / (time.perf_counter() - began)}
        finally:
            engine.close()


async def run_batches(start: Any, result: Any, runs: int, window: float, sequential: bool) -> dict:
    """One-step runs (``start(i)`` -> handle, ``result(handle)`` -> x + 1) in batches: runs/s."""
    for i in range(20):
        assert await result(await start(i)) == i + 1
    count, began = 0, time.perf_counter()
    while count == 0 or time.perf_counter() - began < window:
        batch = range(count, count + runs)
        if sequential:
            for i in batch:
                assert await result(await start(i)) == i + 1
        else:
            handles = [await start(i) for i in batch]
            assert await asyncio.gather(*map(result, handles)) == [i + 1 for i in batch]
        count += runs
    return {"rate": count / (time.perf_counter() - began)}


async def duro_e2e(setting: str, mode: str, runs: int, window: float, servers: dict) -> dict:
    from duro import Engine

    with database(setting, servers) as url:
        engine = Engine(url)
        engine.register(one_step())
        try:
            async with engine:
                start = lambda i: engine.start(WORKFLOW, i)  # noqa: E731
                return await run_batches(start, lambda h: h.result(), runs, window, mode == "seq")
        finally:
            engine.close()


def dbos_round(spec: dict) -> dict:
    """In a subprocess: every DBOS case of one round, {case: {"rate": runs/s}}."""
    import logging

    import sqlalchemy as sa
    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    normal = [False]

    @sa.event.listens_for(sa.Engine, "connect")
    def _maybe_normal(dbapi_conn: Any, _record: Any) -> None:  # every engine's: DBOS's too
        if normal[0]:
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @DBOS.step()
    async def add_one(x: int) -> int:
        return x + 1

    @DBOS.workflow()
    async def one_step(x: int) -> int:
        return await add_one(x)

    out = {}
    for case in spec["cases"]:
        _, setting, mode = case.split("/")
        with S.scratch("dbos") as tmp:
            path = tmp / "dbos.sqlite"
            if case not in spec["urls"]:
                with sqlite3.connect(path) as conn:  # WAL is persistent in the file
                    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
            normal[0] = setting == "wal_normal"
            DBOS(
                config={
                    "name": "duro-bench",
                    "system_database_url": spec["urls"].get(case, f"sqlite:///{path}"),
                    "log_level": "WARNING",
                }
            )  # type: ignore[typeddict-unknown-key]
            try:
                DBOS.launch()
                start = lambda i: DBOS.start_workflow_async(one_step, i)  # noqa: E731
                got = run_batches(
                    start, lambda h: h.get_result(), spec["runs"], spec["window"], mode == "seq"
                )
                out[case] = asyncio.run(got)
            finally:
                DBOS.destroy()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per batch (1000)")
    parser.add_argument("--window", type=float, default=2.0, help="seconds each case lasts at least (2)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; medians (3)")
    parser.add_argument("--floor-rows", type=int, default=20000, help="inserts per floor batch (20000)")
    parser.add_argument("--no-dbos", action="store_true", help="skip DBOS")
    parser.add_argument("--no-sqlite", action="store_true", help="skip the SQLite cases")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL cases")
    parser.add_argument("--json", type=Path, help="write every sample and the medians here")
    parser.add_argument("--dbos-round", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dbos_round:
        print(json.dumps(dbos_round(json.loads(args.dbos_round))), flush=True)
        return 0
    dbos = not args.no_dbos and S.dbos_installed()
    if not args.no_dbos and not dbos:
        S.log(S.MISSING_DBOS)
    servers = {}
    try:
        for name, options in SERVERS.items() if not args.no_postgres else ():
            if (server := S.start_postgres(**options)) is not None:
                servers[name] = server
        return measure(args, dbos, servers)
    finally:
        for server in servers.values():
            server.destroy()


def measure(args: argparse.Namespace, dbos: bool, servers: dict) -> int:
    modes = ("seq", "conc")
    sqlite = not args.no_sqlite
    duro_cases = ["floor/NORMAL", "floor/FULL", "duro/starts"] if sqlite else []
    duro_cases += [f"duro/{d}/{m}" for d in ("default", "full") for m in modes] if sqlite else []
    duro_cases += [f"{kind}/{s}/{m}" for s in servers for kind in ("floor", "duro") for m in modes]
    dbos_settings = (["wal", "wal_normal"] if sqlite else []) + list(servers)
    dbos_cases = [f"dbos/{s}/{m}" for s in dbos_settings for m in modes] if dbos else []
    got: dict[str, list[dict]] = {c: [] for c in duro_cases + dbos_cases}

    def duro_round(rnd: int) -> None:
        part = S.interleave(S.rotated(duro_cases, rnd, args.repeats), 1, lambda c, _: run(c))
        for case, samples in part.items():
            got[case] += samples

    def run(case: str) -> dict:
        kind, *rest = case.split("/")
        if kind == "floor" and rest[0] in servers:
            with database(rest[0], servers) as url:
                return pg_floor(url, rest[1], args.runs, args.window)
        if kind == "floor":
            return floor(rest[0], args.floor_rows, args.window)
        if rest == ["starts"]:
            return asyncio.run(duro_starts(args.runs, args.window))
        return asyncio.run(duro_e2e(rest[0], rest[1], args.runs, args.window, servers))

    def dbos_part(rnd: int) -> None:
        cases = S.rotated(dbos_cases, rnd, args.repeats)
        with contextlib.ExitStack() as stack:  # the PostgreSQL cases' databases, made here
            urls = {
                case: stack.enter_context(database(case.split("/")[1], servers)).replace("+psycopg", "")
                for case in cases
                if case.split("/")[1] in servers
            }
            spec = {"cases": cases, "urls": urls, "runs": args.runs, "window": args.window}
            answer = S.child_json([sys.executable, __file__, "--dbos-round", json.dumps(spec)])
        for case, value in answer.items():
            got[case].append(value)
            S.log(f"round {rnd + 1}/{args.repeats} {case}: {value['rate']:,.0f}/s")

    env = S.environment() | {"dbos": S.version("dbos"), "params": vars(args)}
    env["postgresql"] = {name: S.environment(server)["postgresql"] for name, server in servers.items()}
    for rnd in range(args.repeats):
        parts = [duro_round, dbos_part] if dbos else [duro_round]
        for part in parts[:: -1 if rnd % 2 else 1]:  # DBOS first on odd rounds
            part(rnd)
    med = {c: S.median(s["rate"] for s in v) for c, v in got.items()}
    print(
        S.table(
            ("case", "per s (median)", "samples"),
            [(c, m, " ".join(S.fmt(s["rate"]) for s in got[c])) for c, m in med.items()],
        )
    )
    pairs = [(d, "NORMAL" if d == "default" else "FULL", peer) for d, peer in LIKE_FOR_LIKE.items() if sqlite]
    ratios, rows = {}, []  # the floor: sqlite3's inserts at the same synchronous; the same server's
    for durability, floor_case, peer in pairs + [(s, s, s) for s in servers]:
        for mode in modes:
            duro = med[f"duro/{durability}/{mode}"]
            floor_rate = med[f"floor/{floor_case}" + (f"/{mode}" if durability in servers else "")]
            ratios[f"duro {durability} {mode} / floor"] = duro / floor_rate
            dbos_rate = med[f"dbos/{peer}/{mode}"] if dbos else float("nan")
            if dbos:
                ratios[f"duro {durability} {mode} / DBOS {peer} {mode}"] = duro / dbos_rate
            if durability in servers:
                rows.append(
                    (durability, mode, duro, dbos_rate, floor_rate, duro / dbos_rate, duro / floor_rate)
                )
    print("\n" + S.table(("ratio", "x"), [(k, f"{v:.3f}") for k, v in ratios.items()]))
    if rows:
        header = ("PostgreSQL", "mode", "duro/s", "DBOS/s", "floor/s", "duro/DBOS", "duro/floor")
        print("\n" + S.table(header, rows))
    S.write_json(args.json, env | {"medians": med, "ratios": ratios, "samples": got})
    return 0


if __name__ == "__main__":
    sys.exit(main())
