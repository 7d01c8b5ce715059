"""Versions in the API: a run failed with ``NonDeterminismError`` carries both calls and the seq
(``run.error.detail``), and each workflow lists its versions with their unfinished runs, a version
the code no longer has included (``versions``). In process, over engines on one SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import httpx

from duro import Engine, WorkerOptions, sleep, step, wait_for_signal
from duro.testing import run_store_inline
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine
from duro_harness import SimulatedClock

START = datetime(2030, 1, 1, tzinfo=UTC)


@step
async def reserve(n: int) -> int:
    return n


@step
async def refund(n: int) -> int:
    return -n


async def deal_one(n: int) -> int:
    await reserve(n)
    await sleep("1h")
    return n


async def deal_changed(n: int) -> int:  # the same version, another call at seq 0: it diverges
    await refund(n)
    await sleep("1h")
    return n


async def charge(n: int) -> int:
    await reserve(n)
    await wait_for_signal("go")
    return n


def simulated_engine(url: str, clock: SimulatedClock) -> Engine:
    engine = Engine(url, clock=clock, options=WorkerOptions(poll_interval=None))
    run_store_inline(engine)
    return engine


@asynccontextmanager
async def served(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(FixedEngine(engine, run_worker=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
            yield client


async def test_a_divergence_and_the_versions_in_flight_show_in_the_api(sqlite_url):
    clock = SimulatedClock(START)
    async with simulated_engine(sqlite_url, clock) as first:
        first.register("deal", "1", deal_one)
        first.register("charge", "1", charge)
        deal = await first.start("deal", 5)
        old_charge = await first.start("charge", 1)
        await clock.advance("1m")
        assert await old_charge.status() == "suspended"
    async with simulated_engine(sqlite_url, clock) as second:
        second.register("deal", "1", deal_changed)
        second.register("charge", "2", charge)  # the code moved on: version 1 is no longer here
        await clock.advance("1h")  # the deal wakes, is replayed on the changed code, and fails
        new_charge = await second.start("charge", 2)
        await clock.advance("1m")
        assert await second.handle(deal.id).status() == "failed"
        async with served(second) as client:
            run = (await client.get(f"/api/runs/{deal.id}")).json()["run"]
            assert run["error"]["type"].endswith("NonDeterminismError")
            detail = run["error"]["detail"]
            assert detail["seq"] == 0
            assert "reserve" in detail["recorded"] and "refund" in detail["asked"]
            assert detail["recorded"] in run["error"]["message"]

            listed = (await client.get("/api/workflows")).json()["workflows"]
            versions = {wf["name"]: wf["versions"] for wf in listed}
            assert versions == {
                "charge": [
                    {"version": "2", "registered": True, "unfinished": 1},
                    {"version": "1", "registered": False, "unfinished": 1},
                ],
                "deal": [{"version": "1", "registered": True, "unfinished": 0}],
            }

            await second.signal(new_charge.id, "go")
            await clock.advance("1s")
            assert await new_charge.result() == 2
            listed = (await client.get("/api/workflows")).json()["workflows"]
            assert {wf["name"]: wf["versions"] for wf in listed}["charge"] == [
                {"version": "2", "registered": True, "unfinished": 0},
                {"version": "1", "registered": False, "unfinished": 1},
            ]
            # a run with no error has none to detail
            other = (await client.get(f"/api/runs/{old_charge.id}")).json()["run"]
            assert other["error"] is None
    async with simulated_engine(sqlite_url, clock) as both:  # versions 1 and 2 side by side
        both.register("deal", "1", deal_changed)
        both.register("charge", "1", charge)
        both.register("charge", "2", charge)
        async with served(both) as client:
            listed = (await client.get("/api/workflows")).json()["workflows"]
            assert {wf["name"]: wf["versions"] for wf in listed}["charge"] == [
                {"version": "2", "registered": True, "unfinished": 0},
                {"version": "1", "registered": True, "unfinished": 1},
            ]


async def test_a_start_over_http_may_name_a_registered_version(sqlite_url):
    clock = SimulatedClock(START)
    async with simulated_engine(sqlite_url, clock) as both:
        both.register("charge", "1", charge)
        both.register("charge", "2", charge)
        async with served(both) as client:
            newest = (await client.post("/api/workflows/charge/runs", json={"input": 1})).json()
            pinned = (
                await client.post("/api/workflows/charge/runs", json={"input": 2, "version": "1"})
            ).json()
            assert (newest["run"]["version"], pinned["run"]["version"]) == ("2", "1")
            missing = await client.post("/api/workflows/charge/runs", json={"input": 3, "version": "9"})
            assert missing.status_code == 422 and "no version '9' here" in missing.json()["message"]
