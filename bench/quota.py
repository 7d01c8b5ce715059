"""Quota-checked starts: duro's admission path against a bare insert floor, SQLite and PostgreSQL.

Run it from the repo root:

    .venv/bin/python bench/quota.py                         # defaults: --window 2 --starts 2000 --repeats 3
    .venv/bin/python bench/quota.py --json /tmp/duro-quota.json
    .venv/bin/python bench/quota.py --no-postgres           # SQLite only
    .venv/bin/python bench/quota.py --profile               # one client's start loop under cProfile
    .venv/bin/python bench/quota.py --no-postgres --window 0.5 --starts 200 --repeats 1   # a smoke run

Every case runs on a fresh database (a new SQLite file in its own temporary directory; a new
PostgreSQL database on one server started for the run with tests/support/pgserver.py). Clients are
separate OS processes (multiprocessing, 'spawn' context), kept alive across cases; each case's
clients set up (connect, create the schema, one untimed warm-up transaction on a key of their own),
then meet at a barrier. A case's wall time runs from the barrier's release (the earliest client
clock read just after it) to the last client done (perf_counter is system-wide monotonic on Linux,
so clocks of different processes compare); rate = total operations / wall time.

Timed windows: ``--starts`` is a BATCH, split across the clients; each client repeats its
share of the batch until ``--window`` seconds (default 2) have passed on its own clock since the
barrier, so a case lasts at least the window, and the rate is every client's operations over the
wall time above. ``--window 0`` runs one batch (a count-sized sample). Each
sample records its operations (``n``) and the batch (``batch``) beside ``rate`` and ``wall``.

Cases, each with 1 and 8 clients, on SQLite and on PostgreSQL:

- duro      a client ``Engine(url)`` (never entered: it starts runs and executes nothing), in a loop
            ``await engine.start("bench.turn", i, concurrency=Concurrency(key=..., limit=10**9))``:
            every start is admitted, so this is the admission path (count + insert, one transaction).
            Keys: all clients on one key ("same"), or each client on its own key ("own"); with one
            client the two are the same case, measured once; or "many" (many tenants): a client's
            batch spreads over batch / 8 keys, so each key ends with at most 8 active runs, and each
            batch takes a fresh set of keys, however long the window. On "same" and "own" the key's
            active runs grow with the window, as they grew with --starts (and as in bench/ab.py).
- floor     the same driver bare: stdlib sqlite3 ``BEGIN IMMEDIATE; INSERT; COMMIT`` (WAL,
            synchronous=NORMAL, busy timeout 30 s, as duro's connections), psycopg 3 one INSERT per
            transaction (BEGIN; INSERT; COMMIT), into a 3-column table with a text primary key.
            Its batch is FLOOR_FACTOR (5) times the other cases' (a count-sized floor of 2,000 bare
            inserts lasted about 40 ms, too short to measure steadily; the window now sees to that).
- statements (SQLite) duro's own statements for an admitted quota-checked start (BEGIN IMMEDIATE;
            the existing-run SELECT; the count; the full INSERT; COMMIT) through bare sqlite3 on
            duro's schema, many keys: the ceiling of a start on this schema, whatever the code.
- rejected  the key already at its limit (10 pending runs, limit 10): every start raises
            ``ConcurrencyLimitError`` and creates nothing; rejections per second, all clients on
            that key.
- noquota   reference: the duro loop with no quota (``concurrency`` not given), to separate the
            quota's share of a start from the rest of the start path.

After each case the store is checked (rows created, starts admitted or rejected).

Repeats are interleaved (round 1 runs every case, then round 2, ...), the case list rotated from one
round to the next (by repeats / cases x round); the table shows medians.
The target: a quota-checked start at no less than half the floor on SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import multiprocessing as mp
import os
import platform
import queue
import sqlite3
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import _support
from _support import scratch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

WORKFLOW = "bench.turn"
CLIENT_COUNTS = (1, 8)
ADMIT_LIMIT = 10**9
FULL_LIMIT = 10
TARGET = 0.5  # duro / floor on SQLite
FLOOR_FACTOR = 5  # the floor runs this many times the operations: 2,000 bare inserts last 40 ms
FLOOR_TABLE = "CREATE TABLE floor (id TEXT PRIMARY KEY, payload TEXT NOT NULL, n INTEGER NOT NULL)"
BARRIER_TIMEOUT = 300.0


# -- client processes ------------------------------------------------------------------------------


async def _duro_client(
    url: str, key: str, limit: int, n: int, barrier: Any, expect_reject: bool, window: float = 0.0
) -> dict:
    from duro import Concurrency, ConcurrencyLimitError, Engine

    engine = Engine(url)
    try:
        engine.register_remote(WORKFLOW)
        # Untimed warm-up on a key of this client's own: schema, connection, statement caches.
        await engine.start(
            WORKFLOW, -1, concurrency=Concurrency(key=f"warmup:{uuid.uuid4().hex}", limit=ADMIT_LIMIT)
        )
        if key is not None and key.startswith("rotate:"):
            # many tenants: each key ends with at most ROTATE_ACTIVE active runs, as under a real quota;
            # every batch takes a fresh set of keys, so a longer window does not fill the keys further
            _, prefix, count = key.split(":")

            def quotas_of(batch: int) -> list[Any]:
                return [Concurrency(key=f"{prefix}:{batch}:{j}", limit=limit) for j in range(int(count))]
        else:
            same = [Concurrency(key=key, limit=limit) if key is not None else None]

            def quotas_of(batch: int) -> list[Any]:
                return same

        started = rejected = batch = 0
        barrier.wait(BARRIER_TIMEOUT)
        begin = time.perf_counter()
        while True:
            quotas = quotas_of(batch)
            for i in range(started + rejected, started + rejected + n):
                try:
                    await engine.start(WORKFLOW, i, concurrency=quotas[i % len(quotas)])
                    started += 1
                except ConcurrencyLimitError:
                    rejected += 1
            batch += 1
            end = time.perf_counter()
            if end - begin >= window:
                break
    finally:
        engine.close()
    if expect_reject and started:
        raise AssertionError(f"{started} starts admitted on a key at its limit")
    if not expect_reject and rejected:
        raise AssertionError(f"{rejected} starts rejected under limit {limit}")
    return {"begin": begin, "end": end, "started": started, "rejected": rejected}


def _floor_sqlite_client(path: str, n: int, barrier: Any, window: float = 0.0) -> dict:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        sql = "INSERT INTO floor (id, payload, n) VALUES (?, ?, ?)"
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(sql, (uuid.uuid4().hex, "-1", -1))
        conn.execute("COMMIT")
        barrier.wait(BARRIER_TIMEOUT)
        count, begin = 0, time.perf_counter()
        while True:
            for i in range(count, count + n):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(sql, (uuid.uuid4().hex, str(i), i))
                conn.execute("COMMIT")
            count += n
            end = time.perf_counter()
            if end - begin >= window:
                break
    finally:
        conn.close()
    return {"begin": begin, "end": end, "started": count, "rejected": 0}


def _statements_sqlite_client(
    path: str, n: int, barrier: Any, prefix: str, keys: int, window: float = 0.0
) -> dict:
    """duro's own statements for an admitted quota-checked start, through bare sqlite3 on duro's
    schema: the ceiling of any start on this schema, whatever the code around it. Batches of ``n``
    until ``window``; each batch on a fresh set of ``keys`` keys, as the duro client's."""
    from duro.store._queries import QUERIES as _HOT_SQL
    from duro.store._tables import ACTIVE_SQL

    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        count = f"SELECT count(*) FROM duro_runs WHERE concurrency_key = ? AND status IN {ACTIVE_SQL}"

        def start(i: int, batch: int) -> None:
            run_id = f"{prefix}-{i}"
            key = f"{prefix}:{batch}:{i % keys}"
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_HOT_SQL["select_run"], {"id": run_id}).fetchone()
            conn.execute(count, (key,)).fetchone()
            conn.execute(
                _HOT_SQL["insert_run"],
                {
                    "id": run_id,
                    "namespace": "default",
                    "workflow": WORKFLOW,
                    "version": "1",
                    "status": "pending",
                    "input": str(i),
                    "output": None,
                    "error": None,
                    "tags": f'["concurrency:{key}"]',
                    "concurrency_key": key,
                    "parent_id": None,
                    "parent_seq": None,
                    "owner": None,
                    "wake_at": None,
                    "created_at": i,
                    "updated_at": i,
                    "ended_at": None,
                },
            )
            conn.execute("COMMIT")

        start(-1, 0)
        barrier.wait(BARRIER_TIMEOUT)
        done, batch, begin = 0, 0, time.perf_counter()
        while True:
            for i in range(done, done + n):
                start(i, batch)
            done += n
            batch += 1
            end = time.perf_counter()
            if end - begin >= window:
                break
    finally:
        conn.close()
    return {"begin": begin, "end": end, "started": done, "rejected": 0}


def _floor_pg_client(dsn: str, n: int, barrier: Any, window: float = 0.0) -> dict:
    import psycopg

    with psycopg.connect(dsn) as conn:  # not autocommit: the first statement opens a transaction
        sql = "INSERT INTO floor (id, payload, n) VALUES (%s, %s, %s)"
        conn.execute(sql, (uuid.uuid4().hex, "-1", -1))
        conn.commit()
        barrier.wait(BARRIER_TIMEOUT)
        count, begin = 0, time.perf_counter()
        while True:
            for i in range(count, count + n):
                conn.execute(sql, (uuid.uuid4().hex, str(i), i))
                conn.commit()
            count += n
            end = time.perf_counter()
            if end - begin >= window:
                break
    return {"begin": begin, "end": end, "started": count, "rejected": 0}


def _client_main(index: int, tasks: Any, results: Any, barriers: dict[int, Any]) -> None:
    """One client process: runs the tasks it is sent until it gets None."""
    import psycopg  # noqa: F401

    import duro  # noqa: F401  (imported once, before any case is timed)

    while True:
        task = tasks.get()
        if task is None:
            return
        kind, parties = task["kind"], task["parties"]
        barrier = barriers[parties]
        try:
            if kind == "duro":
                out = asyncio.run(
                    _duro_client(
                        task["url"],
                        task["key"],
                        task["limit"],
                        task["n"],
                        barrier,
                        task["expect_reject"],
                        task["window"],
                    )
                )
            elif kind == "floor_sqlite":
                out = _floor_sqlite_client(task["path"], task["n"], barrier, task["window"])
            elif kind == "floor_pg":
                out = _floor_pg_client(task["dsn"], task["n"], barrier, task["window"])
            elif kind == "statements_sqlite":
                out = _statements_sqlite_client(
                    task["path"], task["n"], barrier, task["prefix"], task["keys"], task["window"]
                )
            else:
                raise ValueError(f"unknown task {kind!r}")
            results.put((index, "ok", out))
        except BaseException:  # noqa: BLE001  (reported to the parent, which stops the run)
            barrier.abort()
            results.put((index, "error", traceback.format_exc()))


class Clients:
    """A fixed set of spawned client processes, one task queue each, one barrier per client count."""

    def __init__(self, count: int) -> None:
        ctx = mp.get_context("spawn")
        self.results = ctx.Queue()
        self.barriers = {n: ctx.Barrier(n) for n in CLIENT_COUNTS}
        self.queues = [ctx.Queue() for _ in range(count)]
        self.procs = [
            ctx.Process(target=_client_main, args=(i, q, self.results, self.barriers), daemon=True)
            for i, q in enumerate(self.queues)
        ]
        for proc in self.procs:
            proc.start()

    def run(self, tasks: list[dict], window: float) -> list[dict]:
        """Send one task to each of the first len(tasks) clients; their results in client order."""
        parties = len(tasks)
        barrier = self.barriers[parties]
        for i, task in enumerate(tasks):
            self.queues[i].put({**task, "parties": parties, "window": window})
        outs: dict[int, dict] = {}
        errors = []
        while len(outs) + len(errors) < parties:
            try:
                index, status, out = self.results.get(timeout=BARRIER_TIMEOUT + 60)
            except queue.Empty:
                raise RuntimeError("a client process did not answer") from None
            if status == "ok":
                outs[index] = out
            else:
                errors.append(f"client {index}:\n{out}")
        if errors:
            barrier.reset()
            raise RuntimeError("a client failed:\n" + "\n".join(errors))
        return [outs[i] for i in range(parties)]

    def close(self) -> None:
        for q in self.queues:
            q.put(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()


# -- cases -----------------------------------------------------------------------------------------


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _rate(outs: list[dict]) -> tuple[float, float, int]:
    """(operations / wall, wall, operations): the wall from the earliest begin to the last end."""
    wall = max(o["end"] for o in outs) - min(o["begin"] for o in outs)
    total = sum(o["started"] + o["rejected"] for o in outs)
    return total / wall, wall, total


ROTATE_ACTIVE = 8


def _keys(keys: str, clients: int, per_client: int = 0) -> list[str]:
    if keys == "many":
        count = max(1, per_client // ROTATE_ACTIVE)
        return [f"rotate:tenant-{c}:{count}" for c in range(clients)]
    return ["tenant:shared"] * clients if keys == "same" else [f"tenant:{i}" for i in range(clients)]


async def _fill_to_limit(url: str) -> None:
    """FULL_LIMIT pending runs on "tenant:full" (limit FULL_LIMIT): the key is at its limit."""
    from duro import Concurrency, ConcurrencyLimitError, Engine

    engine = Engine(url)
    try:
        engine.register_remote(WORKFLOW)
        conc = Concurrency(key="tenant:full", limit=FULL_LIMIT)
        for i in range(FULL_LIMIT):
            await engine.start(WORKFLOW, i, concurrency=conc)
        try:
            await engine.start(WORKFLOW, FULL_LIMIT, concurrency=conc)
        except ConcurrencyLimitError:
            pass
        else:
            raise AssertionError("the key is not at its limit")
    finally:
        engine.close()


class Stores(_support.Stores):
    """Fresh databases per case, and a way to count what a case created."""

    prefix = "quota"

    @staticmethod
    def query(store: str, db: dict, sql: str) -> Any:
        if store == "sqlite":
            conn = sqlite3.connect(db["path"])
            try:
                return conn.execute(sql).fetchone()[0]
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(db["dsn"]) as conn:
            return conn.execute(sql).fetchone()[0]

    @staticmethod
    def execute(store: str, db: dict, sql: str) -> None:
        if store == "sqlite":
            conn = sqlite3.connect(db["path"], isolation_level=None)
            try:
                assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
                conn.execute(sql)
            finally:
                conn.close()
            return
        import psycopg

        with psycopg.connect(db["dsn"], autocommit=True) as conn:
            conn.execute(sql)


def run_case(
    clients: Clients,
    stores: Stores,
    store: str,
    kind: str,
    n_clients: int,
    keys: str,
    total: int,
    window: float,
) -> dict:
    """One sample: ``total`` is the batch (split across the clients), each client repeating its share
    until ``window`` seconds have passed on its clock."""
    if kind == "floor":
        total *= FLOOR_FACTOR
    parts = _split(total, n_clients)
    with stores.database(store) as db:
        if kind == "statements":
            from duro.store import SqlStore

            schema = SqlStore(db["url"])
            schema.create_schema()
            schema.close()
            tasks = [
                {
                    "kind": "statements_sqlite",
                    "path": db["path"],
                    "n": n,
                    "prefix": f"tenant-{c}",
                    "keys": max(1, max(parts) // ROTATE_ACTIVE),
                }
                for c, n in enumerate(parts)
            ]
        elif kind == "floor":
            stores.execute(store, db, FLOOR_TABLE)
            task_kind = "floor_sqlite" if store == "sqlite" else "floor_pg"
            tasks = [{"kind": task_kind, "path": db.get("path"), "dsn": db.get("dsn"), "n": n} for n in parts]
        elif kind == "duro":
            tasks = [
                {
                    "kind": "duro",
                    "url": db["url"],
                    "key": key,
                    "limit": ADMIT_LIMIT,
                    "n": n,
                    "expect_reject": False,
                }
                for key, n in zip(_keys(keys, n_clients, max(parts)), parts, strict=True)
            ]
        elif kind == "noquota":
            tasks = [
                {"kind": "duro", "url": db["url"], "key": None, "limit": None, "n": n, "expect_reject": False}
                for n in parts
            ]
        else:  # rejected
            asyncio.run(_fill_to_limit(db["url"]))
            tasks = [
                {
                    "kind": "duro",
                    "url": db["url"],
                    "key": "tenant:full",
                    "limit": FULL_LIMIT,
                    "n": n,
                    "expect_reject": True,
                }
                for n in parts
            ]
        outs = clients.run(tasks, window)
        batch = total
        rate, wall, total = _rate(outs)
        # Check what the case left in the store.
        if kind == "floor":
            found = stores.query(store, db, "SELECT count(*) FROM floor")
            assert found == total + n_clients, (found, total)
        elif kind == "duro":
            found = stores.query(
                store, db, "SELECT count(*) FROM duro_runs WHERE concurrency_key LIKE 'tenant%'"
            )
            assert found == total and sum(o["started"] for o in outs) == total, (found, total)
        elif kind == "noquota":
            found = stores.query(store, db, "SELECT count(*) FROM duro_runs WHERE concurrency_key IS NULL")
            assert found == total and sum(o["started"] for o in outs) == total, (found, total)
        elif kind == "statements":
            found = stores.query(
                store, db, "SELECT count(*) FROM duro_runs WHERE concurrency_key LIKE 'tenant%'"
            )
            assert found == total + n_clients, (found, total)
        else:
            found = stores.query(
                store, db, "SELECT count(*) FROM duro_runs WHERE concurrency_key = 'tenant:full'"
            )
            assert found == FULL_LIMIT and sum(o["rejected"] for o in outs) == total, (found, total)
    return {"rate": rate, "wall": wall, "n": total, "batch": batch}


def case_list(stores_: list[str]) -> list[tuple[str, str, int, str]]:
    cases = []
    for store in stores_:
        for n in CLIENT_COUNTS:
            cases.append((store, "floor", n, "-"))
            for keys in ("same", "many") if n == 1 else ("same", "own", "many"):
                cases.append((store, "duro", n, keys))
            cases.append((store, "rejected", n, "same"))
            cases.append((store, "noquota", n, "-"))
            if store == "sqlite":
                cases.append((store, "statements", n, "many"))
    return cases


# -- report ----------------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    return f"{x:,.0f}"


def report(results: dict, stores_: list[str]) -> tuple[str, str, list[dict]]:
    med = {k: statistics.median(s["rate"] for s in v) for k, v in results.items()}
    samples = {k: " ".join(_fmt(s["rate"]) for s in v) for k, v in results.items()}
    rows = []
    lines = [
        "| store | clients | keys | duro starts/s (quota) | floor tx/s | duro / floor | target (>= 0.50 on SQLite) "
        "| ref: duro starts/s, no quota | ref: no quota / floor |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for store in stores_:
        for n in CLIENT_COUNTS:
            floor = med[(store, "floor", n, "-")]
            for keys in ("same", "many") if n == 1 else ("same", "own", "many"):
                duro = med[(store, "duro", n, keys)]
                ratio = duro / floor
                verdict = (
                    ("**met**" if ratio >= TARGET else "**not met**")
                    if store == "sqlite"
                    else ("(would be met)" if ratio >= TARGET else "(would not be met)")
                )
                label = (
                    f"many: each key <= {ROTATE_ACTIVE} active"
                    if keys == "many"
                    else "one (same = own)"
                    if n == 1
                    else ("same" if keys == "same" else "own per client")
                )
                plain = med[(store, "noquota", n, "-")]
                lines.append(
                    f"| {store} | {n} | {label} | {_fmt(duro)} | {_fmt(floor)} | {ratio:.2f} | {verdict} "
                    f"| {_fmt(plain)} | {plain / floor:.2f} |"
                )
                rows.append(
                    {
                        "store": store,
                        "clients": n,
                        "keys": keys,
                        "duro_starts_per_s": duro,
                        "floor_tx_per_s": floor,
                        "ratio": ratio,
                        "duro_no_quota_starts_per_s": plain,
                        "duro_samples": samples[(store, "duro", n, keys)],
                        "floor_samples": samples[(store, "floor", n, "-")],
                        "target_met": ratio >= TARGET if store == "sqlite" else None,
                    }
                )
    rej = [
        "| store | clients | key at its limit | rejections/s | samples | vs floor tx/s |",
        "| --- | ---: | --- | ---: | --- | ---: |",
    ]
    for store in stores_:
        for n in CLIENT_COUNTS:
            r = med[(store, "rejected", n, "same")]
            rej.append(
                f"| {store} | {n} | tenant:full ({FULL_LIMIT}/{FULL_LIMIT}) | {_fmt(r)} | "
                f"{samples[(store, 'rejected', n, 'same')]} | {r / med[(store, 'floor', n, '-')]:.2f} |"
            )
    return "\n".join(lines), "\n".join(rej), rows


def ceiling_table(results: dict) -> str:
    med = {k: statistics.median(s["rate"] for s in v) for k, v in results.items()}
    lines = [
        "| clients | statements bare, starts/s | / floor | duro (many keys) / statements bare |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for n in CLIENT_COUNTS:
        bare = med[("sqlite", "statements", n, "many")]
        lines.append(
            f"| {n} | {_fmt(bare)} | {bare / med[('sqlite', 'floor', n, '-')]:.2f} | "
            f"{med[('sqlite', 'duro', n, 'many')] / bare:.2f} |"
        )
    return "\n".join(lines)


def samples_table(results: dict) -> str:
    lines = [
        "| store | case | clients | keys | samples (per s) | walls (s) |",
        "| --- | --- | ---: | --- | --- | --- |",
    ]
    for (store, kind, n, keys), v in results.items():
        lines.append(
            f"| {store} | {kind} | {n} | {keys} | {' '.join(_fmt(s['rate']) for s in v)} | "
            f"{' '.join(format(s['wall'], '.3f') for s in v)} |"
        )
    return "\n".join(lines)


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
        "duro_commit": git("rev-parse", "--short", "HEAD"),
        "sdk_uncommitted_changes": bool(git("status", "--porcelain", "sdk")),
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


def profile(starts: int, top: int = 20) -> None:
    """One client's start loop (SQLite, one key, admitted) under cProfile, in this process."""
    import cProfile
    import pstats

    from duro import Concurrency, Engine

    async def loop(engine: Any, profiler: Any) -> float:
        conc = Concurrency(key="tenant:shared", limit=ADMIT_LIMIT)
        await engine.start(WORKFLOW, -1, concurrency=Concurrency(key="warmup:0", limit=ADMIT_LIMIT))
        profiler.enable()
        begin = time.perf_counter()
        for i in range(starts):
            await engine.start(WORKFLOW, i, concurrency=conc)
        elapsed = time.perf_counter() - begin
        profiler.disable()
        return elapsed

    async def count_statements(engine: Any, runs: int) -> dict[str, int]:
        """Every statement SQLite runs for ``runs`` starts (a separate, unprofiled pass)."""
        seen: dict[str, int] = {}
        conc = Concurrency(key="tenant:counted", limit=ADMIT_LIMIT)
        conn = engine.store._engine.raw_connection()
        try:
            raw = conn.driver_connection
        finally:
            conn.close()
        raw.set_trace_callback(
            lambda sql: seen.__setitem__(
                " ".join(sql.split()[:4]), seen.get(" ".join(sql.split()[:4]), 0) + 1
            )
        )
        try:
            for i in range(runs):
                await engine.start(WORKFLOW, i, concurrency=conc)
        finally:
            raw.set_trace_callback(None)
        return seen

    with scratch("quota-profile") as tmp:
        engine = Engine(f"sqlite:///{tmp / 'bench.db'}")
        engine.register_remote(WORKFLOW)
        try:
            profiler = cProfile.Profile()
            elapsed = asyncio.run(loop(engine, profiler))
            counted = 100
            seen = asyncio.run(count_statements(engine, counted))
        finally:
            engine.close()
    print(
        f"SQLite, 1 client, one key, {starts} admitted starts under cProfile: {starts / elapsed:,.0f} starts/s "
        f"(profiled, slower than unprofiled)"
    )
    print(
        f"statements per start (SQLite trace, {counted} starts): "
        + ", ".join(f"{sql!r} x{count / counted:g}" for sql, count in seen.items())
        + "\n"
    )
    pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(top)


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--starts",
        type=int,
        default=2000,
        help="starts (or transactions) per batch, split across the clients; each client repeats its "
        "share until the window has passed (default 2000)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=2.0,
        help="seconds each client of a case measures at least, in whole batches (default 2; 0: one batch)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="repeats per case, median reported (default 3)"
    )
    parser.add_argument("--json", type=Path, help="write every sample, the medians and the setup here")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile one SQLite client's start loop (cProfile, top 20 by tottime) instead of the benchmark",
    )
    args = parser.parse_args()
    if args.profile:
        profile(args.starts)
        return

    wall_begin = time.perf_counter()
    pg = _support.start_postgres(args.no_postgres)
    stores_ = ["sqlite"] + (["postgresql"] if pg is not None else [])
    clients = Clients(max(CLIENT_COUNTS))
    results: dict[tuple[str, str, int, str], list[dict]] = {}
    try:
        env = environment(pg)
        cases = case_list(stores_)
        for r in range(args.repeats):
            shift = (r * max(1, len(cases) // max(1, args.repeats))) % len(cases)
            for case in cases[shift:] + cases[:shift]:  # rotated between rounds
                sample = run_case(clients, Stores(pg), *case, args.starts, args.window)
                results.setdefault(case, []).append(sample)
                print(
                    f"round {r + 1}/{args.repeats}  {case[0]:10} {case[1]:8} clients={case[2]} keys={case[3]:4} "
                    f"{sample['rate']:>9,.0f}/s  (n {sample['n']}, {sample['wall']:.3f} s)",
                    flush=True,
                )
    finally:
        clients.close()
        if pg is not None:
            pg.destroy()

    main_table, rej_table, rows = report(results, stores_)
    total = time.perf_counter() - wall_begin
    print(
        f"\nbatches of {args.starts} operations per case split across the clients, repeated for windows "
        f">= {args.window} s; medians of {args.repeats}; {total:.0f} s wall\n"
    )
    print(main_table)
    if "sqlite" in stores_:
        print(
            "\nThe ceiling on duro's schema: duro's own statements for a quota-checked start (BEGIN "
            "IMMEDIATE; the existing-run SELECT; the count; the INSERT; COMMIT) through bare sqlite3, "
            "many keys:\n"
        )
        print(ceiling_table(results))
    print("\nKey at its limit (every start raises ConcurrencyLimitError, creates nothing):\n")
    print(rej_table)
    print("\nAll samples:\n")
    print(samples_table(results))
    print(f"\nsetup: {json.dumps(env)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "args": {
                        "starts": args.starts,
                        "repeats": args.repeats,
                        "postgres": pg is not None,
                        "window": args.window,
                    },
                    "environment": env,
                    "wall_seconds": total,
                    "target": f"duro / floor >= {TARGET} on SQLite",
                    "summary": rows,
                    "samples": [
                        {
                            "store": k[0],
                            "case": k[1],
                            "clients": k[2],
                            "keys": k[3],
                            "samples": v,
                            "median": statistics.median(s["rate"] for s in v),
                        }
                        for k, v in results.items()
                    ],
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
