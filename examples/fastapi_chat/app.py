"""A FastAPI app that starts chat turns in-process, under a per-tenant quota.

    cd examples/fastapi_chat && uvicorn app:create_app --factory

- ``POST /turns`` starts a ``chat_turn`` run: 202 with its run id, or the dev server's 429 (with
  ``Retry-After``) when the tenant already has as many turns running as its plan allows.
- ``GET /turns/{run_id}``: the turn's status and reply; ``?wait=10`` waits up to 10 s for it to end.
- ``POST /turns/{run_id}/confirm``: the user confirms the booking a turn waits for.
- ``GET /metrics``: Prometheus text from the app's own registry, duro's collector registered on it.

The engine runs in the app's process (``duro_lifespan``), on ``DURO_DATABASE_URL`` (default: the
SQLite file ``.duro/app.db`` next to this file).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, Field

import duro.metrics
from duro import ConcurrencyLimitError, DuroError, Engine, RunFailedError
from duro.contrib.starlette import duro_lifespan, on_concurrency_limit

HERE = Path(__file__).resolve().parent


class TurnIn(BaseModel):
    tenant: str = Field(min_length=1, max_length=100)
    conversation: str = Field(min_length=1, max_length=100)
    message: str = Field(max_length=10_000)


class TurnStarted(BaseModel):
    run_id: str


class Turn(BaseModel):
    run_id: str
    status: str
    reply: str | None = None
    tools_used: list[str] = []
    error: str | None = None


def create_app(
    database_url: str | None = None,
    *,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[Any]] | None = None,
) -> FastAPI:
    """The app, with its own engine and metrics registry (no module-level state). ``lifespan``: the
    app's own, run while the engine is up (its state reaches ``request.state``)."""
    url = database_url or os.environ.get("DURO_DATABASE_URL") or f"sqlite:///{HERE / '.duro' / 'app.db'}"
    engine = Engine.from_project(HERE, database_url=url)
    registry = CollectorRegistry()
    registry.register(duro.metrics.collector(engine))  # counts from here on; no label names a tenant

    app = FastAPI(
        title="fastapi_chat",
        lifespan=duro_lifespan(engine) if lifespan is None else duro_lifespan(engine, lifespan),
        exception_handlers={ConcurrencyLimitError: on_concurrency_limit},
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

    @app.get("/metrics")
    def metrics() -> Response:  # a def, not async: FastAPI runs it off the event loop
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


async def _existing(engine: Engine, run_id: str) -> None:
    try:
        info = await engine.get_run(run_id)
    except DuroError:
        raise HTTPException(404, f"there is no turn {run_id!r}") from None
    if info.workflow != "chat_turn":
        raise HTTPException(404, f"there is no turn {run_id!r}")
