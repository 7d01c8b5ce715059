"""What a Prometheus scrape of duro.metrics costs with 100 limits and 100,000 waiting slots, on both
stores: the statements it sends to the store (the bar: one query per metric family at most), and
its time (median of repeated scrapes).

Run it from the repo root:

    .venv/bin/python bench/scrape.py                     # both stores, 100 limits, 100,000 waiters
    .venv/bin/python bench/scrape.py --no-postgres --waiting 10000 --json bench/results/scrape.json

The waiting slots are created directly in the store (a limit's row holds its counts, as every slot
decision keeps them; each waiter is a ``duro_slots`` row in state ``waiting``), then the engine's
collector is registered on a fresh ``CollectorRegistry`` and scraped with ``generate_latest``.
Statements are counted at the driver (``duro.store._connection.raw_execute``, through which every
store query goes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _support

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import sqlalchemy as sa  # noqa: E402
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

import duro  # noqa: E402
from duro import Limit, define_workspace  # noqa: E402
from duro.metrics import collector  # noqa: E402
from duro.store import _connection  # noqa: E402


def fill(engine: duro.Engine, limits: int, waiting: int) -> None:
    """``limits`` limits of capacity 5, all busy, and ``waiting`` waiters spread over them."""
    store = engine.store
    store.create_schema()
    now = int(time.time() * 1000)
    per = waiting // limits
    with store._engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(
            sa.text(
                "INSERT INTO duro_limits (name, busy, reserved, waiting, next_pos, updated_at) "
                "VALUES (:name, 5, 0, :waiting, :waiting, :now)"
            ),
            [{"name": f"limit-{i:03d}", "waiting": per, "now": now} for i in range(limits)],
        )
        rows = [
            {"id": f"run-{i}-{j}.0", "limit": f"limit-{i:03d}", "run": f"run-{i}-{j}", "pos": j, "now": now}
            for i in range(limits)
            for j in range(per)
        ]
        for start in range(0, len(rows), 10_000):
            conn.execute(
                sa.text(
                    "INSERT INTO duro_slots (id, limit_name, run_id, state, pos, enqueued_at) "
                    "VALUES (:id, :limit, :run, 'waiting', :pos, :now)"
                ),
                rows[start : start + 10_000],
            )


def measure(url: str, limits: int, waiting: int, repeats: int) -> dict[str, Any]:
    workspace = define_workspace(
        limits={f"limit-{i:03d}": Limit(capacity=5, max_hold="1h") for i in range(limits)}
    )
    engine = duro.Engine(url, workspace)
    try:
        fill(engine, limits, waiting)
        registry = CollectorRegistry()
        registry.register(collector(engine))
        generate_latest(registry)  # connections and the schema check, before counting
        sent: list[str] = []
        original = _connection.raw_execute

        def counting(conn: Any, sql: str, params: Any) -> Any:
            sent.append(sql)
            return original(conn, sql, params)

        _connection.raw_execute = counting
        try:
            text = generate_latest(registry).decode()
        finally:
            _connection.raw_execute = original
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            generate_latest(registry)
            times.append((time.perf_counter() - began) * 1000)
        waiting_total = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("duro_limit_waiting{")
        )
        assert waiting_total == waiting // limits * limits, waiting_total
        return {
            "statements": len(sent),
            "sql": sorted(set(sent)),
            "scrape_ms_median": round(statistics.median(times), 2),
            "scrape_ms_p90": round(sorted(times)[int(len(times) * 0.9) - 1], 2),
            "bytes": len(text),
            "waiting_reported": waiting_total,
        }
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limits", type=int, default=100)
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"limits": args.limits, "waiting": args.waiting}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = measure(f"sqlite:///{tmp}/scrape.db", args.limits, args.waiting, args.repeats)
    server = _support.start_postgres(args.no_postgres)
    if server is not None:
        try:
            url = server.url(server.create_database())
            results["postgresql"] = measure(url, args.limits, args.waiting, args.repeats)
        finally:
            server.destroy()
    for store in ("sqlite", "postgresql"):
        if store in results:
            r = results[store]
            print(
                f"{store:10} {r['statements']} statement(s) per scrape, median {r['scrape_ms_median']} ms "
                f"(p90 {r['scrape_ms_p90']} ms), {r['bytes']:,} bytes; {args.limits} limits, "
                f"{int(r['waiting_reported']):,} waiting"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
