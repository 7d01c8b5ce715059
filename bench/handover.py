"""A slot handed to a waiter that left memory, against one still resident, on SQLite.

The case is bench/limits.py's ``latency_queue`` (a holder, a queue of ``--handoffs`` one-shot
waiters behind a capacity-1 limit, the holder releases and each waiter releases in turn; the
latency is each release to the next acquire, as the runs record them), run with waiting runs
resident (``max_resident_runs`` 10,000) and with every waiter unloaded while it queues
(``max_resident_runs=0``: the release takes the unloaded head up itself, and the worker replays it).
Rounds alternate which goes first; medians of the rounds' medians.

    .venv/bin/python bench/handover.py                       # --rounds 5 --handoffs 50 --window 2
    .venv/bin/python bench/handover.py --json bench/results/handover.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import limits  # noqa: E402 - bench/limits.py, next to this file


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--handoffs", type=int, default=50)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    forms = {"resident": 10_000, "unloaded": 0}
    samples: dict[str, list[dict]] = {form: [] for form in forms}
    for rnd in range(args.rounds):
        for form in forms if rnd % 2 == 0 else reversed(forms):
            with tempfile.TemporaryDirectory() as tmp:
                url = f"sqlite:///{Path(tmp) / 'h.db'}"
                result = await limits.case_latency_queue(url, "1s", args.handoffs, args.window, forms[form])
            samples[form].append(result)
            print(
                f"round {rnd + 1} {form:8} median {result['median_ms']:.3f} ms, p99 {result['p99_ms']:.3f} ms"
            )
    summary = {
        form: {
            "median_ms": statistics.median(s["median_ms"] for s in samples[form]),
            "p99_ms": statistics.median(s["p99_ms"] for s in samples[form]),
        }
        for form in forms
    }
    ratio = summary["unloaded"]["median_ms"] / summary["resident"]["median_ms"]
    print(
        f"release-to-resume, median of {args.rounds} rounds: resident {summary['resident']['median_ms']:.3f} ms, "
        f"unloaded {summary['unloaded']['median_ms']:.3f} ms ({ratio:.2f}x)"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "ratio": ratio, "samples": samples}, indent=2) + "\n"
        )


if __name__ == "__main__":
    asyncio.run(main())
