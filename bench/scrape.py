"""What a Prometheus scrape of ``duro.metrics`` costs with 100 limits and 100,000 waiting slots, on
both stores (median of repeated scrapes; a test counts its statements).

    .venv/bin/python bench/scrape.py --json bench/results/scrape.json
    .venv/bin/python bench/scrape.py --no-postgres --waiting 10000      # a smoke run

The waiting slots are written straight into the store (each limit's row with its counts, every
waiter a slot row in state ``waiting``), then the engine's collector is registered on a fresh
``CollectorRegistry`` and scraped with ``generate_latest``.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from pathlib import Path

import _support as S
from prometheus_client import CollectorRegistry, generate_latest

from duro import Engine, Limit, define_workspace
from duro.metrics import collector


def fill(engine: Engine, limits: int, waiting: int) -> None:
    """``limits`` limits of capacity 5, all busy, and ``waiting`` waiters spread over them."""
    engine.store.create_schema()
    now, per, url = int(time.time() * 1000), waiting // limits, engine.store.url
    limit_rows = [(f"limit-{i:03d}", per, per, now) for i in range(limits)]
    slot_rows = [
        (f"run-{i}-{j}.0", f"limit-{i:03d}", f"run-{i}-{j}", j, now)
        for i in range(limits)
        for j in range(per)
    ]
    limit_sql = "INSERT INTO duro_limits (name, busy, reserved, waiting, next_pos, updated_at) VALUES (?, 5, 0, ?, ?, ?)"
    slot_sql = "INSERT INTO duro_slots (id, limit_name, run_id, state, pos, enqueued_at) VALUES (?, ?, ?, 'waiting', ?, ?)"
    if url.get_backend_name() == "sqlite":
        with sqlite3.connect(url.database) as conn:
            conn.executemany(limit_sql, limit_rows)
            conn.executemany(slot_sql, slot_rows)
        return
    import psycopg

    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.executemany(limit_sql.replace("?", "%s"), limit_rows)
        cur.executemany(slot_sql.replace("?", "%s"), slot_rows)


def measure(url: str, limits: int, waiting: int, repeats: int) -> dict:
    workspace = define_workspace(
        limits={f"limit-{i:03d}": Limit(capacity=5, max_hold="1h") for i in range(limits)}
    )
    engine = Engine(url, workspace)
    try:
        fill(engine, limits, waiting)
        registry = CollectorRegistry()
        registry.register(collector(engine))
        text = generate_latest(registry).decode()  # connections and the schema check first
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            generate_latest(registry)
            times.append((time.perf_counter() - began) * 1000)
    finally:
        engine.close()
    reported = sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("duro_limit_waiting{")
    )
    assert reported == waiting // limits * limits, reported
    return {
        "scrape_ms_median": statistics.median(times),
        "scrape_ms_p90": S.percentile(times, 90),
        "bytes": len(text),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limits", type=int, default=100)
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pg = S.start_postgres(args.no_postgres)
    stores, results = S.Stores(pg), {}
    try:
        for store in ["sqlite"] + (["postgresql"] if pg else []):
            with stores.database(store) as db:
                results[store] = measure(db["url"], args.limits, args.waiting, args.repeats)
    finally:
        if pg is not None:
            pg.destroy()
    rows = [(s, r["scrape_ms_median"], r["scrape_ms_p90"], r["bytes"]) for s, r in results.items()]
    print(S.table(("store", "scrape ms (median)", "p90 ms", "bytes"), rows))
    S.write_json(args.json, S.environment() | {"limits": args.limits, "waiting": args.waiting, **results})


if __name__ == "__main__":
    main()
