"""duro.contrib.starlette: the lifespan that runs an engine for a Starlette app's lifetime (alone and
around the app's own), the 429 handler that answers as the dev server does, and the error that names
the extra when starlette is not installed. Apps are served by uvicorn in this process on a free port
(the server runs their lifespan, state included) and driven over HTTP with httpx."""

from __future__ import annotations

import asyncio
import importlib
import json
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.abc import MetaPathFinder
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from duro import Concurrency, ConcurrencyLimitError, DuroError, Engine, wait_for_signal, workflow
from duro.contrib.starlette import (
    concurrency_limit_body,
    duro_lifespan,
    on_concurrency_limit,
)
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine


@workflow(concurrency=Concurrency(key=lambda inp: f"tenant:{inp['tenant']}", limit=1))
async def turn(inp: dict) -> str:
    if inp.get("wait"):
        await wait_for_signal("done", timeout="1h")
    return f"reply to {inp['tenant']}"


@pytest.fixture
def engine(sqlite_url: str) -> Engine:
    engine = Engine(sqlite_url)
    engine.register(turn)
    return engine


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


def turns_app(engine: Engine, lifespan: Any = None, worker: bool = True) -> Starlette:
    """``POST /turns`` starts a run of ``turn``; ``GET /turns/{id}`` waits (20 s at most) for its result."""

    async def start(request: Request) -> Response:
        handle = await engine.start(turn, await request.json())
        return JSONResponse({"run_id": handle.id}, status_code=202)

    async def result(request: Request) -> Response:
        return JSONResponse({"result": await engine.result(request.path_params["run_id"], timeout="20s")})

    async def state(request: Request) -> Response:
        return JSONResponse({"greeting": getattr(request.state, "greeting", None)})

    async def dispatch(request: Request) -> Response:  # the current engine, found by the workflow
        return JSONResponse({"run_id": await turn.dispatch(await request.json())}, status_code=202)

    return Starlette(
        routes=[
            Route("/turns", start, methods=["POST"]),
            Route("/turns/{run_id}", result),
            Route("/state", state),
            Route("/dispatch", dispatch, methods=["POST"]),
        ],
        lifespan=duro_lifespan(engine, worker=worker)
        if lifespan is None
        else duro_lifespan(engine, lifespan, worker=worker),
        exception_handlers={ConcurrencyLimitError: on_concurrency_limit},
    )


async def test_the_engine_and_its_worker_run_for_the_apps_lifetime(engine):
    assert engine.worker is None
    async with serving(turns_app(engine)) as client:
        assert engine.worker is not None
        started = await client.post("/turns", json={"tenant": "acme"})
        assert started.status_code == 202
        done = await client.get(f"/turns/{started.json()['run_id']}")
        assert done.json() == {"result": "reply to acme"}
        assert (await client.get("/state")).json() == {"greeting": None}
    assert engine.worker is None


async def test_the_engine_is_up_around_the_apps_own_lifespan_and_its_state_passes_through(engine):
    seen: list[tuple[str, bool]] = []

    @asynccontextmanager
    async def own(app: Starlette) -> AsyncIterator[dict[str, str]]:
        seen.append(("own starts", engine.worker is not None))
        yield {"greeting": "hi"}
        seen.append(("own ends", engine.worker is not None))

    async with serving(turns_app(engine, own)) as client:
        seen.append(("serving", engine.worker is not None))
        assert (await client.get("/state")).json() == {"greeting": "hi"}
        started = await client.post("/turns", json={"tenant": "acme"})
        assert (await client.get(f"/turns/{started.json()['run_id']}")).json() == {"result": "reply to acme"}
    assert seen == [("own starts", True), ("serving", True), ("own ends", True)]
    assert engine.worker is None


async def test_worker_false_opens_the_engine_as_a_client_beside_a_worker(engine, sqlite_url):
    async with serving(turns_app(engine, worker=False)) as client:
        assert engine.worker is None  # executes nothing
        started = await client.post("/turns", json={"tenant": "acme"})
        dispatched = await client.post("/dispatch", json={"tenant": "umbrella"})
        assert (started.status_code, dispatched.status_code) == (202, 202)
        ids = [started.json()["run_id"], dispatched.json()["run_id"]]
        assert [(await engine.get_run(run_id)).status for run_id in ids] == ["pending", "pending"]
        async with Engine(sqlite_url) as worker:  # a `duro worker` beside the API process
            worker.register(turn)
            assert (await client.get(f"/turns/{ids[0]}")).json() == {"result": "reply to acme"}
            assert (await client.get(f"/turns/{ids[1]}")).json() == {"result": "reply to umbrella"}
    assert engine.worker is None
    with pytest.raises(DuroError, match="no duro engine is running here"):
        await turn.dispatch({"tenant": "acme"})  # no longer the current engine once the app stopped


async def test_worker_false_refuses_an_engine_already_running(engine):
    async with engine:
        with pytest.raises(DuroError, match="already runs its worker"):
            async with duro_lifespan(engine, worker=False)(object()):
                pass


async def test_an_own_lifespan_that_fails_to_start_leaves_the_engine_stopped(engine):
    @asynccontextmanager
    async def broken(app: Any) -> AsyncIterator[None]:
        raise RuntimeError("the app's cache is out of reach")
        yield

    with pytest.raises(RuntimeError, match="cache is out of reach"):
        async with duro_lifespan(engine, broken)(object()):
            pass
    assert engine.worker is None
    async with duro_lifespan(engine)(object()) as state:  # stopped cleanly: it can start again
        assert state is None and engine.worker is not None
    assert engine.worker is None


async def test_a_refused_start_gets_the_dev_servers_429_body_and_retry_after(engine):
    async with serving(turns_app(engine)) as client:
        assert (await client.post("/turns", json={"tenant": "acme", "wait": True})).status_code == 202
        ours = await client.post("/turns", json={"tenant": "acme"})

        # the dev server's app on the same engine (already running: this app's worker serves both)
        dev_app = create_app(FixedEngine(engine, run_worker=False))
        async with dev_app.router.lifespan_context(dev_app):
            transport = httpx.ASGITransport(app=dev_app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as dev:
                theirs = await dev.post(
                    f"/api/workflows/{turn.name}/runs", json={"input": {"tenant": "acme"}}
                )

    assert (ours.status_code, theirs.status_code) == (429, 429)
    assert ours.content == theirs.content
    assert ours.headers["retry-after"] == theirs.headers["retry-after"] == "1"  # no history: 1 s
    assert ours.headers["content-type"] == theirs.headers["content-type"] == "application/json"
    assert json.loads(ours.content) == {
        "error": "concurrency_limit",
        "message": f"workflow {turn.name!r} refused: concurrency key 'tenant:acme' has 1 active run(s) "
        "and its limit is 1; retry when one of them finishes",
        "workflow": turn.name,
        "key": "tenant:acme",
        "limit": 1,
        "active": 1,
        "retry_after": 1,
    }


def test_the_body_is_built_without_starlette_and_other_errors_are_not_answered():
    err = ConcurrencyLimitError("chat", "tenant:a", 2, 2)
    assert list(concurrency_limit_body(err)) == [
        "error",
        "message",
        "workflow",
        "key",
        "limit",
        "active",
        "retry_after",
    ]
    with pytest.raises(ValueError, match="not a quota"):
        asyncio.run(on_concurrency_limit(None, ValueError("not a quota")))  # type: ignore[arg-type]


class NotInstalled(MetaPathFinder):
    """Refuses starlette and its submodules, as an environment without it does (the error names the
    module asked for: ``starlette.requests``)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] == "starlette":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


@pytest.mark.parametrize("how", ["finder", "sys.modules"])
def test_without_starlette_the_import_error_names_the_dev_extra(monkeypatch, how):
    for name in [n for n in sys.modules if n == "starlette" or n.startswith(("starlette.", "duro.contrib."))]:
        monkeypatch.delitem(sys.modules, name)
    if how == "finder":
        monkeypatch.setattr(sys, "meta_path", [NotInstalled(), *sys.meta_path])
    else:
        monkeypatch.setitem(sys.modules, "starlette", None)  # import of starlette halted
    with pytest.raises(ImportError) as info:
        importlib.import_module("duro.contrib.starlette")
    assert str(info.value) == "duro.contrib.starlette needs the dev extra: pip install 'duro[dev]'"
    assert info.value.name == "starlette"
    importlib.import_module("duro.contrib")  # the package itself needs nothing
