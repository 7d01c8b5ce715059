"""The app driven over HTTP inside ``duro_env``: requests go through ``httpx.ASGITransport`` to the
app built on the harness's engine, and time is simulated, so a call that waits 30 minutes for a line
takes no time. What the provider would do (end a call, send its webhook) the tests do by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest

HERE = Path(__file__).resolve().parent.parent
ONE_LINE = pytest.mark.duro(config={"limits": {"phone-lines": {"capacity": 1, "max_hold": "45m"}}})


def load_app() -> ModuleType:
    """``app.py`` as ``uvicorn app:create_app`` imports it: from the project folder, which also
    holds the ``workflows`` package the app imports its models from."""
    for name in [n for n in sys.modules if n == "workflows" or n.startswith("workflows.")]:
        del sys.modules[name]  # another example's workflows package, imported earlier in this run
    sys.path.insert(0, str(HERE))
    try:
        spec = importlib.util.spec_from_file_location("fastapi_chat_app", HERE / "app.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(HERE))


def client_of(duro_env) -> httpx.AsyncClient:
    app = load_app().create_app(engine=duro_env.engine)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app")


def call(tenant: str, call_id: str) -> dict[str, str]:
    return {"tenant": tenant, "call_id": call_id, "to": "+15550100"}


async def line_holder(duro_env) -> list[str | None]:
    """The calls (by their slot's label, the call id) holding a phone line."""
    return [s.label for s in await duro_env.engine.limits.slots("phone-lines") if s.state != "waiting"]


async def line_queue(duro_env) -> list[str | None]:
    """The calls waiting for a phone line, in queue order."""
    return [s.label for s in await duro_env.engine.limits.slots("phone-lines") if s.state == "waiting"]


async def test_a_tenants_third_call_is_refused_with_the_quotas_retry_after(duro_env):
    async with client_of(duro_env) as client:
        for call_id in ("a", "b"):
            assert (await client.post("/calls", json=call("acme", call_id))).status_code == 202
        refused = await client.post("/calls", json=call("acme", "c"))
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "30"
        assert refused.json()["retry_after"] == 30
        assert refused.json()["key"] == "tenant:acme"
        # another tenant is not held up by acme's quota
        assert (await client.post("/calls", json=call("globex", "d"))).status_code == 202
    assert len(await duro_env.engine.list_runs(workflow="place_call")) == 3


@ONE_LINE
async def test_the_providers_webhook_gives_the_line_to_the_next_caller(duro_env):
    async with client_of(duro_env) as client:
        first = (await client.post("/calls", json=call("acme", "a"))).json()["run_id"]
        second = (await client.post("/calls", json=call("globex", "b"))).json()["run_id"]
        await duro_env.run_until_idle()
        assert await line_holder(duro_env) == ["a"]
        assert await line_queue(duro_env) == ["b"]

        await duro_env.advance("3m")  # a three-minute call; the provider says it ended
        [slot] = [s for s in await duro_env.engine.limits.slots("phone-lines") if s.label == "a"]
        ended = {"run_id": first, "slot_id": slot.id, "seconds": 180}
        assert (await client.post("/webhooks/call-ended", json=ended)).status_code == 202
        assert (await client.post("/webhooks/call-ended", json=ended)).status_code == 202  # a retry
        await duro_env.run_until_idle()

        assert (await client.get(f"/calls/{first}")).json() == {
            "run_id": first,
            "status": "completed",
            "seconds": 180,
        }
        assert await line_holder(duro_env) == ["b"]
        assert (await client.get(f"/calls/{second}")).json()["status"] == "suspended"  # on the line
    assert len(await duro_env.engine.list_runs(workflow="call_ended")) == 1


@ONE_LINE
async def test_a_cancelled_call_gives_its_line_to_the_next_caller_at_once(duro_env):
    async with client_of(duro_env) as client:
        first = (await client.post("/calls", json=call("acme", "a"))).json()["run_id"]
        await client.post("/calls", json=call("globex", "b"))
        await duro_env.run_until_idle()
        assert await line_holder(duro_env) == ["a"]

        assert (await client.delete(f"/calls/{first}")).status_code == 202  # the caller gave up
        await duro_env.run_until_idle()  # no time passes: the line is not left to max_hold

        assert (await client.get(f"/calls/{first}")).json()["status"] == "cancelled"
        assert await line_holder(duro_env) == ["b"]
        steps = {(s.name, s.status) for s in await duro_env.handle(first).steps()}
        assert ("hang_up", "completed") in steps
        assert not {status for _, status in steps} & {"waiting", "running"}  # nothing left open


async def test_an_unknown_call_is_a_404_and_a_bad_request_a_422(duro_env):
    async with client_of(duro_env) as client:
        missing = await client.get("/calls/run-nope")
        assert missing.status_code == 404
        assert "run-nope" in missing.json()["message"]
        assert (await client.delete("/calls/run-nope")).status_code == 404
        bad = await client.post("/calls", json={"tenant": "acme", "call_id": "a", "to": "555"})
        assert bad.status_code == 422  # FastAPI's own check of the body, before duro is asked
    assert await duro_env.engine.list_runs() == []


async def test_the_apps_own_model_is_taken_when_started_in_code(duro_env):
    """The app imported ``workflows.calls`` before the engine loaded the project: its own
    ``CallRequest`` is still the workflow's input type."""
    app_module = load_app()
    app_module.create_app(engine=duro_env.engine)
    request = sys.modules["workflows.calls"].CallRequest(tenant="acme", call_id="a", to="+15550100")
    run = await duro_env.engine.start("place_call", request)
    await duro_env.run_until_idle()
    assert await line_holder(duro_env) == ["a"]
    assert (await duro_env.engine.get_run(run.id)).status == "suspended"  # on the line: waits for "ended"
