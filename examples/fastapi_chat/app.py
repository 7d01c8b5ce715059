"""A FastAPI app that starts chat turns in-process, under a per-tenant quota.

    cd examples/fastapi_chat && uvicorn app:create_app --factory

- ``POST /turns`` starts a ``chat_turn`` run: 202 with its run id, or the dev server's 429 (with
  ``Retry-After``) when the tenant already has as many turns running as its plan allows.
- ``GET /turns/{run_id}``: the turn's status and reply; ``?wait=10`` waits up to 10 s for it to end.
- ``POST /turns/{run_id}/confirm``: the user confirms the booking a turn waits for.
- ``POST /calls`` places a call to a human agent (``place_call``): 202 with its run id; the call
  waits for one of the provider's phone lines; 429 with ``Retry-After: 30`` at the tenant's two calls.
- ``GET /calls/{run_id}``: the call's status; ``DELETE /calls/{run_id}``: the caller gave up (the
  call hangs up and its line goes to the next caller).
- ``POST /webhooks/call-ended``: the provider says a call ended; its line is given back.
- ``GET /metrics``: Prometheus text from the app's own registry, duro's collector registered on it.

The engine runs in the app's process (``duro_lifespan``), on ``DURO_DATABASE_URL`` (default: the
SQLite file ``.duro/app.db`` next to this file). Tests pass their own engine instead (the harness's).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, Field
from workflows.calls import CallEnded, CallRequest

import duro.metrics
from duro import ConcurrencyLimitError, Engine, InputError, RunEndedError, RunFailedError, RunNotFoundError
from duro.contrib.starlette import duro_lifespan, on_concurrency_limit

HERE = Path(__file__).resolve().parent


class TurnIn(BaseModel):
    tenant: str = Field(min_length=1, max_length=100)
    conversation: str = Field(min_length=1, max_length=100)
    message: str = Field(max_length=10_000)


class TurnStarted(BaseModel):
    run_id: str


class Call(BaseModel):
    run_id: str
    status: str
    seconds: int | None = None


class Turn(BaseModel):
    run_id: str
    status: str
    reply: str | None = None
    tools_used: list[str] = []
    error: str | None = None


def create_app(
    database_url: str | None = None,
    *,
    engine: Engine | None = None,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[Any]] | None = None,
) -> FastAPI:
    """The app, with its own engine and metrics registry (no module-level state). ``lifespan``: the
    app's own, run while the engine is up (its state reaches ``request.state``). ``engine``: one the
    caller runs (a test's ``duro_env.engine``) instead of the app's own."""
    own_engine = engine is None
    if engine is None:
        url = database_url or os.environ.get("DURO_DATABASE_URL") or f"sqlite:///{HERE / '.duro' / 'app.db'}"
        engine = Engine.from_project(HERE, database_url=url)
    registry = CollectorRegistry()
    registry.register(duro.metrics.collector(engine))  # counts from here on; no label names a tenant

    app = FastAPI(
        title="fastapi_chat",
        lifespan=(duro_lifespan(engine) if lifespan is None else duro_lifespan(engine, lifespan))
        if own_engine
        else lifespan,
        exception_handlers={
            ConcurrencyLimitError: on_concurrency_limit,  # 429 with the quota's Retry-After
            RunNotFoundError: _answer(404, "not_found"),
            RunEndedError: _answer(409, "run_ended"),
            InputError: _answer(422, "invalid_input"),
        },
    )
    app.state.engine = engine

    @app.post("/turns", status_code=202)
    async def start_turn(turn: TurnIn) -> TurnStarted:
        handle = await engine.start("chat_turn", turn.model_dump())  # 429 at the tenant's quota
        return TurnStarted(run_id=handle.id)

    @app.get("/turns/{run_id}")
    async def get_turn(run_id: str, wait: float = Query(0, ge=0, le=30)) -> Turn:
        await _existing(engine, run_id)
        if wait:
            try:
                await engine.result(run_id, timeout=timedelta(seconds=wait))
            except (TimeoutError, RunFailedError):
                pass  # not over yet, or failed: the status says which
        info = await engine.get_run(run_id)
        output = info.output if isinstance(info.output, dict) else {}
        return Turn(
            run_id=info.id,
            status=info.status.value,
            reply=output.get("reply"),
            tools_used=output.get("tools_used", []),
            error=None if info.error is None else str(info.error.get("message")),
        )

    @app.post("/turns/{run_id}/confirm", status_code=202)
    async def confirm_booking(run_id: str) -> dict[str, str]:
        await _existing(engine, run_id)
        await engine.signal(run_id, "confirmed", True)
        return {"run_id": run_id}

    @app.post("/calls", status_code=202)
    async def place_call(call: CallRequest) -> TurnStarted:
        handle = await engine.start("place_call", call)  # the app's own model, as FastAPI parsed it
        return TurnStarted(run_id=handle.id)

    @app.get("/calls/{run_id}")
    async def get_call(run_id: str) -> Call:
        info = await engine.get_run(run_id)  # RunNotFoundError: a 404
        if info.workflow != "place_call":
            raise HTTPException(404, f"there is no call {run_id!r}")
        output = info.output if isinstance(info.output, dict) else {}
        return Call(run_id=info.id, status=info.status.value, seconds=output.get("seconds"))

    @app.delete("/calls/{run_id}", status_code=202)
    async def cancel_call(run_id: str) -> dict[str, str]:
        await engine.cancel(run_id)  # the call hangs up and gives its line back (workflows/calls.py)
        return {"run_id": run_id}

    @app.post("/webhooks/call-ended", status_code=202)
    async def call_ended(event: CallEnded) -> TurnStarted:
        # the provider retries a webhook it got no answer to: one run per call, whatever the retries
        handle = await engine.start("call_ended", event, run_id=f"call-ended-{event.slot_id}")
        return TurnStarted(run_id=handle.id)

    @app.get("/metrics")
    def metrics() -> Response:  # a def, not async: FastAPI runs it off the event loop
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


async def _existing(engine: Engine, run_id: str) -> None:
    try:
        info = await engine.get_run(run_id)
    except RunNotFoundError:
        raise HTTPException(404, f"there is no turn {run_id!r}") from None
    if info.workflow != "chat_turn":
        raise HTTPException(404, f"there is no turn {run_id!r}")


def _answer(status: int, error: str) -> Callable[[Request, Exception], Any]:
    """An exception handler answering a duro error with ``status`` and its message, which names the
    run or the workflow and says what to do."""

    async def handler(request: Request, exc: Exception) -> JSONResponse:
        body: dict[str, Any] = {"error": error, "message": str(exc)}
        if isinstance(exc, InputError):
            body["errors"] = exc.errors
        return JSONResponse(body, status_code=status)

    return handler
