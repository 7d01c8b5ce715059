"""Workflows used by the integration tests (also imported by the crash-test worker process)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pydantic import BaseModel

from duro import Workflow, child, sleep, start_child, step, workflow


class Item(BaseModel):
    name: str
    qty: int = 1


@dataclass
class Packed:
    name: str
    boxes: int


def _journal(kind: str) -> None:
    """Append one line per real execution of a step, to count executions across processes."""
    path = os.environ.get("DURO_TEST_JOURNAL")
    if path:
        with open(path, "a") as f:
            f.write(f"{kind} {os.getpid()}\n")


@step
async def pick(item: Item) -> int:
    _journal("pick")
    return item.qty * 2


@step
def pack(name: str, count: int) -> Packed:
    _journal("pack")
    return Packed(name=name, boxes=count)


@workflow
async def fulfil(item: Item) -> Packed:
    count = await pick(item)
    packed = await pack(item.name, count)
    await sleep(os.environ.get("DURO_TEST_SLEEP", "10ms"))
    return packed


@workflow
async def double(n: int) -> int:
    return n * 2


@workflow
async def parent(n: int) -> dict:
    result = await child(double, n)
    handle = await start_child(double, n + 1)
    return {"child": result, "started": handle.id}


@workflow
class Greeter(Workflow):
    name = "greeter"
    version = "2"

    async def run(self, ctx, who: str) -> str:
        answer = await ctx.wait_for_signal("reply", timeout="5s")
        await ctx.sleep("1ms")
        return f"hello {who}: {answer}"
