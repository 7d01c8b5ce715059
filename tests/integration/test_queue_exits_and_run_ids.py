"""Correctness seen from outside, on a fresh SQLite file and on a real PostgreSQL database:

- a run that leaves a limit's queue by ending (cancelled, failed) has its hook step closed, with an
  end time and the run's end as its status;
- an operator releasing a *reserved* slot never fails the run it was reserved for with a timeout
  that did not happen: the reservation goes back to the queue as a lapsed one does;
- a start naming another workflow's run id raises ``RunIdConflictError`` (409 over HTTP) and creates
  nothing; the HTTP start answers 201 or 200 from what the start itself did, not from a read before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from duro import (
    ChildWorkflowError,
    DuroError,
    Engine,
    Limit,
    RunFailedError,
    RunIdConflictError,
    WorkerOptions,
    acquire_slot,
    child,
    define_workspace,
    release_slot,
    wait_for_signal,
    workflow,
)
from duro.testing import hooks
from duro.tooling import start_info
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine
from tests.support import store_ops
from tests.support.waiting import eventually

HOOK = "Esperando hueco · lines"
WORKSPACE = define_workspace(limits={"lines": Limit(capacity=1, max_hold="1h")}, workflows=[])


@workflow
async def caller(inp: dict) -> str:
    """Takes a slot of "lines", waits for "done", gives the slot back."""
    slot = await acquire_slot("lines", label=inp.get("label"), timeout=inp.get("timeout", "1h"))
    await wait_for_signal("done", timeout="1h")
    await release_slot(slot.id)
    return slot.id


@workflow
async def echo(inp: Any) -> Any:
    return inp


@workflow
async def other(inp: Any) -> Any:
    return inp


@workflow
async def fails_while_waiting(inp: Any) -> str:
    """Fails while one of its branches waits in the queue of "lines"."""

    async def boom() -> None:
        await wait_for_signal("boom", timeout="1h")
        raise RuntimeError("the other branch failed")

    slot, _ = await asyncio.gather(acquire_slot("lines", timeout="1h"), boom())
    return slot.id


@workflow
async def parent_of_other(run_id: str) -> Any:
    return await child(other, {"from": "parent"}, run_id=run_id)


def engine_for(url: str) -> Engine:
    engine = Engine(url, workspace=WORKSPACE, options=WorkerOptions(poll_interval="50ms"))
    for fn in (caller, echo, other, parent_of_other, fails_while_waiting):
        engine.register(fn)
    return engine


async def _hook(engine: Engine, run_id: str):  # noqa: ANN202 - a StepInfo
    steps = await engine.steps(run_id)
    return steps[0] if steps and steps[0].kind == "hook" else None


async def _waiting(engine: Engine, run_id: str) -> bool:
    hook = await _hook(engine, run_id)
    return hook is not None and hook.status == "waiting"


async def _queue(engine: Engine) -> list[tuple[str | None, str]]:
    return [(s.run_id, s.state) for s in await engine.limits.slots("lines")]


async def _holding_and_waiting(engine: Engine) -> tuple[str, str]:
    holder = (await engine.start("caller", {"label": "a"}, run_id="holder")).id
    await eventually(lambda: _status_is(engine, holder, "suspended"), what="the holder to hold its slot")
    waiter = (await engine.start("caller", {"label": "b"}, run_id="waiter")).id
    await eventually(lambda: _waiting(engine, waiter), what="the waiter to queue")
    return holder, waiter


async def _status_is(engine: Engine, run_id: str, status: str) -> bool:
    return (await engine.get_run(run_id)).status.value == status


# -- leaving the queue --------------------------------------------------------------------------


async def test_a_cancelled_waiter_has_its_hook_step_closed(database_url):
    async with engine_for(database_url) as engine:
        holder, waiter = await _holding_and_waiting(engine)
        await engine.cancel(waiter)
        await eventually(lambda: _status_is(engine, waiter, "cancelled"), what="the waiter to end")
        hook = await _hook(engine, waiter)
        run = await engine.get_run(waiter)
        assert (hook.name, hook.kind, hook.status) == (HOOK, "hook", "cancelled")
        assert hook.ended_at is not None and run.ended_at is not None and hook.ended_at <= run.ended_at
        assert await _queue(engine) == [(holder, "busy")]  # the queue and the step agree


async def test_a_waiter_cancelled_by_a_client_that_knows_no_limits_leaves_the_queue_too(database_url):
    """A client engine with no workspace cannot take the run out of the queues it does not know: the
    worker executing the run does, when it sees the cancel, so no dead waiter holds up the queue."""
    async with engine_for(database_url) as engine:
        holder, waiter = await _holding_and_waiting(engine)
        client = Engine(database_url)
        try:
            await client.cancel(waiter)
        finally:
            client.close()
        await eventually(lambda: _queue_is(engine, [(holder, "busy")]), what="the waiter to leave the queue")
        hook = await _hook(engine, waiter)
        assert (hook.status, hook.ended_at is not None) == ("cancelled", True)
        await engine.signal(holder, "done")
        assert await engine.handle(holder).result(timeout="10s") == "holder.0"


async def _queue_is(engine: Engine, expected: list[tuple[str | None, str]]) -> bool:
    return await _queue(engine) == expected


async def test_a_waiter_that_fails_has_its_hook_step_closed_as_failed(database_url):
    async with engine_for(database_url) as engine:
        holder = (await engine.start("caller", {}, run_id="holder")).id
        await eventually(lambda: _status_is(engine, holder, "suspended"), what="the holder to hold its slot")
        failing = (await engine.start("fails_while_waiting", None, run_id="failing")).id
        await eventually(lambda: _waiting(engine, failing), what="the failing run to queue")
        await engine.signal(failing, "boom")
        with pytest.raises(RunFailedError, match="the other branch failed"):
            await engine.result(failing, timeout="10s")
        hook = await eventually(lambda: _closed(engine, failing), what="the hook step to close")
        assert hook.status == "failed" and hook.ended_at is not None
        assert await _queue(engine) == [(holder, "busy")]


async def _closed(engine: Engine, run_id: str):  # noqa: ANN202 - a StepInfo or None
    hook = await _hook(engine, run_id)
    return hook if hook is not None and hook.status != "waiting" else None


# -- an operator releasing a reservation ----------------------------------------------------------


async def test_an_operator_release_of_a_reserved_slot_requeues_its_run_and_never_times_it_out(database_url):
    """The waiter is picked (its slot reserved) and, before it confirms, an operator releases that
    slot: the run goes back to the queue and, as the only one waiting, is handed the slot again."""
    async with engine_for(database_url) as engine:
        hooks(engine).grant_locally = False  # every grant is a reservation the waiter must confirm
        holder, waiter = await _holding_and_waiting(engine)
        seen: list[str] = []

        def release_before_confirming(point: str, run_id: str) -> None:
            if point == "slot.confirming" and run_id == waiter and not seen:
                slot = engine.store.slots.get(f"{waiter}.0")
                seen.append(slot.state)
                _, released, _ = store_ops.slot_release(
                    engine.store, engine.workspace.limits, slot.id, engine.clock.now_ms(), "operator"
                )
                assert released
                seen.append(engine.store.slots.get(slot.id).state)

        hooks(engine).checkpoints.append(release_before_confirming)
        await engine.signal(holder, "done")
        assert await engine.result(holder, timeout="10s") == "holder.0"
        await eventually(lambda: _status_is(engine, waiter, "suspended"), what="the waiter to hold the slot")
        assert seen == ["reserved", "reserved"]  # requeued, then at the head: reserved for it again
        hook = await _hook(engine, waiter)
        assert hook.status == "completed" and hook.error is None
        assert await _queue(engine) == [(waiter, "busy")]
        await engine.signal(waiter, "done")
        assert await engine.result(waiter, timeout="10s") == "waiter.0"


# -- run ids of another workflow ------------------------------------------------------------------


async def test_a_start_with_another_workflows_run_id_is_a_conflict_and_creates_nothing(database_url):
    async with engine_for(database_url) as engine:
        assert await engine.result((await engine.start("echo", {"v": 1}, run_id="taken")).id, timeout="10s")
        with pytest.raises(RunIdConflictError) as info:
            await engine.start("other", {"v": 2}, run_id="taken")
        err = info.value
        assert (err.run_id, err.workflow, err.existing_workflow) == ("taken", "other", "echo")
        assert isinstance(err, DuroError) and "'echo'" in str(err) and "'other'" in str(err)
        with pytest.raises(RunIdConflictError):
            await other.start({"v": 3}, run_id="taken", engine=engine)
        assert [r.id for r in await engine.list_runs(workflow="other")] == []
        assert (await engine.get_run("taken")).input == {"v": 1}
        # the same workflow: idempotent, created or not
        assert (await start_info(engine, "echo", {"v": 9}, run_id="taken"))[1] is False
        assert (await start_info(engine, "echo", {"v": 9}, run_id="fresh"))[1] is True


async def test_a_start_racing_past_the_existence_check_is_still_a_conflict(database_url, monkeypatch):
    """Another process's start takes the id between our check and our insert: the insert's taken-id
    path judges the workflow too."""
    async with engine_for(database_url) as engine:
        await engine.start("echo", {"v": 1}, run_id="raced")
        monkeypatch.setattr(engine.store.runs, "get", _not_yet(engine.store.runs.get, "raced"))
        with pytest.raises(RunIdConflictError, match="'raced' belongs to a run of workflow 'echo'"):
            await engine.start("other", {"v": 2}, run_id="raced")
        info, created = await start_info(engine, "echo", {"v": 2}, run_id="raced")
        assert (info.id, created) == ("raced", False)
        assert [r.id for r in await engine.list_runs(workflow="other")] == []


def _not_yet(get_run: Any, run_id: str) -> Any:
    """``get_run`` that does not see ``run_id`` the first time it is asked (the race's window)."""
    asked: list[str] = []

    def racing(wanted: str, *rest: Any) -> Any:
        if wanted == run_id and not asked:
            asked.append(wanted)
            return None
        return get_run(wanted, *rest)

    racing.__name__ = "get_run"
    return racing


async def test_a_child_with_another_workflows_run_id_fails_the_parent_with_the_conflict(database_url):
    async with engine_for(database_url) as engine:
        await engine.start("echo", {"v": 1}, run_id="someone-else")
        parent = await engine.start("parent_of_other", "someone-else")
        with pytest.raises(RunFailedError) as info:
            await parent.result(timeout="10s")
        assert isinstance(info.value.cause, ChildWorkflowError)
        assert isinstance(info.value.cause.cause, RunIdConflictError)
        (step,) = await parent.steps()
        assert (step.kind, step.status) == ("child", "failed")
        assert (await engine.get_run("someone-else")).input == {"v": 1}
        assert [r.id for r in await engine.list_runs(workflow="other")] == []


# -- over HTTP ------------------------------------------------------------------------------------


@asynccontextmanager
async def served(url: str) -> AsyncIterator[tuple[Engine, httpx.AsyncClient]]:
    engine = engine_for(url)
    app = create_app(FixedEngine(engine))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
            yield engine, client


async def test_http_start_answers_201_200_and_409_from_what_the_start_did(database_url, monkeypatch):
    async with served(database_url) as (engine, client):
        first = await client.post("/api/workflows/echo/runs", json={"input": {"v": 1}, "run_id": "web-1"})
        assert first.status_code == 201 and first.json()["created"] is True
        again = await client.post("/api/workflows/echo/runs", json={"input": {"v": 2}, "run_id": "web-1"})
        assert again.status_code == 200 and again.json()["created"] is False
        assert again.json()["run"]["input"] == {"v": 1}
        conflict = await client.post("/api/workflows/other/runs", json={"input": {"v": 3}, "run_id": "web-1"})
        assert conflict.status_code == 409, conflict.text
        assert conflict.json()["error"] == "conflict"
        assert "'echo'" in conflict.json()["message"] and "'other'" in conflict.json()["message"]
        # a start racing another's past the existence check: still 200 (not created), or 409
        await engine.start("echo", {"v": 4}, run_id="web-2")
        monkeypatch.setattr(engine.store.runs, "get", _not_yet(engine.store.runs.get, "web-2"))
        raced = await client.post("/api/workflows/echo/runs", json={"input": {"v": 5}, "run_id": "web-2"})
        assert raced.status_code == 200 and raced.json()["created"] is False
        assert raced.json()["run"]["input"] == {"v": 4}
        assert [r.id for r in await engine.list_runs(workflow="other")] == []
