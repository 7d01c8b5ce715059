"""One of the processes of the quota race test: many concurrent starts on a few shared keys."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from duro import Concurrency, ConcurrencyLimitError, Engine, sleep, workflow


@workflow(name="race.turn")
async def turn(inp: dict) -> str:
    await sleep("5ms")
    return inp["key"]


async def main(url: str, limit: int, keys: list[str], starts: int, clients: int, go_file: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not Path(go_file).exists():  # all processes begin together
        if loop.time() > deadline:
            raise SystemExit("the go file never appeared")
        await asyncio.sleep(0.005)
    counts = {"admitted": 0, "refused": 0}
    async with Engine(url, poll_interval="20ms") as engine:
        engine.register(turn)

        async def client(offset: int) -> None:
            for i in range(starts):
                key = keys[(offset + i) % len(keys)]
                try:
                    await engine.start(turn, {"key": key}, concurrency=Concurrency(key=key, limit=limit))
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
    url, limit, keys, starts, clients, go_file = sys.argv[1:7]
    asyncio.run(main(url, int(limit), keys.split(","), int(starts), int(clients), go_file))
