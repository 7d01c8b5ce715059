"""The pure slot hand-out (``duro._slots.hand_out``): K waiters granted at once, as a capacity raise
does. Prints the time and the time per grant for each K, medians of 5, so that the growth with K
shows (linear: the per-grant time stays flat).

    .venv/bin/python bench/hand_out.py
"""

from __future__ import annotations

import statistics
import time

from duro import _slots as slots
from duro._slots import LimitView, SlotRow

SIZES = (1_000, 8_000, 32_000, 100_000)


def once(n: int) -> float:
    view = LimitView(name="lines", capacity=n, max_hold_ms=60_000, busy=0, reserved=0, waiting=n, next_pos=n)
    heads = [
        SlotRow(
            id=f"s{i}",
            limit="lines",
            run_id=f"r{i}",
            state="waiting",
            pos=i,
            label=None,
            enqueued_at=0,
            timeout_at=None,
        )
        for i in range(n)
    ]
    decision = slots.Decision(view)
    started = time.perf_counter()
    slots.hand_out(decision, heads, 1)
    elapsed = time.perf_counter() - started
    assert len(decision.granted) == n
    return elapsed


def main() -> None:
    print("| grants | ms (median of 5) | us per grant |")
    print("| ---: | ---: | ---: |")
    for n in SIZES:
        ms = statistics.median(once(n) for _ in range(5)) * 1000
        print(f"| {n:,} | {ms:,.1f} | {ms * 1000 / n:.2f} |")


if __name__ == "__main__":
    main()
