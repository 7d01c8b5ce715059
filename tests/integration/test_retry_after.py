"""A refused start says when to try again: ``ConcurrencyLimitError.retry_after`` is the quota's own
``retry_after``, or duro's estimate from how long the key's last completed runs lasted (their median
shared by the runs holding the quota, between 1 s and 5 minutes); the dev server's 429 and
``duro.contrib.starlette.on_concurrency_limit`` send it as ``Retry-After`` and ``retry_after``."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from duro import Concurrency, ConcurrencyLimitError, sleep, workflow
from duro.contrib.starlette import on_concurrency_limit
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine


@workflow(concurrency=Concurrency(key=lambda inp: f"tenant:{inp['tenant']}", limit=2))
async def call(inp: dict) -> None:
    await sleep(inp["lasts"])


@workflow(concurrency=Concurrency(key=lambda inp: "fixed", limit=1, retry_after="45s"))
async def fixed(inp: dict) -> None:
    await sleep("1h")


async def refusal(start) -> ConcurrencyLimitError:
    with pytest.raises(ConcurrencyLimitError) as refused:
        await start
    return refused.value


async def test_the_estimate_follows_how_long_the_keys_runs_lasted(duro_env):
    for _ in range(2):
        await duro_env.start(call, {"tenant": "acme", "lasts": "60s"})
    first = await refusal(duro_env.start(call, {"tenant": "acme", "lasts": "60s"}))
    assert first.retry_after == 1  # nothing completed yet: nothing to estimate from
    await duro_env.advance("61s")  # both completed, each after 60 s
    for _ in range(2):
        await duro_env.start(call, {"tenant": "acme", "lasts": "60s"})
    refused = await refusal(duro_env.start(call, {"tenant": "acme", "lasts": "60s"}))
    assert (refused.active, refused.retry_after) == (2, 30)  # 60 s shared by the two holding it
    other = await refusal(duro_env.start(call, {"tenant": "acme"}, concurrency=Concurrency("tenant:acme", 1)))
    assert other.retry_after == 60  # a per-start quota of 1 on the same key: one run to wait for


async def test_the_estimate_never_says_more_than_5_minutes(duro_env):
    for _ in range(2):
        await duro_env.start(call, {"tenant": "slow", "lasts": "2h"})
    await duro_env.advance("2h")
    for _ in range(2):
        await duro_env.start(call, {"tenant": "slow", "lasts": "2h"})
    assert (await refusal(duro_env.start(call, {"tenant": "slow", "lasts": "2h"}))).retry_after == 300


async def test_the_quotas_own_retry_after_wins_and_reaches_both_429s(duro_env):
    await duro_env.start(fixed, {})
    assert (await refusal(duro_env.start(fixed, {}))).retry_after == 45
    per_start = Concurrency(key="fixed", limit=1, retry_after="2m")
    assert (await refusal(duro_env.start(call, {"lasts": "1s"}, concurrency=per_start))).retry_after == 120

    async def start(request: Request) -> Response:
        await duro_env.engine.start(fixed, {})
        return Response(status_code=202)

    app = Starlette(
        routes=[Route("/calls", start, methods=["POST"])],
        exception_handlers={ConcurrencyLimitError: on_concurrency_limit},
    )
    dev_app = create_app(FixedEngine(duro_env.engine, run_worker=False))
    async with dev_app.router.lifespan_context(dev_app):
        async with (
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as ours,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=dev_app), base_url="http://dev") as dev,
        ):
            answers = [
                await ours.post("/calls"),
                await dev.post(f"/api/workflows/{fixed.name}/runs", json={"input": {}}),
            ]
    for answer in answers:
        assert answer.status_code == 429
        assert answer.headers["retry-after"] == "45"
        assert answer.json()["retry_after"] == 45
