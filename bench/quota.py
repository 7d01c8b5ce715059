"""Quota-checked starts: duro's admission path against a bare insert floor, SQLite and PostgreSQL.

    .venv/bin/python bench/quota.py --json bench/results/quota.json     # about 2 minutes
    .venv/bin/python bench/quota.py --no-postgres --window 0.5 --starts 200 --repeats 1   # a smoke run

Clients are separate processes (spawned once, kept for the run); per case each connects, makes one
untimed warm-up start, and waits at a barrier; a case runs from the barrier's release to the last
client done (perf_counter compares across processes), at least ``--window`` seconds, in batches of
``--starts`` split across the clients; rate = operations / that time. A fresh database per case;
cases interleaved by round. Cases, with 1 and 8 clients:

- duro: a client ``Engine`` (never entered) looping ``start(..., concurrency=Concurrency(key,
  limit=10**9))``: every start admitted (the count and the insert in one transaction). Keys:
  ``same`` (one key for all), ``own`` (a key per client), ``many`` (each key ends with at most 8
  active runs, a fresh set of keys per batch: many tenants).
- noquota: the same loop without a quota.
- rejected: the key already at its limit (10 of 10): every start raises ``ConcurrencyLimitError``.
- floor: the bare driver, one ``INSERT`` per transaction into a 3-column table (sqlite3 with duro's
  settings, psycopg 3); its batch is 5 times the others' (2,000 bare inserts last 40 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sqlite3
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import _support as S

WORKFLOW = "bench.turn"
CLIENTS = (1, 8)
ADMIT, FULL = 10**9, 10
FLOOR_TABLE = "CREATE TABLE floor (id TEXT PRIMARY KEY, payload TEXT NOT NULL, n INTEGER NOT NULL)"
PER_KEY = 8  # "many": active runs a key ends with


async def duro_client(task: dict, barrier: Any) -> dict:
    from duro import Concurrency, ConcurrencyLimitError, Engine

    engine = Engine(task["url"])
    try:
        engine.register_remote(WORKFLOW)
        await engine.start(WORKFLOW, -1, concurrency=Concurrency(key=f"warm:{uuid.uuid4().hex}", limit=ADMIT))
        key, n = task["key"], task["n"]

        def quotas(batch: int) -> list[Any]:
            if key is None:
                return [None]
            if key.startswith("many:"):
                return [
                    Concurrency(key=f"{key}:{batch}:{j}", limit=ADMIT) for j in range(max(1, n // PER_KEY))
                ]
            return [Concurrency(key=key, limit=FULL if key == "tenant:full" else ADMIT)]

        started = rejected = batch = 0
        barrier.wait(300)
        begin = time.perf_counter()
        while time.perf_counter() - begin < task["window"] or not batch:
            qs = quotas(batch)
            for i in range(n):
                try:
                    await engine.start(WORKFLOW, started + rejected, concurrency=qs[i % len(qs)])
                    started += 1
                except ConcurrencyLimitError:
                    rejected += 1
            batch += 1
    finally:
        engine.close()
    assert not (started if key == "tenant:full" else rejected), (started, rejected)
    return {"begin": begin, "end": time.perf_counter(), "ops": started + rejected}


def floor_client(task: dict, barrier: Any) -> dict:
    if task["store"] == "sqlite":
        conn, sql = S.sqlite_floor_conn(task["path"]), "INSERT INTO floor VALUES (?, ?, ?)"

        def insert(i: int) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(sql, (uuid.uuid4().hex, str(i), i))
            conn.execute("COMMIT")
    else:
        import psycopg

        conn, sql = psycopg.connect(task["dsn"]), "INSERT INTO floor VALUES (%s, %s, %s)"

        def insert(i: int) -> None:
            conn.execute(sql, (uuid.uuid4().hex, str(i), i))  # BEGIN; INSERT
            conn.commit()

    insert(-1)
    barrier.wait(300)
    count, begin = 0, time.perf_counter()
    while time.perf_counter() - begin < task["window"] or not count:
        for i in range(count, count + task["n"]):
            insert(i)
        count += task["n"]
    end = time.perf_counter()
    conn.close()
    return {"begin": begin, "end": end, "ops": count}


def client_main(index: int, tasks: Any, results: Any, barriers: dict[int, Any]) -> None:
    import duro  # noqa: F401 - imported before any case is timed

    while (task := tasks.get()) is not None:
        barrier = barriers[task["parties"]]
        try:
            if task["kind"] == "floor":
                out = floor_client(task, barrier)
            else:
                out = asyncio.run(duro_client(task, barrier))
            results.put((index, "ok", out))
        except BaseException:  # noqa: BLE001 - reported to the parent, which stops the run
            barrier.abort()
            results.put((index, "error", traceback.format_exc()))


class Clients:
    """Spawned client processes, a task queue each, a barrier per client count."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.results = ctx.Queue()
        self.barriers = {n: ctx.Barrier(n) for n in CLIENTS}
        self.queues = [ctx.Queue() for _ in range(max(CLIENTS))]
        args = [(i, q, self.results, self.barriers) for i, q in enumerate(self.queues)]
        self.procs = [ctx.Process(target=client_main, args=a, daemon=True) for a in args]
        for proc in self.procs:
            proc.start()

    def run(self, tasks: list[dict]) -> float:
        """The tasks on the first len(tasks) clients: operations per second over all of them."""
        for i, task in enumerate(tasks):
            self.queues[i].put({**task, "parties": len(tasks)})
        outs = [self.results.get(timeout=600) for _ in tasks]
        errors = [out for _, status, out in outs if status != "ok"]
        if errors:
            self.barriers[len(tasks)].reset()
            raise RuntimeError("a client failed:\n" + "\n".join(errors))
        got = [out for _, _, out in outs]
        return sum(o["ops"] for o in got) / (max(o["end"] for o in got) - min(o["begin"] for o in got))

    def close(self) -> None:
        for q in self.queues:
            q.put(None)
        for proc in self.procs:
            proc.join(timeout=10)


async def fill_to_limit(url: str) -> None:
    """FULL pending runs on "tenant:full" (limit FULL): the key is at its limit."""
    from duro import Concurrency, Engine

    engine = Engine(url)
    engine.register_remote(WORKFLOW)
    for i in range(FULL):
        await engine.start(WORKFLOW, i, concurrency=Concurrency(key="tenant:full", limit=FULL))
    engine.close()


def count(store: str, db: dict, sql: str) -> int:
    if store == "sqlite":
        with sqlite3.connect(db["path"]) as conn:
            return conn.execute(sql).fetchone()[0]
    import psycopg

    with psycopg.connect(db["dsn"]) as conn:
        return conn.execute(sql).fetchone()[0]  # type: ignore[index]


def run_case(clients: Clients, stores: S.Stores, case: tuple, args: argparse.Namespace) -> dict:
    store, kind, n, keys = case
    batch = args.starts * (5 if kind == "floor" else 1)
    with stores.database(store) as db:
        common = {"kind": kind, "store": store, "window": args.window, "n": max(1, batch // n), **db}
        if kind == "floor":
            if store == "sqlite":
                S.sqlite_floor_conn(db["path"]).execute(FLOOR_TABLE).connection.close()
            else:
                import psycopg

                with psycopg.connect(db["dsn"], autocommit=True) as conn:
                    conn.execute(FLOOR_TABLE)
        if kind == "rejected":
            asyncio.run(fill_to_limit(db["url"]))
        key_of = {
            "same": lambda c: "tenant:shared",
            "own": lambda c: f"tenant:{c}",
            "many": lambda c: f"many:{c}",
            "-": lambda c: "tenant:full" if kind == "rejected" else None,
        }[keys]
        rate = clients.run([{**common, "key": key_of(c)} for c in range(n)])
        if kind == "duro":  # every admitted start made its run
            assert (
                count(store, db, "SELECT count(*) FROM duro_runs WHERE concurrency_key NOT LIKE 'warm:%'") > 0
            )
        if kind == "rejected":
            assert (
                count(store, db, "SELECT count(*) FROM duro_runs WHERE concurrency_key = 'tenant:full'")
                == FULL
            )
    return {"rate": rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--starts", type=int, default=2000, help="operations per batch, split across clients (2000)"
    )
    parser.add_argument("--window", type=float, default=2.0, help="seconds each case lasts at least (2)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; medians (3)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--json", type=Path, help="write every sample and the medians here")
    args = parser.parse_args()
    pg = S.start_postgres(args.no_postgres)
    stores = S.Stores(pg)
    kinds = ["sqlite"] + (["postgresql"] if pg else [])
    cases = [
        (store, kind, n, keys)
        for store in kinds
        for n in CLIENTS
        for kind, keys in [
            ("floor", "-"),
            ("noquota", "-"),
            ("rejected", "-"),
            ("duro", "same"),
            ("duro", "many"),
        ]
        + ([("duro", "own")] if n > 1 else [])
    ]
    clients = Clients()
    try:
        env = S.environment(pg)
        got = S.interleave(cases, args.repeats, lambda case, _: run_case(clients, stores, case, args))
    finally:
        clients.close()
        if pg is not None:
            pg.destroy()
    med = {c: S.median(s["rate"] for s in v) for c, v in got.items()}
    rows = []
    for store, kind, n, keys in cases:
        if kind in ("duro", "rejected"):
            floor, plain = med[(store, "floor", n, "-")], med[(store, "noquota", n, "-")]
            what = "refused at the limit" if kind == "rejected" else f"quota, keys {keys}"
            rows.append(
                (
                    store,
                    n,
                    what,
                    med[(store, kind, n, keys)],
                    floor,
                    f"{med[(store, kind, n, keys)] / floor:.2f}",
                    plain,
                    f"{plain / floor:.2f}",
                )
            )
    header = (
        "store",
        "clients",
        "case",
        "per s",
        "floor tx/s",
        "/ floor",
        "no quota starts/s",
        "no quota / floor",
    )
    print(S.table(header, rows))
    S.write_json(args.json, env | {"params": vars(args), "medians": {"/".join(map(str, c)): v for c, v in med.items()},
                                   "samples": {"/".join(map(str, c)): v for c, v in got.items()}})  # fmt: skip


if __name__ == "__main__":
    main()
