"""Prefect's global-concurrency-limit acquire+release pair, the peer of duro's uncontended slot pairs.

Run by bench/limits.py in Prefect's own virtual environment (bench/.venvs/prefect, made by
``make bench-peers``), never in duro's:

    bench/.venvs/prefect/bin/python bench/peers/prefect_pairs.py --runs 1,8 --window 2

Prefect 3 as it runs locally by default: no PREFECT_API_URL, so the client starts Prefect's temporary
(ephemeral) API server on its SQLite database, here under a fresh PREFECT_HOME in a temporary
directory (set before prefect is imported). A global concurrency limit "bench" with 8 slots is
created through the client; then, for each count in ``--runs`` (one server for all), that many
asyncio tasks each loop ``async with
concurrency("bench", occupy=1, strict=True): pass`` (prefect.concurrency.asyncio: acquire a slot
with a lease, release it on exit) until the window is over. pairs/s = pairs / (last loop end -
first loop start). 20 untimed pairs warm the server first. Prints one JSON line: {runs: figures}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from typing import Any

WARMUP = 20


async def bench(counts: list[int], window: float) -> dict:
    import prefect
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.concurrency.asyncio import concurrency

    async with get_client() as client:
        await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name="bench", limit=8))
    for _ in range(WARMUP):
        async with concurrency("bench", occupy=1, strict=True):
            pass
    out = {}
    for runs in counts:
        out[str(runs)] = await _pairs(concurrency, runs, window) | {"prefect": prefect.__version__}
    return out


async def _pairs(concurrency: Any, runs: int, window: float) -> dict:
    spans: list[tuple[float, float, int]] = []

    async def loop(deadline: float) -> None:
        begin, done = time.perf_counter(), 0
        while time.perf_counter() < deadline:
            async with concurrency("bench", occupy=1, strict=True):
                pass
            done += 1
        spans.append((begin, time.perf_counter(), done))

    deadline = time.perf_counter() + window
    await asyncio.gather(*(loop(deadline) for _ in range(runs)))
    pairs = sum(n for _, _, n in spans)
    span = max(e for _, e, _ in spans) - min(b for b, _, _ in spans)
    return {"value": pairs / span, "n": pairs, "window_s": span, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="1,8", help="comma list of task counts (1,8)")
    parser.add_argument("--window", type=float, default=2.0)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="duro-bench-prefect-")
    os.environ["PREFECT_HOME"] = home
    os.environ.pop("PREFECT_API_URL", None)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # a loaded 2-core box can take longer than the default 20 s to bring the temporary server up
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    try:
        print(json.dumps(asyncio.run(bench([int(n) for n in args.runs.split(",")], args.window))), flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
