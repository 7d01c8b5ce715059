"""Rates on a real engine, on SQLite and PostgreSQL: the window's promise judged by the store's
clock, runs that leave memory while they wait and are woken by their grant, and a client engine
without the project that lists and pauses the rate."""

from __future__ import annotations

import pytest

from duro import Engine, WorkerOptions, acquire_rate, define_workspace, workflow

RATES = {"partner-api": {"limit": 2, "per": "1s"}}


@workflow(name="rates.real")
async def real(job: str) -> int:
    grant = await acquire_rate("partner-api", timeout="1m")
    return int(grant.granted_at.timestamp() * 1000)


@pytest.mark.parametrize("evict_after", [None, 0], ids=["resident", "evicted"])
async def test_no_window_of_a_second_holds_more_than_two_grants(database_url, evict_after):
    engine = Engine(
        database_url,
        workspace=define_workspace(rates=RATES),
        options=WorkerOptions(evict_after=evict_after),
    )
    engine.register(real)
    async with engine:
        runs = [await engine.start("rates.real", f"job{n}") for n in range(6)]
        granted = [await run.result(timeout="30s") for run in runs]
        infos = {i.name: i for i in await engine.rates.list()}
    granted.sort()  # runs ask in the order they are claimed, not started: the harness shows start order
    for at in granted:
        assert sum(1 for other in granted if at <= other < at + 1000) <= 2
    assert granted[-1] - granted[0] >= 2000  # six grants of two a second: three windows
    assert infos["partner-api"].waiting == 0


async def test_a_client_engine_lists_and_pauses_a_rate_it_does_not_declare(database_url):
    worker = Engine(database_url, workspace=define_workspace(rates=RATES))
    worker.register(real)
    async with worker:
        client = Engine(database_url)
        try:
            (info,) = [i for i in await client.rates.list() if i.name == "partner-api"]
            assert (info.limit, info.per) == (2, "1s")
            paused = await client.rates.pause("partner-api", "2s")
            assert paused.paused_until is not None
            run = await worker.start("rates.real", "held")
            granted = await run.result(timeout="30s")
            assert granted >= int(paused.paused_until.timestamp() * 1000)
        finally:
            await client.aclose()
