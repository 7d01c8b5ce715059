"""The API's limit figures (``GET /api/limits/{name}/history`` → ``last_hour``) and queue marks
(``queued_for`` on the runs list and a run's page): in process over the harness's simulated clock,
where every figure is exact, and from a real ``duro dev``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from duro import Engine, SlotTimeoutError, acquire_slot, release_slot, wait_for_signal, workflow
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine
from tests.support.devserver import DevServer
from tests.support.waiting import wait_until

LIMIT = "voice-calls"  # capacity 1, max hold 45 m (tests/integration/harness_project)
EMPTY = {
    "granted": 0,
    "wait_p50_s": None,
    "wait_p90_s": None,
    "wait_p99_s": None,
    "expired": 0,
    "timed_out": 0,
}


@workflow
async def call(inp: dict) -> dict:
    """Take a slot, work until "done" (or ``work``), then release it unless told to keep it."""
    try:
        slot = await acquire_slot(LIMIT, label=inp["label"], timeout=inp.get("timeout", "24h"))
    except SlotTimeoutError:
        return {"slot": None}
    await wait_for_signal("done", timeout=inp.get("work", "2h"))
    released = None if inp.get("keep") else (await release_slot(slot.id)).released
    return {"slot": slot.id, "released": released}


@asynccontextmanager
async def served(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    """The dev server's app over ``engine`` (the harness drives its runs and its clock)."""
    app = create_app(FixedEngine(engine, run_worker=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
            yield client


async def last_hour(client: httpx.AsyncClient) -> dict:
    answer = await client.get(f"/api/limits/{LIMIT}/history", params={"minutes": 5})
    assert answer.status_code == 200, answer.text
    return answer.json()["last_hour"]


async def queued(client: httpx.AsyncClient) -> dict[str, str | None]:
    answer = await client.get("/api/runs")
    assert answer.status_code == 200, answer.text
    return {run["id"]: run["queued_for"] for run in answer.json()["runs"]}


@pytest.mark.duro(project="tests/integration/harness_project")
async def test_last_hour_and_queue_marks_follow_real_slots(duro_env):
    async with served(duro_env.engine) as client:
        assert await last_hour(client) == EMPTY
        first = await duro_env.start(call, {"label": "first"})
        second = await duro_env.start(call, {"label": "second", "keep": True, "work": "3h"})
        impatient = await duro_env.start(call, {"label": "impatient", "timeout": "10m"})
        await duro_env.run_until_idle()
        assert await queued(client) == {first.id: None, second.id: LIMIT, impatient.id: LIMIT}
        detail = (await client.get(f"/api/runs/{second.id}")).json()
        assert detail["run"]["queued_for"] == LIMIT

        await duro_env.advance("10m")  # impatient gives up; first releases, second gets the slot
        await first.signal("done")
        await duro_env.run_until_idle()
        assert await queued(client) == {first.id: None, second.id: None, impatient.id: None}
        assert await last_hour(client) == {
            "granted": 2,
            "wait_p50_s": 0.0,
            "wait_p90_s": 600.0,
            "wait_p99_s": 600.0,
            "expired": 0,
            "timed_out": 1,
        }
        await duro_env.advance("45m")  # second never releases: max_hold takes its slot back
        assert (await last_hour(client))["expired"] == 1
        await duro_env.advance("2h")
        assert await last_hour(client) == EMPTY

        unknown = await client.get("/api/limits/nope/history")
        assert unknown.status_code == 404 and "nope" in unknown.json()["message"]


def test_a_live_dev_server_marks_the_queued_run_and_counts_the_grants(dev_server: DevServer):
    """tests/e2e/project: ``partner-api`` has one slot; ``hold`` keeps it until the signal "done"."""
    with dev_server.client() as client:
        holder = client.post("/api/workflows/hold/runs", json={"input": {"tenant": "a", "job": "1"}})
        waiter = client.post("/api/workflows/hold/runs", json={"input": {"tenant": "b", "job": "2"}})
        holder_id, waiter_id = holder.json()["run"]["id"], waiter.json()["run"]["id"]

        def marks() -> dict[str, str | None]:
            return {run["id"]: run["queued_for"] for run in client.get("/api/runs").json()["runs"]}

        wait_until(lambda: marks() == {holder_id: None, waiter_id: "partner-api"}, 15, "the waiter queued")
        figures = client.get("/api/limits/partner-api/history").json()["last_hour"]
        assert (figures["granted"], figures["expired"], figures["timed_out"]) == (1, 0, 0)
        assert figures["wait_p50_s"] is not None and figures["wait_p50_s"] >= 0

        assert client.post(f"/api/runs/{holder_id}/signals/done", json=None).status_code == 202
        wait_until(lambda: marks()[waiter_id] is None, 15, "the waiter granted")
        figures = wait_until(
            lambda: (
                (f := client.get("/api/limits/partner-api/history").json()["last_hour"])["granted"] == 2 and f
            ),
            15,
            "two grants in the last hour",
        )
        assert 0 <= figures["wait_p50_s"] <= figures["wait_p90_s"] == figures["wait_p99_s"]
        assert (figures["expired"], figures["timed_out"]) == (0, 0)
