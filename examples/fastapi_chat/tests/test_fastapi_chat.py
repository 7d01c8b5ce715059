"""The FastAPI chat app over HTTP: served by uvicorn in this process on a free port (so its lifespan,
and the engine's worker that executes the turns, runs as in production) and driven with httpx: the
per-tenant quota's 429, turns completing, /metrics, and the engine around the app's own lifespan."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from prometheus_client.parser import text_string_to_metric_families

APP_FILE = Path(__file__).resolve().parent.parent / "app.py"


@pytest.fixture(scope="module")
def chat_app() -> ModuleType:
    """The example's ``app.py`` (a script beside the project, not a package), imported as
    ``uvicorn app:create_app`` does: from the project folder, which holds the ``workflows`` package
    it imports its models from."""
    for name in [n for n in sys.modules if n == "workflows" or n.startswith("workflows.")]:
        del sys.modules[name]  # another example's workflows package, imported earlier in this run
    sys.path.insert(0, str(APP_FILE.parent))
    try:
        spec = importlib.util.spec_from_file_location("fastapi_chat_app", APP_FILE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(APP_FILE.parent))


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'chat.db'}"


@asynccontextmanager
async def serving(app: Any, timeout: float = 20.0) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` served by uvicorn on a free port of 127.0.0.1 (its lifespan run by the server), and an
    httpx client of it; the server shuts down (the lifespan's exit included) when the block ends."""
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        serve = asyncio.create_task(server.serve(sockets=[sock]))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not server.started and not serve.done():
            assert loop.time() < deadline, f"uvicorn did not start within {timeout}s"
            await asyncio.sleep(0.01)
        if not server.started:
            await serve
            raise AssertionError("the app did not start: its lifespan failed (see the uvicorn.error log)")
        try:
            port = sock.getsockname()[1]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout) as client:
                yield client
        finally:
            server.should_exit = True
            await asyncio.wait_for(serve, timeout)


def turn(tenant: str, message: str = "hello", conversation: str = "c1") -> dict[str, str]:
    return {"tenant": tenant, "conversation": conversation, "message": message}


async def scrape(
    client: httpx.AsyncClient,
) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """``GET /metrics``: its text, and each sample's value by name and labels."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return response.text, found


STARTED = ("duro_runs_started_total", (("workflow", "chat_turn"),))
REFUSED = ("duro_quota_refused_total", (("workflow", "chat_turn"),))
COMPLETED = ("duro_runs_finished_total", (("status", "completed"), ("workflow", "chat_turn")))


async def test_turns_run_under_each_tenants_quota_and_metrics_count_them(chat_app, database_url):
    async with serving(chat_app.create_app(database_url)) as client:
        booking = await client.post("/turns", json=turn("initech", "please book a room"))
        assert booking.status_code == 202
        booking_id = booking.json()["run_id"]

        # initech's plan allows one turn at once, and the booking waits for its confirmation
        refused = await client.post("/turns", json=turn("initech"))
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        body = {
            "error": "concurrency_limit",
            "message": "workflow 'chat_turn' refused: concurrency key 'tenant:initech' has 1 active "
            "run(s) and its limit is 1; retry when one of them finishes",
            "workflow": "chat_turn",
            "key": "tenant:initech",
            "limit": 1,
            "active": 1,
            "retry_after": 1,  # no turn of initech has completed yet: nothing to estimate from
        }
        assert refused.content == json.dumps(body).encode()  # the dev server's bytes, in its order

        # another tenant is not affected, and its turn completes
        other = await client.post("/turns", json=turn("globex"))
        assert other.status_code == 202
        other_id = other.json()["run_id"]
        done = await client.get(f"/turns/{other_id}", params={"wait": 20})
        assert done.json() == {
            "run_id": other_id,
            "status": "completed",
            "reply": "echo: hello",
            "tools_used": [],
            "error": None,
        }

        # confirming the booking ends it, and frees initech's place
        assert (await client.post(f"/turns/{booking_id}/confirm")).status_code == 202
        booked = (await client.get(f"/turns/{booking_id}", params={"wait": 20})).json()
        assert (booked["status"], booked["tools_used"]) == ("completed", ["room held for c1"])
        again = await client.post("/turns", json=turn("initech"))
        assert again.status_code == 202
        ended = await client.get(f"/turns/{again.json()['run_id']}", params={"wait": 20})
        assert ended.json()["status"] == "completed"

        # a run's end is counted when its event is published, just after the end is committed (what
        # the turn's wait saw): the last turn's may be a loop turn behind
        text, found = await scrape_until(client, lambda found: found.get(COMPLETED) == 3)
        assert (found[STARTED], found[REFUSED], found[COMPLETED]) == (3, 1, 3)
        assert "initech" not in text and "globex" not in text and "tenant:" not in text
        assert booking_id not in text and other_id not in text


async def scrape_until(
    client: httpx.AsyncClient, ready: Any, seconds: float = 10.0
) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """``scrape`` again until ``ready(found)`` holds, at most ``seconds``; the last scrape either way."""
    deadline = asyncio.get_running_loop().time() + seconds
    text, found = await scrape(client)
    while not ready(found) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
        text, found = await scrape(client)
    return text, found


async def test_a_refused_turn_creates_nothing_and_is_counted_once(chat_app, database_url):
    app = chat_app.create_app(database_url)
    async with serving(app) as client:
        assert (await client.post("/turns", json=turn("acme", "book it"))).status_code == 202
        for _ in range(3):
            assert (await client.post("/turns", json=turn("acme"))).status_code == 429
        _, found = await scrape(client)
        assert (found[STARTED], found[REFUSED]) == (1, 3)
        assert len(await app.state.engine.list_runs()) == 1


async def test_an_unknown_turn_is_a_404_and_a_bad_body_a_422(chat_app, database_url):
    async with serving(chat_app.create_app(database_url)) as client:
        assert (await client.get("/turns/run-nope")).status_code == 404
        assert (await client.post("/turns/run-nope/confirm")).status_code == 404
        assert (await client.post("/turns", json={"tenant": "acme"})).status_code == 422


async def test_the_engine_runs_around_the_apps_own_lifespan(chat_app, database_url):
    seen: list[tuple[str, bool]] = []

    @asynccontextmanager
    async def own(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        seen.append(("app starts; engine running", app.state.engine.worker is not None))
        yield {"greeting": "hi"}
        seen.append(("app stops; engine running", app.state.engine.worker is not None))

    app = chat_app.create_app(database_url, lifespan=own)

    @app.get("/greeting")
    async def greeting(request: Request) -> dict[str, str]:
        return {"greeting": request.state.greeting}

    async with serving(app) as client:
        assert (await client.get("/greeting")).json() == {"greeting": "hi"}  # the app's state
        started = await client.post("/turns", json=turn("acme"))
        assert started.status_code == 202
        done = await client.get(f"/turns/{started.json()['run_id']}", params={"wait": 20})
        assert done.json()["status"] == "completed"
    assert seen == [("app starts; engine running", True), ("app stops; engine running", True)]
    assert app.state.engine.worker is None  # stopped after the app's own lifespan ended
