"""A run its workers died executing too often is set aside (``RunSetAsideError``), counted in
``duro_runs_set_aside_total``; one whose history grew since is taken up again as any run. The
deaths themselves are real processes in tests/e2e/test_poison_processes.py: here the store is left
as a dead worker's hand-back leaves it."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from duro import (
    Engine,
    Limit,
    RunFailedError,
    RunSetAsideError,
    WorkerOptions,
    define_workspace,
    limit_slot,
    step,
    wait_for_signal,
    workflow,
)
from duro.metrics import collector
from duro.store import SqlStore
from tests.integration.store_contract._support import new_run
from tests.support.waiting import eventually

LINES = define_workspace(limits={"line": Limit(capacity=1, max_hold="1h")})


@step
async def one() -> int:
    return 1


@workflow(name="aside.flow")
async def flow() -> int:
    return await one()


@workflow(name="aside.call")
async def call(label: str) -> str:
    async with limit_slot("line", label=label):
        await wait_for_signal("done")
    return label


def _left_by_dead_workers(path: Path, run_id: str, attempts: int, steps: int) -> None:
    store = SqlStore(f"sqlite:///{path}")
    store.create_schema()
    store.runs.insert(dataclasses.replace(new_run(run_id, workflow="aside.flow"), input=None), None)
    store.close()
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE duro_runs SET status = 'running', recovered_steps = ?, recoveries = ? WHERE id = ?",
            (steps, attempts, run_id),
        )


def _set_aside(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value("duro_runs_set_aside_total", {"workflow": "aside.flow"})
    return 0.0 if value is None else value


async def test_past_max_recoveries_the_run_is_set_aside_and_counted(tmp_path: Path):
    path = tmp_path / "duro.db"
    _left_by_dead_workers(path, "suspect", attempts=2, steps=0)  # two attempts made, both deaths
    _left_by_dead_workers(path, "moved-on", attempts=2, steps=5)  # its history is shorter: not one
    engine = Engine(f"sqlite:///{path}", options=WorkerOptions(poll_interval="50ms", max_recoveries=2))
    engine.register(flow)
    registry = CollectorRegistry()
    registry.register(collector(engine))
    async with engine:
        with pytest.raises(RunFailedError) as failed:
            await engine.result("suspect", timeout="10s")
        assert isinstance(failed.value.cause, RunSetAsideError)
        assert failed.value.cause.deaths == 3 and failed.value.cause.steps == 0
        assert await engine.result("moved-on", timeout="10s") == 1
    assert _set_aside(registry) == 1


def _recoveries(path: Path, run_id: str) -> int | None:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT recoveries FROM duro_runs WHERE id = ?", (run_id,)).fetchone()[0]


async def _waiting_steps(engine: Engine, run_id: str, count: int) -> bool:
    steps = await engine.steps(run_id)
    return len(steps) == count and steps[-1].status == "waiting"


async def test_a_suspect_that_reaches_its_wait_again_counts_from_zero(tmp_path: Path):
    """A run queued for a slot when its workers died: its replay reaches the same wait, and none of
    its code runs while it waits, so the deaths are not its doing. It leaves suspicion there (its
    count back to 0) instead of being set aside after enough unrelated deaths."""
    path = tmp_path / "duro.db"
    url = f"sqlite:///{path}"
    first = Engine(url, workspace=LINES)
    first.register(call)
    async with first:
        await first.start(call, "holder", run_id="holder")
        await eventually(lambda: _waiting_steps(first, "holder", 2), what="holder waits for its signal")
        await first.start(call, "queued", run_id="queued")
        await eventually(lambda: _waiting_steps(first, "queued", 1), what="queued waits for the line")
    with sqlite3.connect(path) as db:  # as workers that died with it in memory leave it: one attempt made
        db.execute(
            "UPDATE duro_runs SET status = 'running', due_at = 0, recovered_steps = 1, recoveries = 1 WHERE id = 'queued'"
        )
    second = Engine(url, workspace=LINES, options=WorkerOptions(poll_interval="50ms", max_recoveries=2))
    second.register(call)
    async with second:
        await eventually(
            lambda: _recoveries(path, "queued") == 0, what="the suspect's count cleared at its wait"
        )
        await second.signal("holder", "done")
        await eventually(lambda: _waiting_steps(second, "queued", 2), what="queued holds the line")
        await second.signal("queued", "done")
        assert await second.result("queued", timeout="10s") == "queued"
        assert await second.result("holder", timeout="10s") == "holder"


GATE: dict[str, asyncio.Event] = {}


@step
async def long_step() -> str:
    await GATE["long"].wait()  # a step that takes as long as the test says
    return "long"


@workflow(name="aside.long")
async def long_flow() -> str:
    return await long_step()


async def test_recovered_runs_resume_side_by_side_a_long_step_holds_up_no_other(tmp_path: Path):
    """Four runs a dead worker left at their first attempt (each a suspect): the one whose step takes
    long does not hold up the three others, which complete while it is still in its step."""
    path = tmp_path / "duro.db"
    GATE["long"] = asyncio.Event()
    store = SqlStore(f"sqlite:///{path}")
    store.create_schema()
    store.runs.insert(dataclasses.replace(new_run("long", workflow="aside.long"), input=None), None)
    store.close()
    for n in range(3):
        _left_by_dead_workers(path, f"quick-{n}", attempts=0, steps=0)
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE duro_runs SET status = 'running', recovered_steps = 0, recoveries = 0 WHERE id = 'long'"
        )
    engine = Engine(f"sqlite:///{path}", options=WorkerOptions(poll_interval="50ms"))
    engine.register(flow)
    engine.register(long_flow)
    async with engine:
        for n in range(3):
            assert await engine.result(f"quick-{n}", timeout="10s") == 1
        assert (await engine.get_run("long")).status == "running"  # still in its long step
        GATE["long"].set()
        assert await engine.result("long", timeout="10s") == "long"
