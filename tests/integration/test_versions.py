"""Versions coexist, on SQLite and a real PostgreSQL: a run executes on the code of its recorded
version, a start takes the newest registered version unless it names one, a worker claims only the
versions it has, and quotas span every version."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from duro import (
    Concurrency,
    ConcurrencyLimitError,
    DuroError,
    Engine,
    WorkerOptions,
    Workflow,
    wait_for_signal,
    workflow,
)
from duro.testing import run_store_inline
from duro_harness import SimulatedClock

START = datetime(2030, 1, 1, tzinfo=UTC)
QUOTA = Concurrency(key=lambda inp: "card:shared", limit=4)


@workflow(name="charge", version="1", concurrency=QUOTA)
async def charge_v1(amount: int) -> str:
    await wait_for_signal("go", timeout="1d")
    return f"v1 charged ${amount}"


@workflow(name="charge", version="2", concurrency=QUOTA)
async def charge_v2(amount: int) -> str:
    await wait_for_signal("go", timeout="1d")
    return f"v2 charged {amount * 100}c"


def engine_on(url: str, clock: SimulatedClock, *versions) -> Engine:
    engine = Engine(url, clock=clock, options=WorkerOptions(poll_interval=None, evict_after=None))
    run_store_inline(engine)
    for wf in versions:
        engine.register(wf)
    return engine


async def status(engine: Engine, run_id: str) -> str:
    return (await engine.get_run(run_id)).status.value


async def test_runs_finish_on_their_own_version_while_new_starts_take_the_newest(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock, charge_v1) as old:
        in_flight = [await old.start("charge", n) for n in (1, 2)]
        await clock.advance(1)
        assert [await status(old, h.id) for h in in_flight] == ["suspended", "suspended"]
    old.close()

    async with engine_on(database_url, clock, charge_v1, charge_v2) as both:
        assert both.spec_for("charge").version == "2"
        fresh = await both.start("charge", 3)
        pinned = await both.start("charge", 4, version="1")
        await clock.advance(1)
        for handle in [*in_flight, fresh, pinned]:
            await both.signal(handle.id, "go")
        await clock.advance(1)
        results = [await both.result(h.id, timeout=5) for h in [*in_flight, fresh, pinned]]
        assert results == ["v1 charged $1", "v1 charged $2", "v2 charged 300c", "v1 charged $4"]
        assert [(await both.get_run(h.id)).version for h in [*in_flight, fresh, pinned]] == [
            "1",
            "1",
            "2",
            "1",
        ]
        with pytest.raises(DuroError, match="no version '7' here"):
            await both.start("charge", 5, version="7")
    both.close()


async def test_a_worker_without_a_runs_version_leaves_it_pending(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock, charge_v1) as old:
        waiting = await old.start("charge", 1)
        await clock.advance(1)
    old.close()
    # a version-1 run queued while no worker runs: only version-2 code comes up
    async with engine_on(database_url, clock) as client:
        client.register_remote("charge", "1", concurrency=QUOTA)
        queued = await client.start("charge", 2, version="1")
    client.close()

    async with engine_on(database_url, clock, charge_v2) as new_only:
        await new_only.signal(waiting.id, "go")
        await clock.advance(60_000)
        assert await status(new_only, queued.id) == "pending"  # waits for a worker with version 1
        assert await status(new_only, waiting.id) == "suspended"  # its signal waits for it too
        run = await new_only.get_run(queued.id)
        assert (run.version, run.status.value) == ("1", "pending")
        # quotas span every version: two version-1 runs and two version-2 fill the key's 4
        extra = [await new_only.start("charge", n) for n in (3, 4)]
        with pytest.raises(ConcurrencyLimitError):
            await new_only.start("charge", 5)
        for handle in extra:
            await new_only.cancel(handle.id)
    new_only.close()

    async with engine_on(database_url, clock, charge_v1, charge_v2) as both:
        await clock.advance(1)
        await both.signal(queued.id, "go")
        await clock.advance(1)
        assert await both.result(waiting.id, timeout=5) == "v1 charged $1"
        assert await both.result(queued.id, timeout=5) == "v1 charged $2"
    both.close()


class ChargeV3(Workflow):
    name, version, concurrency = "charge", "3", QUOTA

    async def run(self, ctx, amount: int) -> str:
        return f"v3 charged {amount}"


async def test_start_and_dispatch_take_the_same_arguments_in_both_forms(database_url):
    """``start`` and ``dispatch`` are one implementation for both forms: ``version=`` included."""
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock, charge_v1, charge_v2, ChargeV3) as engine:
        run_id = await charge_v2.dispatch(5, engine=engine, version="1")
        class_id = await ChargeV3.dispatch(6, engine=engine, version="2")
        handle = await ChargeV3().start(7, engine=engine)  # an instance starts its class
        await clock.advance(1)
        assert [(await engine.get_run(rid)).version for rid in (run_id, class_id, handle.id)] == [
            "1",
            "2",
            "3",
        ]
        assert await engine.result(handle.id, timeout=5) == "v3 charged 7"
    engine.close()
