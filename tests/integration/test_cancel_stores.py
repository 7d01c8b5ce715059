"""Cancelling delivered into the code, on both stores: a worker in this process (real time), a client
engine in another role cancelling a run a worker holds, an evicted run, and the grace period."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from duro import (
    DuroError,
    Engine,
    Limit,
    RunCancelled,
    RunFailedError,
    WorkerOptions,
    define_workspace,
    limit_slot,
    sleep,
    step,
    wait_for_signal,
    workflow,
)
from duro.testing import run_store_inline
from duro_harness import SimulatedClock
from tests.support.waiting import eventually

START = datetime(2030, 1, 1, tzinfo=UTC)
LINES = define_workspace(limits={"line": Limit(capacity=1, max_hold="1h")})
calls: list[str] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()


@step
async def hang_up(label: str) -> str:
    calls.append(label)
    return label


@step
async def forever() -> None:
    await asyncio.Event().wait()


@workflow
async def call(label: str) -> str:
    async with limit_slot("line", label=label):
        try:
            await wait_for_signal("done")
        finally:
            await hang_up(label)
    return label


@workflow
async def napper(n: int) -> int:
    try:
        await sleep("1h")
    finally:
        await hang_up("woken")
    return n


@workflow
async def hanger(n: int) -> None:
    try:
        await wait_for_signal("done")
    finally:
        await forever()


async def _status(engine: Engine, run_id: str) -> str:
    return (await engine.get_run(run_id)).status.value


async def _busy(engine: Engine) -> list[str | None]:
    return [s.run_id for s in await engine.limits.slots("line") if s.state != "waiting"]


async def test_a_cancel_from_a_client_engine_frees_the_line_for_the_next_caller(database_url):
    """A client engine (no worker, no limits known) cancels; the worker holding the run hears of it
    (a notice, or its poll pass), delivers it, and the ``finally`` and ``limit_slot`` run."""
    options = WorkerOptions(poll_interval="50ms")
    async with Engine(database_url, workspace=LINES, options=options) as engine:
        first = await call.start("a")
        await eventually(lambda: _busy_is(engine, [first.id]), what="the first call to hold the line")
        second = await call.start("b")
        await eventually(lambda: _queued(engine, second.id), what="the second call to queue")
        client = Engine(database_url)
        try:
            await client.cancel(first.id)
        finally:
            client.close()
        await eventually(lambda: _busy_is(engine, [second.id]), what="the line to go to the second call")
        with pytest.raises(RunFailedError) as info:
            await first.result(timeout="10s")
        assert isinstance(info.value.cause, RunCancelled)
        assert [(s.name, s.status) for s in await first.steps()] == [
            ("Esperando hueco · line", "completed"),
            ("done", "cancelled"),
            ("hang_up", "completed"),
            ("release_slot", "completed"),
        ]
        await second.signal("done")
        assert await second.result(timeout="10s") == "b"
        assert calls == ["a", "b"]


async def _busy_is(engine: Engine, expected: list[str]) -> bool:
    return await _busy(engine) == expected


async def _queued(engine: Engine, run_id: str) -> bool:
    return any(s.run_id == run_id and s.state == "waiting" for s in await engine.limits.slots("line"))


def engine_on(url: str, clock: SimulatedClock, **options) -> Engine:
    options = {"poll_interval": None, "evict_after": None, "max_resident_runs": 0, **options}
    engine = Engine(url, clock=clock, options=WorkerOptions(**options))
    run_store_inline(engine)
    return engine


async def test_an_evicted_sleeper_is_taken_up_and_gets_the_cancel(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        run = await napper.start(1)
        await clock.advance(0)
        assert engine.worker.live == {}  # asleep, out of memory
        await engine.cancel(run.id)
        await clock.advance(0)
        assert await _status(engine, run.id) == "cancelled"
        assert [(s.name, s.status) for s in await run.steps()] == [
            ("sleep", "cancelled"),
            ("hang_up", "completed"),
        ]
        assert calls == ["woken"]


async def test_the_grace_period_ends_a_run_whatever_it_does(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock, cancel_grace="10s") as engine:
        run = await hanger.start(1)
        await clock.advance(0)
        await engine.cancel(run.id)
        await clock.advance("9s")
        assert await _status(engine, run.id) == "running"  # its finally waits in a step
        await clock.advance("1s")
        assert await _status(engine, run.id) == "cancelled"
        assert [(s.name, s.status) for s in await run.steps()] == [("done", "cancelled")]
        assert engine.worker.live == {}


def test_cancel_grace_is_a_duration():
    assert WorkerOptions().cancel_grace_ms == 30_000
    assert WorkerOptions(cancel_grace="2m").cancel_grace_ms == 120_000
    with pytest.raises(DuroError, match="cancel_grace"):
        WorkerOptions(cancel_grace="soon")
