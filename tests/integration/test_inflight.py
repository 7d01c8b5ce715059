"""Waiting costs nothing: a waiting run leaves its worker's memory and comes back by replay
when its wait ends, on both stores. Every wait kind: a sleep, a signal, a child, a slot's queue; a
cancellation; a worker that stops or dies; the bound on concurrent runs."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from duro import (
    ChildWorkflowError,
    Engine,
    Limit,
    RunFailedError,
    WorkerOptions,
    acquire_slot,
    child,
    define_workspace,
    release_slot,
    sleep,
    step,
    wait_for_signal,
    workflow,
)
from duro.testing import run_store_inline
from duro_harness import SimulatedClock

START = datetime(2030, 1, 1, tzinfo=UTC)


def engine_on(url: str, clock: SimulatedClock, **options) -> Engine:
    """An engine on a simulated clock with its store called inline (``clock.advance`` settles every
    run between timers); every waiting run leaves memory at once unless ``options`` say otherwise."""
    options = {"poll_interval": None, "evict_after": None, "max_resident_runs": 0, **options}
    engine = Engine(url, clock=clock, options=WorkerOptions(**options))
    run_store_inline(engine)
    return engine


def row(engine: Engine, run_id: str) -> dict:
    with engine.store.db.read() as conn:
        found = conn.execute(
            sa.text("SELECT status, owner, due_at, wake_at FROM duro_runs WHERE id = :id"), {"id": run_id}
        ).one()
    return dict(found._mapping)


calls: list[str] = []


@step
async def note(what: str) -> str:
    calls.append(what)
    return what


@pytest.fixture(autouse=True)
def _fresh_calls():
    calls.clear()


async def test_a_sleeping_run_leaves_memory_and_wakes_by_replay_at_its_time(database_url):
    @workflow
    async def nap(n: int) -> int:
        await note(f"before {n}")
        await sleep("2d")
        await note(f"after {n}")
        return n

    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        handle = await nap.start(7)
        await clock.advance(0)
        worker = engine.worker
        assert handle.id not in worker.live and worker.residents.evicted == 1
        stored = row(engine, handle.id)
        wake = clock.now_ms() + 2 * 86_400_000
        assert stored == {"status": "suspended", "owner": None, "due_at": wake, "wake_at": wake}
        await clock.advance("2d")
        assert await handle.result() == 7
    assert calls == ["before 7", "after 7"]  # the replay ran no step again


async def test_a_signal_reaches_a_run_evicted_while_it_waits_from_another_engine(database_url):
    @workflow
    async def ask(n: int) -> str:
        answer = await wait_for_signal("answer")
        return f"{n}: {answer}"

    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        handle = await ask.start(1)
        await clock.advance(0)
        assert handle.id not in engine.worker.live
        assert row(engine, handle.id)["due_at"] is None  # no time limit: due only when signalled
        client = Engine(database_url, clock=clock)  # never entered: another process, say
        await client.handle(handle.id).signal("answer", "yes")
        client.close()
        engine.worker.wake()  # this process heard nothing: its poll pass (or a NOTIFY) finds it
        await clock.advance(0)
        assert await handle.result() == "1: yes"


async def test_a_signal_sent_before_the_eviction_is_not_missed(database_url):
    """The hand-back checks, in its own statement, whether what the run waits for came already."""

    @workflow
    async def ask(n: int) -> str:
        return await wait_for_signal("answer")

    clock = SimulatedClock(START)
    async with engine_on(database_url, clock, max_resident_runs=10) as engine:
        handle = await ask.start(1)
        await clock.advance(0)
        assert handle.id in engine.worker.live  # resident: it idle, nothing asked it to leave
        engine.store.signals.send(handle.id, "answer", '"early"', clock.now_ms())  # not told locally
        await engine.worker.residents.give_up((engine.worker.live[handle.id].idle,))
        assert row(engine, handle.id)["due_at"] == clock.now_ms()  # due at once


async def test_a_parent_evicted_while_its_child_runs_goes_on_when_the_child_ends(database_url):
    @workflow
    async def kid(n: int) -> int:
        await sleep("1h")
        return n * 2

    @workflow
    async def parent(n: int) -> int:
        return await child(kid, n) + 1

    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        handle = await parent.start(5)
        await clock.advance(0)
        assert engine.worker.live == {}  # both evicted: the parent waits, the child sleeps
        assert row(engine, handle.id)["status"] == "blocked"
        await clock.advance("1h")
        assert await handle.result() == 11


async def test_a_child_cancelled_while_its_parent_is_evicted_fails_the_parent(database_url):
    @workflow
    async def kid(n: int) -> int:
        await sleep("1h")
        return n

    @workflow
    async def parent(n: int) -> int:
        return await child(kid, n, run_id="the-kid")

    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        handle = await parent.start(5)
        await clock.advance(0)
        await engine.cancel("the-kid")
        await clock.advance(0)
        with pytest.raises(RunFailedError) as info:
            await handle.result()
        assert isinstance(info.value.cause, ChildWorkflowError)


async def test_a_cancelled_evicted_run_runs_nothing_more(database_url):
    @workflow
    async def nap(n: int) -> int:
        await sleep("1h")
        await note("woke")
        return n

    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        handle = await nap.start(1)
        await clock.advance(0)
        await engine.cancel(handle.id)
        assert row(engine, handle.id)["due_at"] == clock.now_ms()  # due: its replay gets the cancel
        await clock.advance(0)
        assert await handle.status() == "cancelled"
        assert row(engine, handle.id)["due_at"] is None
        await clock.advance("2h")
        assert await handle.status() == "cancelled"
    assert calls == []


LIMITS = define_workspace(limits={"line": Limit(capacity=1, max_hold="1h")})


async def test_a_slot_goes_to_a_waiter_evicted_from_memory_in_the_release(database_url):
    @workflow
    async def call(n: int) -> int:
        slot = await acquire_slot("line")
        await wait_for_signal("hang up")
        await release_slot(slot.id)
        return n

    clock = SimulatedClock(START)
    engine = Engine(
        database_url,
        workspace=LIMITS,
        clock=clock,
        options=WorkerOptions(poll_interval=None, evict_after=None, max_resident_runs=0),
    )
    run_store_inline(engine)
    async with engine:
        first, second = await call.start(1), await call.start(2)
        await clock.advance(0)
        assert engine.worker.live == {}  # one holds the slot and waits for a signal, one queues
        await first.signal("hang up")
        await clock.advance(0)
        assert await first.result() == 1
        await second.signal("hang up")
        await clock.advance(0)
        assert await second.result() == 2
        assert engine.worker.residents.evicted >= 3


async def test_a_stopping_worker_hands_waiting_runs_back_due_when_their_wait_ends(database_url):
    @workflow
    async def nap(n: int) -> int:
        await sleep("1d")
        return n

    clock = SimulatedClock(START)
    async with engine_on(database_url, clock, max_resident_runs=10) as engine:
        handle = await nap.start(1)
        await clock.advance(0)
        assert handle.id in engine.worker.live  # resident (no evict_after, under the bound)
    stored = row(engine, handle.id)
    engine.close()
    assert stored["owner"] is None and stored["due_at"] == clock.now_ms() + 86_400_000
    async with engine_on(database_url, clock) as engine:
        engine.register(nap)
        await clock.advance("1h")
        assert engine.worker.live == {}  # not replayed at the start: not due
        await clock.advance("1d")
        assert await engine.handle(handle.id).result() == 1


async def test_a_dead_workers_runs_come_back_as_they_were_executing_or_waiting(database_url):
    """Runs that were executing are due at once; runs it only held while they waited stay where
    their wait puts them."""
    gate = asyncio.Event()

    @step
    async def blocked() -> str:
        await gate.wait()
        return "ok"

    @workflow
    async def busy(n: int) -> str:
        return await blocked()

    @workflow
    async def nap(n: int) -> int:
        await sleep("1d")
        return n

    clock = SimulatedClock(START)
    old = engine_on(database_url, clock, max_resident_runs=10)
    await old.__aenter__()
    executing, waiting = await busy.start(1), await nap.start(2)
    await clock.advance(0)
    dead = old.worker.id
    await old.abandon()
    old.store.workers.remove(dead, clock.now_ms())  # found dead
    assert row(old, executing.id)["due_at"] <= clock.now_ms()
    assert row(old, waiting.id)["due_at"] == clock.now_ms() + 86_400_000
    old.close()
    gate.set()
    async with engine_on(database_url, clock, max_resident_runs=10) as engine:
        engine.register(busy)
        engine.register(nap)
        await clock.advance(0)
        assert await engine.handle(executing.id).result() == "ok"
        assert waiting.id not in engine.worker.live
        await clock.advance("1d")
        assert await engine.handle(waiting.id).result() == 2


async def test_a_worker_executes_at_most_max_concurrent_runs_at_once(database_url):
    running = {"now": 0, "most": 0}
    gate = asyncio.Event()

    @step
    async def work(n: int) -> int:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await gate.wait()
        running["now"] -= 1
        return n

    @workflow
    async def job(n: int) -> int:
        return await work(n)

    clock = SimulatedClock(START)
    async with engine_on(database_url, clock, max_concurrent_runs=2) as engine:
        handles = [await job.start(n) for n in range(5)]
        await clock.advance(0)
        assert running["most"] == 2
        owners = [row(engine, h.id)["owner"] for h in handles]
        assert owners.count(None) == 3  # left to the store, due now
        gate.set()
        for _ in range(10):
            await clock.advance(0)
        assert [await h.result() for h in handles] == list(range(5))
        assert running["most"] == 2


async def test_an_event_wait_is_evicted_after_evict_after_of_real_idleness(sqlite_url):
    """With the system clock: a run idle on a signal stays ``evict_after`` and then leaves."""

    @workflow
    async def ask(n: int) -> str:
        return await wait_for_signal("answer")

    async with Engine(sqlite_url, options=WorkerOptions(evict_after="50ms")) as engine:
        handle = await ask.start(1)
        residents = engine.worker.residents
        async with asyncio.timeout(10):
            while residents.evicted == 0:
                await asyncio.sleep(0.01)
        assert handle.id not in engine.worker.live
        await handle.signal("answer", "late")
        assert await handle.result(timeout="10s") == "late"


async def test_a_retry_delay_is_recorded_and_the_run_leaves_memory_until_the_next_attempt(database_url):
    attempts: list[int] = []

    @step(retries=2, retry_delay="1m")
    async def flaky(n: int) -> int:
        attempts.append(n)
        if len(attempts) < 3:
            raise RuntimeError("not yet")
        return n

    @workflow
    async def job(n: int) -> int:
        return await flaky(n)

    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        handle = await job.start(4)
        await clock.advance(0)
        assert handle.id not in engine.worker.live and attempts == [4]
        steps = await handle.steps()
        assert (steps[0].status, steps[0].detail) == ("waiting", {"attempts": 1})
        assert row(engine, handle.id)["due_at"] == clock.now_ms() + 60_000
        await clock.advance("1m")
        assert attempts == [4, 4]  # the second attempt, after a replay; the third waits 2 minutes
        await clock.advance("2m")
        assert await handle.result() == 4
    assert attempts == [4, 4, 4]
