"""The example's main job (what `make dev` runs): fulfil one order end to end on the embedded SQLite
store, playing the courier's webhook when the run waits for it, then print the result and steps."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from duro import Engine, WorkerOptions

HERE = Path(__file__).resolve().parent


async def main() -> int:
    engine = Engine.from_project(
        HERE,
        database_url=f"sqlite:///{HERE / '.duro' / 'dev.db'}",
        options=WorkerOptions(poll_interval="200ms"),
    )
    async with engine:
        order = {"id": "A-1001", "customer": "ada", "items": {"lamp": 1, "bulb": 4}}
        handle = await engine.start("fulfil_order", order)
        print(f"started run {handle.id} of fulfil_order")
        while await handle.status() != "suspended" or not any(
            s.kind == "signal" for s in await handle.steps()
        ):
            await asyncio.sleep(0.05)
        print("run is suspended waiting for signal 'delivered'; sending it as the courier's webhook would")
        await engine.signal(handle.id, "delivered", {"signed_by": "ada"})
        receipt = await handle.result(timeout="30s")
        print(f"\nresult: {json.dumps(receipt.__dict__)}\n")
        print(f"{'seq':>3}  {'kind':<7} {'name':<22} {'status':<10} result")
        for s in await handle.steps():
            print(f"{s.seq:>3}  {s.kind:<7} {s.name:<22} {s.status:<10} {json.dumps(s.result)}")
        child_id = (await handle.steps())[1].detail["run_id"]
        print(f"\nchild run {child_id}: {await engine.handle(child_id).result()}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
