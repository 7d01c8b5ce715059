"""A store that does not answer in time (SQLite locked by another process past ``busy_timeout``,
PostgreSQL out of reach) gives the HTTP client a 503 with ``Retry-After`` and a clean message, never
a 500 with SQL in it, and the request changed nothing: the same request succeeds once the store is back.

The dev server's app runs in this process (its lifespan, and so its engine's worker, included); the
lock is held by another connection, as another process would.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from duro import Engine, WorkerOptions
from duro.store import NewRun, SqlStore
from duro.tooling import StoreUnavailable
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine
from tests.integration.flows import double
from tests.support.waiting import eventually

SQL = "INSERT INTO duro_runs (id, input) VALUES (?, ?)"
PARAMS = ("secret-run-id", '{"card": "4111-secret"}')
# nothing of the store's error may reach the client: no SQL, no parameters, no traceback, no driver text
LEAKS = ("INSERT", "SELECT", "BEGIN", "[SQL", "secret", "Traceback", 'File "', "10.9.8.7", "OperationalError")


@asynccontextmanager
async def served(
    engine: Engine, *, run_worker: bool = True
) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    """The dev server's app on ``engine``, its lifespan running, and a client of it."""
    app = create_app(FixedEngine(engine, run_worker=run_worker))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
            yield app, client


@contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Another connection holds the SQLite file's write lock (as another process would)."""
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield
        holder.execute("ROLLBACK")
    finally:
        holder.close()


def assert_clean_503(answer: httpx.Response, retry_after: int = 5) -> dict[str, Any]:
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == str(retry_after)
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert body["error"] == "unavailable" and body["retry_after"] == retry_after
    assert "busy" in body["message"] and f"retry in {retry_after} s" in body["message"]
    for leak in LEAKS:
        assert leak not in answer.text, f"{leak!r} leaked into {answer.text!r}"
    return body


async def test_a_start_while_another_process_holds_the_write_lock_is_503_and_changes_nothing(tmp_path):
    path = tmp_path / "duro.db"
    engine = Engine(f"sqlite:///{path}?busy_timeout=500ms", options=WorkerOptions(poll_interval="50ms"))
    engine.register(double)
    start = {"input": 21, "run_id": "started-under-the-lock"}
    async with served(engine) as (_app, client):
        with write_lock(path):
            refused = asyncio.ensure_future(client.post("/api/workflows/double/runs", json=start))
            # the loop does not wait on the database meanwhile: a request that needs none is answered
            health = await client.get("/api/health")
            assert health.status_code == 200 and not refused.done()
            body = assert_clean_503(await refused)
            assert "SQLite file's write lock" in body["message"]
            # nothing was written: reads go on under the lock (WAL) and find no such run
            assert (await client.get(f"/api/runs/{start['run_id']}")).status_code == 404
        again = await client.post("/api/workflows/double/runs", json=start)
        assert again.status_code == 201, again.text
        assert again.json()["created"] is True

        async def completed() -> bool:
            run = (await client.get(f"/api/runs/{start['run_id']}")).json()["run"]
            return run["status"] == "completed" and run["output"] == 42

        await eventually(completed, timeout=20, what="the run started after the lock completes")


def _raising(err: BaseException) -> Callable[..., Any]:
    def store_call(*_args: Any) -> Any:
        raise err

    return store_call


def _locked() -> sa.exc.OperationalError:
    return sa.exc.OperationalError(SQL, PARAMS, sqlite3.OperationalError("database is locked"))


def _unavailable(cause: BaseException, retry_after_s: int = 5) -> StoreUnavailable:
    err = StoreUnavailable("the database is busy or out of reach; nothing was changed", retry_after_s)
    err.__cause__ = cause
    return err


@pytest.mark.parametrize(
    ("make_error", "retry_after", "words"),
    [
        (lambda: _unavailable(_locked(), 7), 7, "SQLite file's write lock"),
        (
            lambda: _unavailable(
                sa.exc.OperationalError(
                    SQL,
                    PARAMS,
                    psycopg.OperationalError(
                        'connection to server at "10.9.8.7", port 5432 failed: Connection refused'
                    ),
                )
            ),
            5,
            "out of reach",
        ),
        # a driver's error that escaped the engine's StoreUnavailable is answered the same way
        (_locked, 5, "SQLite file's write lock"),
        (lambda: sqlite3.OperationalError("database is locked"), 5, "SQLite file's write lock"),
        (
            lambda: psycopg.OperationalError('connection to server at "10.9.8.7" failed: Connection refused'),
            5,
            "out of reach",
        ),
        (
            lambda: sa.exc.OperationalError(
                SQL, PARAMS, psycopg.errors.AdminShutdown("terminating connection")
            ),
            5,
            "out of reach",
        ),
    ],
    ids=[
        "StoreUnavailable-sqlite",
        "StoreUnavailable-postgres",
        "sqlalchemy-sqlite",
        "sqlite3",
        "psycopg",
        "sqlalchemy-psycopg",
    ],
)
async def test_a_store_that_did_not_answer_is_a_clean_503_never_a_500(
    tmp_path, make_error, retry_after, words, caplog
):
    async def store_call_failed(_request: Request) -> Response:
        raise make_error()

    engine = Engine(f"sqlite:///{tmp_path / 'duro.db'}")
    async with served(engine, run_worker=False) as (app, client):
        app.router.routes.insert(0, Route("/api/store-call", store_call_failed, methods=["GET"]))
        body = assert_clean_503(await client.get("/api/store-call"), retry_after)
    assert words in body["message"]
    logged = [r.getMessage() for r in caplog.records if r.name == "duro.devserver"]
    assert len(logged) == 1 and "answered 503" in logged[0]  # one line: what, and the error's type only
    for leak in LEAKS[:-1]:
        assert leak not in logged[0]


@pytest.mark.parametrize(
    ("method", "store_method", "request_args"),
    [
        ("post", "insert", ("/api/workflows/double/runs", {"input": 1})),  # its DuroError would be a 422
        ("post", "get", ("/api/workflows/double/runs", {"input": 1, "run_id": "r"})),
        ("get", "get", ("/api/runs/r", None)),  # "no such run" would be a 404
        ("post", "get", ("/api/runs/r/signals/go", None)),
        ("post", "get", ("/api/runs/r/cancel", None)),
        ("get", "page", ("/api/runs", None)),
    ],
)
async def test_no_route_turns_an_unavailable_store_into_a_404_or_a_422(
    tmp_path, monkeypatch, method, store_method, request_args
):
    engine = Engine(f"sqlite:///{tmp_path / 'duro.db'}")
    engine.register(double)
    async with served(engine, run_worker=False) as (_app, client):
        monkeypatch.setattr(engine.store.runs, store_method, _raising(_unavailable(_locked(), 3)))
        path, payload = request_args
        answer = await (client.post(path, json=payload) if method == "post" else client.get(path))
        assert_clean_503(answer, 3)


async def test_the_limits_monitor_skips_a_sample_while_the_store_does_not_answer(tmp_path, monkeypatch):
    engine = Engine(f"sqlite:///{tmp_path / 'duro.db'}")
    async with served(engine, run_worker=False) as (app, _client):

        async def limits_unavailable() -> Any:
            raise _unavailable(_locked())

        monkeypatch.setattr(engine.limits, "list", limits_unavailable)
        await app.state.monitor.sample()  # no error: the next sample tries again
        monkeypatch.undo()
        await app.state.monitor.sample()


def test_busy_timeout_bounds_how_long_a_write_waits_for_a_locked_file(tmp_path):
    path = tmp_path / "duro.db"
    store = SqlStore(f"sqlite:///{path}?busy_timeout=200ms")
    try:
        store.create_schema()
        new = NewRun(
            id="r", namespace="default", workflow="double", version="1", input="1", owner=None, created_at=0
        )
        with write_lock(path):
            began = time.perf_counter()
            with pytest.raises(Exception) as caught:  # noqa: B017 - whichever the driver raises, classified below
                store.runs.insert(new, None)
            waited = time.perf_counter() - began
        assert SqlStore.is_unavailable(caught.value) and not SqlStore.is_transient(caught.value)
        assert 0.15 < waited < 5, waited
        assert store.runs.get("r") is None  # nothing was written
        assert (
            store.runs.insert(new, None)[1] is True
        )  # and the same write goes through once the lock is gone
    finally:
        store.close()
