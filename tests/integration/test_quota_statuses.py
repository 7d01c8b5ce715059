"""Narrowed ``count_statuses``: runs that leave the counted statuses and come back are not checked again,
so the counted set exceeds the limit by exactly their number (docs/quotas.md, "Narrowed statuses:
what the count means"). Simulated time: the same numbers every time."""

from __future__ import annotations

import asyncio

import pytest

from duro import Concurrency, ConcurrencyLimitError, sleep, step, workflow

pytestmark = pytest.mark.duro(project="tests/integration/harness_project")

LIMIT = 1
COUNTED = ("pending", "running")
KEY = "tenant:acme"


async def test_limit_1_reaches_3_when_two_suspended_runs_come_back(duro_env):
    release = asyncio.Event()

    @step
    async def hold(name: str) -> str:
        await release.wait()  # keeps the run `running` (counted) until the test lets go
        return name

    @workflow(concurrency=Concurrency(key=lambda inp: KEY, limit=LIMIT, count_statuses=COUNTED))
    async def turn(inp: dict) -> str:
        if inp["nap"]:
            await sleep("1h")  # `suspended`: not counted while asleep
        return await hold(inp["name"])

    async def counted() -> int:
        return len(await duro_env.engine.list_runs(status=COUNTED, tag=f"concurrency:{KEY}"))

    async def refused() -> ConcurrencyLimitError:
        with pytest.raises(ConcurrencyLimitError) as info:
            await duro_env.start(turn, {"name": "d", "nap": False})
        return info.value

    a = await duro_env.start(turn, {"name": "a", "nap": True})
    await duro_env.run_until_idle()
    b = await duro_env.start(turn, {"name": "b", "nap": True})  # a is asleep: 0 counted, admitted
    await duro_env.run_until_idle()
    c = await duro_env.start(turn, {"name": "c", "nap": False})  # a and b asleep: admitted, never leaves
    await duro_env.run_until_idle()
    assert [await duro_env.status(r) for r in (a, b, c)] == ["suspended", "suspended", "running"]
    assert await counted() == 1
    err = await refused()  # while every counted run is one that never left, the limit holds
    assert (err.limit, err.active) == (1, 1)

    await duro_env.advance("1h")  # a and b wake: back to `running`, no check on the way back
    assert [await duro_env.status(r) for r in (a, b, c)] == ["running", "running", "running"]
    came_back = 2  # a and b
    assert await counted() == 3 == LIMIT + came_back  # limit 1 reached 3: the documented bound, exactly
    err = await refused()
    assert (err.limit, err.active) == (1, 3)

    release.set()
    await duro_env.run_until_idle()
    assert [await r.result() for r in (a, b, c)] == ["a", "b", "c"]
    assert await counted() == 0
    assert len(await duro_env.engine.list_runs(tag=f"concurrency:{KEY}")) == 3  # d was never created
