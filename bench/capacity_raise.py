"""A capacity raise over a long queue, at the store: N slot requests wait on a limit of capacity 0,
then ``set_capacity`` raises it to N (``SqlStore.limits.set_override``, applied 1,000 grants a
transaction). Meanwhile one thread asks for a slot of the same limit every 10 ms (each a
``RequestSlot`` then a give-up) and another reads the limits' states every 10 ms (what the
listings read), both through the same store, as an engine's API and worker share one; both record
their longest call. Prints, for each N: the raise's time, its time per
grant, and the two longest waits. SQLite file in a temporary directory.

    .venv/bin/python bench/capacity_raise.py --json bench/results/capacity_raise.json   # N = 1,000 to 100,000
    .venv/bin/python bench/capacity_raise.py --sizes 100,1000                           # a smoke run

The queue is made of requests with no run behind them (an operator's), so that building 100,000 of
them takes seconds, not the minutes 100,000 waiting runs would; the raise's own work (reading the
queue's heads, deciding, writing each grant) is the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import threading
import time
from pathlib import Path

import _support as S

from duro import Engine, Limit, define_workspace
from duro.store import GiveUpSlot, RequestSlot


def measure(url: str, n: int, probes: bool = True) -> dict[str, float]:
    engine = Engine(url, define_workspace(limits={f"lines-{n}": Limit(capacity=1, max_hold="1h")}))
    store, config = (
        engine.store,
        dataclasses.replace(engine.limit_config(f"lines-{n}"), capacity=0),
    )  # queue them all
    store.create_schema()
    for i in range(n):
        store.steps.apply(RequestSlot(config, f"q{n}-{i:06d}", None, None, None, 1000 + i, None))
    stop = threading.Event()
    longest = {"acquire": 0.0, "read": 0.0}
    ready = threading.Barrier(3)

    def loop(kind: str) -> None:
        other = store  # one store for the process, as an engine's API and worker share it
        other.limits.states()
        ready.wait()
        i = 0
        while not stop.is_set():
            started = time.perf_counter()
            if kind == "acquire":
                slot = f"probe{n}-{i}"
                other.steps.apply(RequestSlot(config, slot, None, None, None, 2_000_000 + i, None))
                other.steps.apply(GiveUpSlot(config, slot, 2_000_000 + i, None))
            else:
                other.limits.states()
            longest[kind] = max(longest[kind], time.perf_counter() - started)
            i += 1
            stop.wait(0.01)  # paced, as runs asking for slots and a health check are

    threads = [threading.Thread(target=loop, args=(kind,)) for kind in longest] if probes else []
    if not probes:
        ready = threading.Barrier(1)
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    granted = store.slots.set_override(config, "capacity", n, 5_000_000)
    raise_s = time.perf_counter() - started
    stop.set()
    for thread in threads:
        thread.join()
    engine.close()
    assert len(granted) == n, (len(granted), n)
    return {"raise_s": raise_s, "acquire_s": longest["acquire"], "read_s": longest["read"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--no-probes", action="store_true", help="the raise alone, nothing beside it")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        got = {
            n: measure(f"sqlite:///{Path(tmp) / 'raise.db'}", n, not args.no_probes)
            for n in map(int, args.sizes.split(","))
        }
    rows = [
        (n, g["raise_s"], g["raise_s"] / n * 1e6, g["acquire_s"] * 1000, g["read_s"] * 1000)
        for n, g in got.items()
    ]
    header = (
        "queued and granted",
        "raise (s)",
        "per grant (us)",
        "longest acquire meanwhile (ms)",
        "longest read meanwhile (ms)",
    )
    print(S.table(header, rows))
    S.write_json(args.json, S.environment() | {"probes": not args.no_probes, "sizes": got})


if __name__ == "__main__":
    main()
