"""A keyed limit's grant pass as its queue grows, at the store: N slot requests of K keys wait on a
keyed limit whose every key is full (``per_key=1``, one slot of each key busy), with one more waiter
of a fresh key last in the queue. A capacity raise by one (``SqlStore.limits.set_override``) then
hands the free slot out: the only waiter whose key has room is the last one. The figure: the
raise's time, for each N over K, on SQLite and PostgreSQL, and the largest case over the smallest
(the issue's target: 100,000 over 10,000 keys at most 1.5x 100 over 10).

The queue is written with bulk SQL (the slots and the limit's row, as requests would leave them:
100,000 requests one by one would take minutes a sample), the limit marked as counted for no
per_key, so that duro counts its keys from its slots the way it does when a limit's per_key
changes; one request through the store (the fresh key's) does that, and the counts are checked
before the raise is timed.

``--base REV`` measures that commit's code too, in the same run: each sample is a fresh process
(this file with one tree's sdk/ first on ``sys.path``) and a fresh database; variants and cases
interleaved, rounds rotated.

    .venv/bin/python bench/keyed.py                                  # 100/10 and 100,000/10,000
    .venv/bin/python bench/keyed.py --base e23c3ce --rounds 3
    .venv/bin/python bench/keyed.py --cases 100/10,1000/100,10000/1000 --no-postgres
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import _support as S

FIELDS = "id, limit_name, run_id, state, pos, label, enqueued_at, max_hold_ms, expires_at, due_at"
FIELDS += ", held_since, granted_at, limit_key"


def forge(url: str, n: int, keys: int) -> None:
    """Keyed limit "api" (capacity K, per_key 1): one busy slot per key, N waiters of those keys."""
    import sqlalchemy as sa

    from duro.store import SqlStore

    store = SqlStore(url)
    store.create_schema()
    hour = 3_600_000
    busy = [
        {"id": f"held-{k}", "state": "busy", "pos": k, "key": f"k{k}", "exp": 10**12, "held": 1000}
        for k in range(keys)
    ]
    waiting = [
        {
            "id": f"w{i:06d}",
            "state": "waiting",
            "pos": keys + i,
            "key": f"k{i % keys}",
            "exp": None,
            "held": None,
        }
        for i in range(n)
    ]
    insert = sa.text(
        f"INSERT INTO duro_slots ({FIELDS}) VALUES (:id, 'api', NULL, :state, :pos, NULL, 1000, {hour}, "
        ":exp, :exp, :held, :held, :key)"
    )
    with store._engine.begin() as conn:
        for start in range(0, len(busy) + len(waiting), 5000):
            conn.execute(insert, (busy + waiting)[start : start + 5000])
        conn.execute(
            sa.text(
                "INSERT INTO duro_limits (name, capacity, max_hold_ms, per_key, busy, reserved, waiting, "
                "next_pos, updated_at) VALUES ('api', :k, :hour, NULL, :k, 0, :n, :next, 1000)"
            ),
            {"k": keys, "n": n, "next": keys + n, "hour": hour},
        )
    store.close()


def sample(url: str, n: int, keys: int) -> dict:
    """One sample, in this process (a tree's duro first on sys.path): the raise's seconds."""
    import dataclasses

    from duro import Engine, Limit, define_workspace
    from duro.store import RequestSlot

    forge(url, n, keys)
    engine = Engine(url, define_workspace(limits={"api": Limit(capacity=keys, per_key=1, max_hold="1h")}))
    store, config = engine.store, engine.limit_config("api")
    fresh = store.steps.apply(RequestSlot(config, "fresh", None, None, None, 9_000_000, None, "fresh"))
    assert fresh.row.state == "waiting", fresh
    state = store.limits.states()["api"]
    assert (state.busy, state.reserved, state.waiting) == (keys, 0, n + 1), state
    started = time.perf_counter()
    granted = store.slots.set_override(dataclasses.replace(config), "capacity", keys + 1, 10_000_000)
    took = time.perf_counter() - started
    assert [row.id for row in granted] == ["fresh"], granted
    engine.close()
    return {"value": took, "duro": str(Path(sys.modules["duro"].__file__).parent)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default="100/10,100000/10000", help="N/K: N waiters over K keys")
    parser.add_argument("--rounds", type=int, default=3, help="samples per case and variant (median)")
    parser.add_argument("--base", help="a commit to measure beside the checkout, interleaved")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--child", nargs=4, metavar=("TREE", "URL", "N", "K"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        tree, url, n, k = args.child
        sys.path.insert(0, str(Path(tree) / "sdk"))
        print(json.dumps(sample(url, int(n), int(k))))
        return
    sizes = [tuple(int(x) for x in case.split("/")) for case in args.cases.split(",")]
    pg = S.start_postgres(args.no_postgres)
    stores = S.Stores(pg)
    kinds = ["sqlite"] + (["postgresql"] if pg else [])
    with S.scratch("keyed-trees") as tmp:
        trees = {"checkout": S.ROOT}
        if args.base:
            (tmp / "base").mkdir()
            S.export_tree(args.base, ["sdk"], tmp / "base")
            trees = {args.base: tmp / "base", **trees}
        cases = [(variant, kind, n, k) for kind in kinds for (n, k) in sizes for variant in trees]

        def run(case: Any, rnd: int) -> dict:
            variant, kind, n, k = case
            with stores.database(kind) as db:
                env = {**os.environ, "PYTHONPATH": str(trees[variant] / "sdk")}
                cmd = [sys.executable, __file__, "--child", str(trees[variant]), db["url"], str(n), str(k)]
                got = S.child_json(cmd, timeout=1800, env=env)
            assert Path(got["duro"]).resolve() == (Path(trees[variant]) / "sdk" / "duro").resolve(), got
            return {"value": got["value"]}

        samples = S.interleave(cases, args.rounds, run)
    if pg:
        pg.destroy()
    print(f"commit {S.commit()}; {args.rounds} rounds, medians\n")
    rows = []
    for kind in kinds:
        for variant in trees:
            medians = {(n, k): S.median(s["value"] for s in samples[(variant, kind, n, k)]) for n, k in sizes}
            smallest = medians[sizes[0]]
            for (n, k), value in medians.items():
                rows.append(
                    [kind, variant, f"{n:,}", f"{k:,}", f"{value * 1000:.2f} ms", f"{value / smallest:.2f}"]
                )
    print(
        S.table(["store", "code", "waiters", "keys", "grant pass", f"over {sizes[0][0]}/{sizes[0][1]}"], rows)
    )


if __name__ == "__main__":
    main()
