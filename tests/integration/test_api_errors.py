"""The API's answers to a run that does not exist (404), a signal to a run that has ended (409) and
an input that does not match its workflow (422, with pydantic's error list), on both stores; each
body fits the OpenAPI document's schema for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import jsonschema_rs  # schemathesis's validator (the fuzz test's dependency)
import pytest
from pydantic import BaseModel

from duro import (
    Engine,
    RunFailedError,
    RunNotFoundError,
    WorkerOptions,
    define_workspace,
    wait_for_signal,
    workflow,
)
from duro_devserver.api._common import duro_error
from duro_devserver.api.openapi import openapi_document
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine


class Order(BaseModel):
    id: str
    qty: int


@workflow
async def order(inp: Order) -> int:
    return inp.qty


@workflow
async def waits() -> Any:
    return await wait_for_signal("go")


@asynccontextmanager
async def served(url: str) -> AsyncIterator[tuple[Engine, httpx.AsyncClient]]:
    engine = Engine(
        url, workspace=define_workspace(workflows=[]), options=WorkerOptions(poll_interval="50ms")
    )
    for fn in (order, waits):
        engine.register(fn)
    app = create_app(FixedEngine(engine))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
            yield engine, client


def fits(answer: httpx.Response, method: str, path: str) -> dict[str, Any]:
    """The answer's body, checked against the schema the OpenAPI document gives its status."""
    document = openapi_document()
    response = document["paths"][path][method]["responses"][str(answer.status_code)]
    schema = {**response["content"]["application/json"]["schema"], "components": document["components"]}
    body: dict[str, Any] = answer.json()
    jsonschema_rs.validate(schema, body)
    return body


async def test_a_run_that_does_not_exist_is_a_404_naming_it(database_url):
    async with served(database_url) as (_, client):
        for method, path, template in (
            ("get", "/api/runs/nobody", "/api/runs/{id}"),
            ("post", "/api/runs/nobody/cancel", "/api/runs/{id}/cancel"),
            ("post", "/api/runs/nobody/signals/go", "/api/runs/{id}/signals/{name}"),
        ):
            answer = await client.request(method, path, json={"x": 1} if "signals" in path else None)
            assert answer.status_code == 404, answer.text
            body = fits(answer, method, template)
            assert body["error"] == "not_found" and body["run_id"] == "nobody"
            assert "run 'nobody' does not exist" in body["message"] and "GET /api/runs" in body["message"]


async def test_a_signal_to_an_ended_run_is_a_409_with_its_status(database_url):
    async with served(database_url) as (engine, client):
        run = await engine.start("waits", run_id="ended")
        await engine.cancel(run.id)  # delivered into the run's wait: the run ends a moment later
        with pytest.raises(RunFailedError):
            await asyncio.wait_for(run.result(), 10)
        answer = await client.post("/api/runs/ended/signals/go", json={"late": True})
        assert answer.status_code == 409, answer.text
        body = fits(answer, "post", "/api/runs/{id}/signals/{name}")
        assert (body["error"], body["run_id"], body["status"]) == ("conflict", "ended", "cancelled")
        assert "has ended (cancelled)" in body["message"]
        # a cancel of it stays a no-op: 200, the run as it is
        again = await client.post("/api/runs/ended/cancel")
        assert again.status_code == 200 and again.json()["run"]["status"] == "cancelled"


async def test_an_input_that_does_not_match_is_a_422_with_pydantics_errors(database_url):
    async with served(database_url) as (engine, client):
        answer = await client.post("/api/workflows/order/runs", json={"input": {"id": 7, "qty": "lots"}})
        assert answer.status_code == 422, answer.text
        body = fits(answer, "post", "/api/workflows/{name}/runs")
        assert body["error"] == "unprocessable" and body["workflow"] == "order"
        assert [(e["type"], e["loc"], e["input"]) for e in body["errors"]] == [
            ("string_type", ["id"], 7),
            ("int_parsing", ["qty"], "lots"),
        ]
        assert "input of workflow 'order' is invalid" in body["message"] and "qty" in body["message"]
        no_input = await client.post("/api/workflows/waits/runs", json={"input": {"x": 1}})
        assert no_input.status_code == 422
        assert fits(no_input, "post", "/api/workflows/{name}/runs")["errors"][0]["type"] == "none_required"
        schedule = {"name": "nightly", "workflow": "order", "cron": "0 3 * * *", "input": {"id": "a"}}
        refused = await client.post("/api/schedules", json=schedule)
        assert refused.status_code == 422
        body = fits(refused, "post", "/api/schedules")
        assert body["workflow"] == "order" and [e["loc"] for e in body["errors"]] == [["qty"]]
        assert await engine.list_runs() == [] and await engine.schedules.list() == []


async def test_a_body_that_does_not_fit_is_a_422_with_pydantics_errors_too(database_url):
    async with served(database_url) as (_, client):
        answer = await client.post("/api/workflows/order/runs", json={"input": {}, "run_id": ""})
        assert answer.status_code == 422
        body = fits(answer, "post", "/api/workflows/{name}/runs")
        assert [(e["type"], e["loc"]) for e in body["errors"]] == [("string_too_short", ["run_id"])]
        assert "workflow" not in body or body["workflow"] is None


def test_an_engine_error_maps_to_its_status_and_fields():
    refused = duro_error(RunNotFoundError("r\x00", "blue", "no NUL"))
    assert (refused.status, refused.extra) == (404, {"run_id": "r\x00"})
    assert "in namespace 'blue': no NUL" in refused.message
