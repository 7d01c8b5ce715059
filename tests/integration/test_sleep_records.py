"""A run does not wait for its sleep's record to commit (one suspension per wake-up instead of two),
so a record that does not take must still stop the run: at once while it sleeps, with why."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from duro import Engine, WorkerOptions, sleep, step, workflow
from duro_harness import SimulatedClock
from tests.support.waiting import eventually

START = datetime(2030, 1, 1, tzinfo=UTC)


async def test_a_run_whose_sleep_record_is_fenced_stops_at_once_instead_of_sleeping(database_url):
    """Another worker took the run between its last awaited write and its sleep: the sleep's
    record is fenced, and the run leaves this worker now, not three days later."""
    outside = sa.create_engine(database_url)

    def take_the_run_away(run_id: str) -> None:
        with outside.begin() as conn:
            conn.execute(
                sa.text("UPDATE duro_runs SET owner = 'another-worker' WHERE id = :id"), {"id": run_id}
            )

    @step
    async def prepare() -> int:
        return 1

    @workflow(name="stolen_nap")
    async def stolen_nap(run_id: str) -> str:
        await prepare()
        take_the_run_away(run_id)  # not a step: between the step's committed record and the sleep
        await sleep("3d")
        return "woke"

    clock = SimulatedClock(START)
    try:
        async with Engine(database_url, clock=clock, options=WorkerOptions(poll_interval=None)) as engine:
            engine.register(stolen_nap)
            # a live worker, or this one would find the run's new owner dead and claim it back
            engine.store.workers.register("another-worker", engine.namespace, "elsewhere", 1, clock.now_ms())
            run_id = "run-stolen"
            await engine.start("stolen_nap", run_id, run_id=run_id)
            await eventually(lambda: run_id not in engine.worker.live, what="the run to leave the worker")
            assert clock.now_ms() == int(START.timestamp() * 1000)  # no time passed: it did not sleep
            assert [s.name for s in await engine.steps(run_id)] == [
                "prepare"
            ]  # the sleep's record did not take
            info = await engine.get_run(run_id)
            assert info.status == "running"  # left as the other worker's, untouched by this one
    finally:
        outside.dispose()


async def test_a_sleep_record_the_store_refuses_fails_the_run_with_the_error(sqlite_url):
    """A store that fails the sleep's record (here a trigger aborting it, as a full disk would):
    the run fails at once with the store's error instead of sleeping on an unrecorded sleep."""
    clock = SimulatedClock(START)

    @workflow(name="doomed_nap")
    async def doomed_nap() -> str:
        await sleep("1h")
        return "woke"

    async with Engine(sqlite_url, clock=clock, options=WorkerOptions(poll_interval=None)) as engine:
        engine.register(doomed_nap)
        outside = sa.create_engine(sqlite_url)
        with outside.begin() as conn:
            conn.execute(
                sa.text(
                    "CREATE TRIGGER refuse_sleeps BEFORE INSERT ON duro_steps WHEN NEW.kind = 'sleep' "
                    "BEGIN SELECT RAISE(ABORT, 'no room left for sleeps'); END"
                )
            )
        outside.dispose()
        handle = await engine.start("doomed_nap")
        info = await eventually(lambda: _ended(engine, handle.id), what="the run to end")
        assert info.status == "failed"
        assert info.error["message"] == "no room left for sleeps"
        assert await engine.steps(handle.id) == []
        assert clock.now_ms() == int(START.timestamp() * 1000)


async def _ended(engine: Engine, run_id: str):
    info = await engine.get_run(run_id)
    return info if info.status.terminal else None
