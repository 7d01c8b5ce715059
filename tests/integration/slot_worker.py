"""A worker process for the slot fault test: executes ``call`` runs that hold a slot of "lines"."""

from __future__ import annotations

import asyncio
import random
import sys

from duro import Engine, Limit, WorkerOptions, acquire_slot, define_workspace, release_slot, sleep, workflow

WORKSPACE = define_workspace(limits={"lines": Limit(capacity=2, max_hold="3s")})


@workflow(name="call")
async def call(n: int) -> int:
    slot = await acquire_slot("lines", label=f"call-{n}", timeout="5m")
    await sleep(f"{random.randint(50, 250)}ms")
    if n % 7 != 3:  # every seventh call forgets its slot: max_hold takes it back
        await release_slot(slot.id)
    return n


async def main(url: str) -> None:
    async with Engine(
        url, workspace=WORKSPACE, options=WorkerOptions(poll_interval="50ms", lease="2s")
    ) as engine:
        engine.register(call)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
