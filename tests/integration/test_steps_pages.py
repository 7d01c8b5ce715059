"""A run's steps come a page at a time: ``engine.steps_page`` and ``GET /api/runs/{id}`` (the first
page and a cursor) with ``GET /api/runs/{id}/steps`` (the pages after it), on both stores. A sleep
last on a page is settled by the record after it, as in the whole list."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from duro import DuroError, Engine, RunNotFoundError, WorkerOptions, define_workspace, sleep, step, workflow
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine

STEPS = 25


@step
async def count(i: int) -> int:
    return i


@workflow
async def many() -> int:
    total = 0
    for i in range(STEPS):
        total += await count(i)
        if i == 9:
            await sleep("1ms")  # seq 10: last on a page of 11
    return total


@asynccontextmanager
async def served(url: str) -> AsyncIterator[tuple[Engine, httpx.AsyncClient]]:
    engine = Engine(
        url, workspace=define_workspace(workflows=[]), options=WorkerOptions(poll_interval="50ms")
    )
    engine.register(many)
    app = create_app(FixedEngine(engine))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
            yield engine, client


async def test_pages_of_steps_cover_the_run_once_in_order(database_url: str):
    async with served(database_url) as (engine, client):
        handle = await engine.start(many)
        assert await handle.result(timeout="30s") == sum(range(STEPS))
        whole = await engine.steps(handle.id)
        assert len(whole) == STEPS + 1
        pages, cursor = [], None
        while True:
            page = await engine.steps_page(handle.id, cursor, limit=11)
            pages.append(page.steps)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert [len(p) for p in pages] == [11, 11, 4]
        assert [s for p in pages for s in p] == whole  # the sleep at the end of page one settled too
        assert pages[0][-1].kind == "sleep" and pages[0][-1].status == "completed"

        first = (await client.get(f"/api/runs/{handle.id}", params={"steps_limit": 11})).json()
        assert [s["seq"] for s in first["steps"]] == list(range(11))
        more = (
            await client.get(f"/api/runs/{handle.id}/steps", params={"cursor": first["next_steps_cursor"]})
        ).json()
        assert [s["seq"] for s in more["steps"]] == list(range(11, STEPS + 1))
        assert more["next_cursor"] is None
        default = (await client.get(f"/api/runs/{handle.id}")).json()
        assert len(default["steps"]) == STEPS + 1 and default["next_steps_cursor"] is None


async def test_a_bad_cursor_or_page_size_is_refused_and_names_itself(database_url: str):
    async with served(database_url) as (engine, client):
        handle = await engine.start(many)
        await handle.result(timeout="30s")
        for cursor in ("abc", "-1", "1.5", ""):
            with pytest.raises(DuroError, match="steps cursor"):
                await engine.steps_page(handle.id, cursor)
        for limit in (0, 1001, True):
            with pytest.raises(DuroError, match="page size"):
                await engine.steps_page(handle.id, None, limit)
        with pytest.raises(RunNotFoundError):
            await engine.steps_page("nope")
        answer = await client.get(f"/api/runs/{handle.id}/steps", params={"cursor": "abc"})
        assert answer.status_code == 400 and "steps cursor 'abc'" in answer.json()["message"]
        answer = await client.get(f"/api/runs/{handle.id}", params={"steps_limit": 5000})
        assert answer.status_code == 400 and "steps_limit" in answer.json()["message"]
        assert (await client.get("/api/runs/nope/steps")).status_code == 404
