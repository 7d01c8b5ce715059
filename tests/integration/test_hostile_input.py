"""Hostile input changes nothing and gets a clear answer, the same on SQLite and PostgreSQL:
override values of the wrong JSON type, and NUL characters (PostgreSQL's text columns cannot hold
them, SQLite's can) in every id, name, key, label and filter that reaches the store.

SDK items call the engine; HTTP items drive the dev server's app in this process (its lifespan, and so
its engine's worker, included). After every refusal the store's rows are what they were before.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from duro import (
    Concurrency,
    ConfigError,
    DuroError,
    Engine,
    Limit,
    RunNotFoundError,
    WorkerOptions,
    acquire_slot,
    define_workspace,
    wait_for_signal,
    workflow,
)
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine
from tests.support.store_rows import store_rows
from tests.support.waiting import eventually

NUL = "\x00"
SECRET = "nul-secret"  # in every hostile value: it must never reach a log
WORKSPACE = define_workspace(limits={"lines": Limit(capacity=2, max_hold="1h")}, workflows=[])


@workflow
async def echo(inp: Any) -> Any:
    return inp


@workflow
async def waiter(inp: dict) -> Any:
    return await wait_for_signal("go", timeout="1h")


@workflow
async def holder(label: str) -> str:
    """Takes a slot labelled ``label`` and keeps it (ending a run does not release a slot)."""
    return (await acquire_slot("lines", label=label, timeout="1h")).id


@workflow(concurrency=Concurrency(key=lambda inp: inp["tenant"], limit=5))
async def tenant_job(inp: dict) -> str:
    return inp["tenant"]


def engine_for(url: str) -> Engine:
    engine = Engine(url, workspace=WORKSPACE, options=WorkerOptions(poll_interval="50ms"))
    for fn in (echo, waiter, holder, tenant_job):
        engine.register(fn)
    return engine


async def started(url: str) -> None:
    """The worker's first limits pass has written the limit's row (it would show up in a snapshot)."""
    await eventually(lambda: store_rows(url)["duro_limits"], what="the first limits pass")


async def settled(engine: Engine) -> str:
    """A store with something to lose: a finished run, a run waiting for a signal, a held slot."""
    await engine.start("echo", {"a": 1}, run_id="finished")
    waiting = await engine.start("waiter", {}, run_id="waiting")
    await engine.start("holder", "line-1", run_id="holding")
    assert await engine.result("finished", timeout="10s") == {"a": 1}
    assert await engine.result("holding", timeout="10s") == "holding.0"
    await eventually(lambda: _suspended(engine, waiting.id), what="the waiter to suspend")
    return waiting.id


async def _suspended(engine: Engine, run_id: str) -> bool:
    return (await engine.get_run(run_id)).status.value == "suspended"


# -- the SDK ----------------------------------------------------------------------------------------


async def test_the_engine_refuses_override_values_of_the_wrong_type(database_url):
    async with engine_for(database_url) as engine:
        await started(database_url)
        before = store_rows(database_url)
        for bad in (True, False, "3", 3.0, 0, 100_001):
            with pytest.raises(DuroError, match="capacity must be an integer from 1 to 100000"):
                await engine.limits.set_capacity("lines", bad)  # type: ignore[arg-type]
        for bad in (True, " 2h", "2H", "2h ", "1h 30m", 0, "31d", 2.5):
            with pytest.raises(DuroError, match="max_hold"):
                await engine.limits.set_max_hold("lines", bad)  # type: ignore[arg-type]
        assert store_rows(database_url) == before
        (info,) = await engine.limits.list()
        assert (info.capacity_override, info.max_hold_override) == (None, None)
        assert (await engine.limits.set_max_hold("lines", "1h30m")).max_hold_override == "90m"


async def test_a_run_id_with_nul_is_refused_and_nothing_is_written(database_url):
    async with engine_for(database_url) as engine:
        await settled(engine)
        before = store_rows(database_url)
        with pytest.raises(DuroError, match=r"run_id 'a\\x00b' is invalid: .*NUL"):
            await engine.start("echo", {"a": 1}, run_id=f"a{NUL}b")
        with pytest.raises(DuroError, match="NUL"):
            await engine.emit("anything", {}, event_id=f"e{NUL}")
        assert store_rows(database_url) == before


async def test_a_quota_key_with_nul_is_refused_and_nothing_is_written(database_url):
    async with engine_for(database_url) as engine:
        await settled(engine)
        before = store_rows(database_url)
        with pytest.raises(ConfigError, match=r"Concurrency key 'k\\x00' contains a NUL character"):
            Concurrency(key=f"k{NUL}", limit=3)
        with pytest.raises(DuroError, match=r"workflow 'tenant_job': the concurrency key .* NUL"):
            await engine.start("tenant_job", {"tenant": f"acme{NUL}"})
        assert store_rows(database_url) == before


async def test_lookups_and_filters_with_nul_find_nothing_and_read_nothing(database_url):
    async with engine_for(database_url) as engine:
        waiting = await settled(engine)
        before = store_rows(database_url)
        with pytest.raises(DuroError, match=r"run 'finished\\x00' does not exist"):
            await engine.get_run(f"finished{NUL}")
        with pytest.raises(DuroError, match="does not exist"):
            await engine.steps(f"finished{NUL}")
        for kwargs in ({"workflow": f"echo{NUL}"}, {"tag": f"t{NUL}"}, {"before": (1, f"r{NUL}")}):
            with pytest.raises(DuroError, match="filter .* contains a NUL character"):
                await engine.list_runs(**kwargs)
        with pytest.raises(RunNotFoundError):  # no run has that id: nothing to cancel
            await engine.cancel(f"{waiting}{NUL}")
        with pytest.raises(DuroError, match=r"slot 'holding.0\\x00' does not exist"):
            await engine.limits.release(f"holding.0{NUL}")
        with pytest.raises(DuroError, match="does not exist"):
            await engine.schedules.delete(f"nightly{NUL}")
        assert store_rows(database_url) == before
        assert (await engine.get_run(waiting)).status.value == "suspended"


async def test_a_signal_name_with_nul_is_refused_and_nothing_is_written(database_url):
    async with engine_for(database_url) as engine:
        waiting = await settled(engine)
        before = store_rows(database_url)
        with pytest.raises(DuroError, match=r"signal name 'go\\x00' is invalid: .*NUL"):
            await engine.signal(waiting, f"go{NUL}", {"x": 1})
        assert store_rows(database_url) == before


async def test_a_slot_label_with_nul_fails_the_run_clearly_and_takes_no_slot(database_url):
    async with engine_for(database_url) as engine:
        await settled(engine)
        run = await engine.start("holder", f"{SECRET}{NUL}")
        with pytest.raises(DuroError) as info:
            await engine.result(run.id, timeout="10s")
        message = str(info.value)
        assert "the slot label contains a NUL character" in message and "DataError" not in message
        assert SECRET not in message  # the label stays out of the message
        assert [s.run_id for s in await engine.limits.slots("lines")] == ["holding"]
        assert await engine.steps(run.id) == []  # no hook step was recorded


async def test_nul_inside_json_values_round_trips_on_both_stores(database_url):
    """Decision: NUL inside an input or a payload is data, not a key. JSON text spells it ``\\u0000``,
    which both stores keep as it is, so it is accepted and comes back unchanged."""
    value = {"text": f"a{NUL}b", f"k{NUL}": [NUL]}
    async with engine_for(database_url) as engine:
        started = await engine.start("echo", value)
        assert await engine.result(started.id, timeout="10s") == value
        assert (await engine.get_run(started.id)).input == value
        waiting = await engine.start("waiter", {})
        await engine.signal(waiting.id, "go", value)
        assert await engine.result(waiting.id, timeout="10s") == value


# -- the HTTP API -----------------------------------------------------------------------------------


@asynccontextmanager
async def served(url: str) -> AsyncIterator[tuple[Engine, httpx.AsyncClient]]:
    engine = engine_for(url)
    app = create_app(FixedEngine(engine))
    async with app.router.lifespan_context(app):
        await started(url)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
            yield engine, client


def refused(answer: httpx.Response, status: int, *words: str) -> str:
    assert answer.status_code == status, answer.text
    message = answer.json()["message"]
    for word in words:
        assert word in message, message
    return message


@pytest.mark.parametrize(
    "body",
    [
        {"capacity": True},
        {"capacity": False},
        {"capacity": "3"},
        {"capacity": 3.0},
        {"capacity": [3]},
        {"capacity": {"n": 3}},
        {"capacity": 0},
        {},
    ],
)
async def test_http_capacity_of_the_wrong_json_type_is_422_and_changes_nothing(database_url, body):
    async with served(database_url) as (_engine, client):
        before = store_rows(database_url)
        answer = await client.put("/api/limits/lines/capacity", json=body)
        refused(
            answer, 422, "limit 'lines'", "capacity must be a JSON integer from 1 to 100000", "null to reset"
        )
        assert store_rows(database_url) == before
        limit = (await client.get("/api/limits/lines")).json()["limit"]
        assert (limit["effective_capacity"], limit["capacity_override"]) == (2, None)


@pytest.mark.parametrize(
    "body",
    [
        {"max_hold": True},
        {"max_hold": False},
        {"max_hold": " 2h"},
        {"max_hold": "2H"},
        {"max_hold": "2h "},
        {"max_hold": "1h 30m"},
        {"max_hold": "2 h"},
        {"max_hold": 1.5},
        {"max_hold": ["2h"]},
        {"max_hold": "31d"},
        {"max_hold": 0},
        {"max_hold": "2h\u0000"},
        {},
    ],
)
async def test_http_max_hold_outside_the_grammar_is_422_and_changes_nothing(database_url, body):
    async with served(database_url) as (_engine, client):
        before = store_rows(database_url)
        message = refused(
            await client.put("/api/limits/lines/max-hold", json=body), 422, "limit 'lines'", "max_hold"
        )
        assert "lowercase" in message or "30 days" in message
        assert store_rows(database_url) == before
        limit = (await client.get("/api/limits/lines")).json()["limit"]
        assert (limit["effective_max_hold"], limit["max_hold_override"]) == ("1h", None)


async def test_http_strict_override_values_that_are_right_still_work(database_url):
    async with served(database_url) as (_engine, client):
        assert (await client.put("/api/limits/lines/capacity", json={"capacity": 3})).json()["limit"][
            "capacity_override"
        ] == 3
        for value, shown in (("1h30m", "90m"), (7_200_000, "2h"), ("500ms", "500ms")):
            answer = await client.put("/api/limits/lines/max-hold", json={"max_hold": value})
            assert answer.json()["limit"]["max_hold_override"] == shown, answer.text
        assert (await client.put("/api/limits/lines/max-hold", json={"max_hold": None})).json()["limit"][
            "max_hold_override"
        ] is None


async def test_http_nul_anywhere_is_a_4xx_with_a_message_changes_nothing_and_logs_no_data(
    database_url, caplog
):
    caplog.set_level(logging.DEBUG)
    async with served(database_url) as (engine, client):
        waiting = await settled(engine)
        before = store_rows(database_url)
        n = f"{SECRET}{NUL}"
        q = f"{SECRET}%00"
        cursor = base64.urlsafe_b64encode(f"1:{n}".encode()).decode()  # a forged page cursor
        asks = [
            ("POST", "/api/workflows/echo/runs", {"input": 1, "run_id": n}, 422, "run_id"),
            (
                "POST",
                "/api/workflows/echo/runs",
                {"input": 1, "concurrency": {"key": n, "limit": 3}},
                422,
                "Concurrency key",
            ),
            ("POST", "/api/workflows/tenant_job/runs", {"input": {"tenant": n}}, 422, "concurrency key"),
            (
                "POST",
                "/api/schedules",
                {
                    "name": "nightly",
                    "workflow": "echo",
                    "cron": "0 3 * * *",
                    "concurrency": {"key": n, "limit": 1},
                },
                422,
                "Concurrency key",
            ),
            ("GET", f"/api/runs?workflow={q}", None, 400, "workflow filter"),
            ("GET", f"/api/runs?tag={q}", None, 400, "tag filter"),
            ("GET", f"/api/runs?cursor={cursor}", None, 400, "cursor"),
            ("GET", f"/api/runs/{q}", None, 404, "does not exist"),
            ("POST", f"/api/runs/{q}/cancel", None, 404, "does not exist"),
            ("POST", f"/api/runs/{q}/signals/go", {"x": 1}, 404, "does not exist"),
            ("POST", f"/api/runs/{waiting}/signals/{q}", {"x": 1}, 422, "signal name"),
            ("POST", f"/api/slots/{q}/release", None, 404, "does not exist"),
            ("DELETE", f"/api/schedules/{q}", None, 404, "does not exist"),
        ]
        for method, path, body, status, words in asks:
            answer = await client.request(method, path, json=body)
            message = refused(answer, status, words)
            assert "DataError" not in message and "Traceback" not in message, (path, message)
        assert store_rows(database_url) == before
        assert (await engine.get_run(waiting)).status.value == "suspended"
    # the server's side (duro, the app, the drivers); httpx logs this test's own requests
    logged = "\n".join(
        r.getMessage() + (r.exc_text or "")
        for r in caplog.records
        if not r.name.startswith(("httpx", "httpcore"))
    )
    assert SECRET not in logged and "DataError" not in logged


@pytest.mark.parametrize("limit", [True, False, "3", 3.0])
async def test_http_a_quota_limit_of_the_wrong_json_type_is_422_and_starts_nothing(database_url, limit):
    """A per-start quota's limit (and a schedule's) is a JSON integer: ``true`` is not 1."""
    async with served(database_url) as (_engine, client):
        before = store_rows(database_url)
        answer = await client.post(
            "/api/workflows/echo/runs", json={"input": 1, "concurrency": {"key": "k", "limit": limit}}
        )
        assert answer.status_code == 422, answer.text
        answer = await client.post(
            "/api/schedules",
            json={
                "name": "nightly",
                "workflow": "echo",
                "cron": "0 3 * * *",
                "input": 1,
                "concurrency": {"key": "k", "limit": limit},
            },
        )
        assert answer.status_code == 422, answer.text
        assert store_rows(database_url) == before


@pytest.mark.parametrize(
    "raw",
    [
        b'{"input": NaN}',
        b'{"input": Infinity}',
        b'{"input": -Infinity}',
        b'{"input": 1e999}',
        b'{"input": {"x": -1e999}}',
    ],
)
async def test_http_numbers_json_cannot_hold_are_400_not_null(database_url, raw):
    """NaN, Infinity and numbers too large for a float are refused, not stored as null."""
    async with served(database_url) as (_engine, client):
        before = store_rows(database_url)
        answer = await client.post(
            "/api/workflows/echo/runs", content=raw, headers={"Content-Type": "application/json"}
        )
        refused(answer, 400, "number")
        assert store_rows(database_url) == before


@pytest.mark.parametrize(
    "raw", [b'{"input": "\\ud800"}', b'{"input": {"\\udc00": 1}}', b'{"input": ["a\\ud83d"]}']
)
async def test_http_a_lone_surrogate_is_400_not_stored(database_url, raw):
    """An escape such as \\ud800 without its pair is no character: refused, in an input or a signal
    payload; a proper pair (an emoji) is text like any other."""
    async with served(database_url) as (engine, client):
        waiting = await settled(engine)
        before = store_rows(database_url)
        headers = {"Content-Type": "application/json"}
        refused(await client.post("/api/workflows/echo/runs", content=raw, headers=headers), 400, "surrogate")
        signal = raw.replace(b'{"input": ', b"")[:-1]
        refused(
            await client.post(f"/api/runs/{waiting}/signals/poke", content=signal, headers=headers),
            400,
            "surrogate",
        )
        assert store_rows(database_url) == before
        answer = await client.post(
            "/api/workflows/echo/runs", content=b'{"input": "\\ud83d\\ude00"}', headers=headers
        )
        assert answer.status_code == 201, answer.text
        assert await engine.handle(answer.json()["run"]["id"]).result(timeout="10s") == "\U0001f600"
