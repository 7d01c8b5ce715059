"""Workflows for the harness's own tests."""

import time
from datetime import UTC, datetime

from duro import sleep, step, wait_for_signal, workflow

CALLS: list[str] = []


@step
def read_wall_clock() -> dict:
    return {"datetime": datetime.now(UTC).isoformat(), "time": time.time()}


@step
async def record(label: str) -> str:
    CALLS.append(label)
    return label


@workflow
async def nap(days: int) -> str:
    await sleep(f"{days}d")
    return "rested"


@workflow
async def wall_clock(n: int) -> dict:
    await sleep("1h")
    return await read_wall_clock()


@workflow
async def chain(n: int) -> list:
    first = await wait_for_signal("go", timeout="10m")
    await record(f"{n}:after-timeout")
    await sleep("5m")
    await record(f"{n}:after-sleep")
    return [first, "slept"]


@workflow
async def hourly(hours: int) -> int:
    for _ in range(hours):
        await sleep("1h")
    return hours
