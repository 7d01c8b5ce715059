"""A keyed limit's hand-out as its queue grows, at the store: N slot requests of K keys wait on a
keyed limit whose every key is full (``per_key=1``, one slot of each key busy), with one more waiter
of a fresh key last in the queue. A capacity raise by one (``SqlStore.set_limit_override``) then
hands the free slot out: the waiter whose key has room is the last one, so the hand-out reads every
waiter before it. This is the worst case of today's keyed hand-out (the queue read 500 waiters a
time until enough keys have room); prints, for each N, the raise's time. SQLite file in a
temporary directory.

    .venv/bin/python bench/keyed.py                      # N = 100 to 10,000 over 100 keys
    .venv/bin/python bench/keyed.py --sizes 100,1000 --keys 10
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from duro import Engine, Limit, define_workspace
from duro.store import RequestSlot


def measure(url: str, n: int, keys: int, rounds: int) -> list[float]:
    times = []
    for r in range(rounds):
        name = f"p{n}-{r}"
        engine = Engine(url, define_workspace(limits={name: Limit(capacity=keys, per_key=1, max_hold="1h")}))
        store, config = engine.store, engine.limit_config(name)
        store.create_schema()
        for k in range(keys):  # every key holds its one slot
            store.apply(RequestSlot(config, f"{name}-held-{k}", None, None, None, 1000, None, f"k{k}"))
        for i in range(n):  # the queue: waiters of full keys
            store.apply(
                RequestSlot(config, f"{name}-w{i:06d}", None, None, None, 2000 + i, None, f"k{i % keys}")
            )
        store.apply(RequestSlot(config, f"{name}-fresh", None, None, None, 9_000_000, None, "fresh"))
        started = time.perf_counter()
        granted = store.set_limit_override(dataclasses.replace(config), "capacity", keys + 1, 10_000_000)
        times.append(time.perf_counter() - started)
        assert [row.id for row in granted] == [f"{name}-fresh"], granted
        engine.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,1000,10000", help="queue lengths N (comma-separated)")
    parser.add_argument("--keys", type=int, default=100, help="keys K, each full")
    parser.add_argument("--rounds", type=int, default=3, help="raises per N (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'keyed.db'}"
        print(f"| waiters | keys | hand-out (median of {args.rounds}) | per waiter read |")
        print("| ---: | ---: | ---: | ---: |")
        for n in (int(s) for s in args.sizes.split(",")):
            median = statistics.median(measure(url, n, args.keys, args.rounds))
            print(f"| {n:,} | {args.keys} | {median * 1000:.1f} ms | {median / max(n, 1) * 1e6:.1f} us |")


if __name__ == "__main__":
    main()
