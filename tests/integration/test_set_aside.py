"""A run its workers died executing too often is set aside (``RunSetAsideError``), counted in
``duro_runs_set_aside_total``; one whose history grew since is taken up again as any run. The
deaths themselves are real processes in tests/e2e/test_poison_processes.py: here the store is left
as a dead worker's hand-back leaves it."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from duro import Engine, RunFailedError, RunSetAsideError, WorkerOptions, step, workflow
from duro.metrics import collector
from duro.store import SqlStore
from tests.integration.store_contract._support import new_run


@step
async def one() -> int:
    return 1


@workflow(name="aside.flow")
async def flow() -> int:
    return await one()


def _left_by_dead_workers(path: Path, run_id: str, attempts: int, steps: int) -> None:
    store = SqlStore(f"sqlite:///{path}")
    store.create_schema()
    store.insert_run(dataclasses.replace(new_run(run_id, workflow="aside.flow"), input=None), None)
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
