"""A client ``Engine(url)`` with no workspace (an API process, a script) lists the limits its store
knows: those the config of a worker that started on the store declared, with their overrides and
counts, and reads and acts on them as the project's own engine does; so does a dev server app
built on it."""

from __future__ import annotations

import httpx
import pytest

from duro import DuroError, Engine, Limit, acquire_slot, define_workspace, wait_for_signal, workflow
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine
from tests.support.waiting import eventually

WORKSPACE = define_workspace(limits={"voice-calls": Limit(capacity=2, max_hold="45m")})


@workflow
async def call(inp: dict) -> str:
    slot = await acquire_slot("voice-calls")
    await wait_for_signal("done", timeout="1h")
    return slot.id


async def busy(engine: Engine) -> int:
    return sum(info.busy for info in await engine.limits.list())


async def test_a_client_engine_lists_and_acts_on_the_limits_a_worker_declared(database_url):
    client = Engine(database_url)
    assert await client.limits.list() == []  # no worker has declared any yet
    async with Engine(database_url, workspace=WORKSPACE) as worker:
        worker.register(call)
        run = await worker.start(call, {})
        await eventually(lambda: busy(client), what="the slot held")
        listed = await client.limits.list()
        assert [(i.name, i.capacity, i.max_hold, i.busy) for i in listed] == [("voice-calls", 2, "45m", 1)]
        updated = await client.limits.set_capacity("voice-calls", 5)
        assert (updated.capacity, updated.effective_capacity, updated.capacity_override) == (2, 5, 5)
        assert [slot.run_id for slot in await client.limits.slots("voice-calls")] == [run.id]
        assert (await client.limits.stats("voice-calls")).granted == 1
        with pytest.raises(
            DuroError, match=r"unknown limit 'nope' \(declared in duro.config.py: voice-calls\)"
        ):
            await client.limits.slots("nope")

        app = create_app(FixedEngine(client, run_worker=False))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as http:
                limits = (await http.get("/api/limits")).json()["limits"]
                slots = (await http.get("/api/limits/voice-calls/slots")).json()["slots"]
        assert [(limit["name"], limit["effective_capacity"]) for limit in limits] == [("voice-calls", 5)]
        assert [slot["run_id"] for slot in slots] == [run.id]

        (slot,) = await client.limits.slots("voice-calls")
        assert (await client.limits.release(slot.id)).released  # an operator's release, from the client
        assert await busy(client) == 0
        await worker.signal(run.id, "done")
        await worker.result(run.id, timeout="20s")
    await client.aclose()


async def test_a_worker_that_starts_again_with_another_config_declares_it_anew(sqlite_url):
    async with Engine(sqlite_url, workspace=WORKSPACE):
        pass
    changed = define_workspace(limits={"voice-calls": Limit(capacity=3, max_hold="10m")})
    async with Engine(sqlite_url, workspace=changed):
        pass
    client = Engine(sqlite_url)
    assert [(i.capacity, i.max_hold) for i in await client.limits.list()] == [(3, "10m")]
    await client.aclose()
