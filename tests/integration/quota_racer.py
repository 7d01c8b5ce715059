"""One of the processes of the quota race test: many concurrent starts on a few shared keys.

Positional: url limit keys starts clients go_file. Options for the narrowed-statuses race:
``--statuses pending,running`` (the quota's count_statuses; default every unfinished status),
``--sleep 5ms`` (each run's durable sleep: it leaves ``running`` and comes back) and ``--hold-ms N``
(after the sleep, a step that keeps the run ``running`` for N ms)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from duro import Concurrency, ConcurrencyLimitError, Engine, WorkerOptions, sleep, step, workflow


@step(name="race.hold")
async def hold(ms: int) -> None:
    await asyncio.sleep(ms / 1000)


@workflow(name="race.turn")
async def turn(inp: dict) -> str:
    await sleep(inp.get("sleep", "5ms"))
    if inp.get("hold_ms"):
        await hold(inp["hold_ms"])
    return inp["key"]


async def main(
    url: str,
    limit: int,
    keys: list[str],
    starts: int,
    clients: int,
    go_file: str,
    statuses: tuple[str, ...] | None = None,
    nap: str | None = None,
    hold_ms: int = 0,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not Path(go_file).exists():  # all processes begin together
        if loop.time() > deadline:
            raise SystemExit("the go file never appeared")
        await asyncio.sleep(0.005)
    counts = {"admitted": 0, "refused": 0}
    async with Engine(url, options=WorkerOptions(poll_interval="20ms")) as engine:
        engine.register(turn)

        quota = {} if statuses is None else {"count_statuses": statuses}
        extra = {} if nap is None else {"sleep": nap, "hold_ms": hold_ms}

        async def client(offset: int) -> None:
            for i in range(starts):
                key = keys[(offset + i) % len(keys)]
                try:
                    await engine.start(
                        turn, {"key": key, **extra}, concurrency=Concurrency(key=key, limit=limit, **quota)
                    )
                    counts["admitted"] += 1
                except ConcurrencyLimitError:
                    counts["refused"] += 1
                await asyncio.sleep(0.001)

        await asyncio.gather(*(client(c) for c in range(clients)))
        while engine.worker is not None and engine.worker.live:  # let this process's runs finish
            if loop.time() > deadline + 60:
                raise SystemExit("runs did not finish")
            await asyncio.sleep(0.01)
    print(json.dumps(counts))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name in ("url", "limit", "keys", "starts", "clients", "go_file"):
        parser.add_argument(name)
    parser.add_argument("--statuses")
    parser.add_argument("--sleep")
    parser.add_argument("--hold-ms", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(
        main(
            args.url,
            int(args.limit),
            args.keys.split(","),
            int(args.starts),
            int(args.clients),
            args.go_file,
            args.statuses and tuple(args.statuses.split(",")),
            args.sleep,
            args.hold_ms,
        )
    )
