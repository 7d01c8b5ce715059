"""Replay and time: restarts resume where runs stopped, divergence fails loudly, and simulated
time fast-forwards sleeps, signal timeouts and step retries (SQLite, simulated clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from duro import (
    Engine,
    NonDeterminismError,
    RunFailedError,
    WorkerOptions,
    now,
    sleep,
    step,
    wait_for_signal,
    workflow,
)
from duro.testing import run_store_inline
from duro_harness import SimulatedClock
from duro_harness._clock import settle

START = datetime(2030, 1, 1, tzinfo=UTC)


def simulated_engine(url: str, clock: SimulatedClock, **kw) -> Engine:
    """An engine on a simulated clock, its store called inline (as the harness does), so that
    ``clock.advance`` lets every run settle between timers."""
    engine = Engine(url, clock=clock, **kw, options=WorkerOptions(poll_interval=None))
    run_store_inline(engine)
    return engine


async def test_a_three_day_sleep_ends_at_three_days_and_not_a_millisecond_before(sqlite_url):
    @workflow
    async def nap(n: int) -> str:
        await sleep("3d")
        return (await now()).isoformat()

    clock = SimulatedClock(START)
    async with simulated_engine(sqlite_url, clock) as engine:
        handle = await nap.start(1)
        await clock.advance(0)
        assert await handle.status() == "suspended"
        await clock.advance(timedelta(days=3) - timedelta(milliseconds=1))
        assert await handle.status() == "suspended"
        await clock.advance("1ms")
        assert await handle.status() == "completed"
        assert await handle.result() == (START + timedelta(days=3)).isoformat()
        assert engine.clock.now_ms() == clock.now_ms()


async def test_step_retries_back_off_exponentially(sqlite_url):
    attempts: list[int] = []
    clock = SimulatedClock(START)

    @step(retries=3, retry_delay="1s")
    async def flaky(n: int) -> int:
        attempts.append(clock.now_ms())
        if len(attempts) < 3:
            raise ConnectionError("try again")
        return n

    @step(retries=1, retry_delay="10s")
    async def hopeless(n: int) -> int:
        raise ConnectionError("never")

    @workflow
    async def uses(n: int) -> int:
        value = await flaky(n)
        try:
            await hopeless(n)
        except ConnectionError:
            return value + 1
        return value

    async with simulated_engine(sqlite_url, clock):
        handle = await uses.start(41)
        await clock.advance("1m")
        assert await handle.result() == 42
        start = attempts[0]
        assert [a - start for a in attempts] == [0, 1000, 3000]
        steps = await handle.steps()
        assert [(s.name, s.status, s.detail) for s in steps] == [
            ("flaky", "completed", {"attempts": 3}),
            ("hopeless", "failed", {"attempts": 2}),
        ]


async def test_signal_timeout_fires_in_simulated_time(sqlite_url):
    @workflow
    async def approval(n: int) -> str:
        answer = await wait_for_signal("approve", timeout="2h")
        return "timed out" if answer is None else answer

    clock = SimulatedClock(START)
    async with simulated_engine(sqlite_url, clock):
        late = await approval.start(1)
        early = await approval.start(2)
        await clock.advance("1h")
        await early.signal("approve", "yes")
        await clock.advance("1h")
        assert await early.result() == "yes"
        assert await late.result() == "timed out"
        assert (await late.steps())[0].detail == {"timed_out": True}


async def test_restart_resumes_without_running_completed_steps_again(sqlite_url):
    calls: list[str] = []

    @step
    async def charge(n: int) -> int:
        calls.append("charge")
        return n * 10

    @step
    async def ship(n: int) -> str:
        calls.append("ship")
        return f"shipped {n}"

    @workflow
    async def order(n: int) -> list:
        amount = await charge(n)
        await sleep("1h")
        label = await ship(n)
        signalled = await wait_for_signal("delivered")
        return [amount, label, signalled]

    clock = SimulatedClock(START)
    async with simulated_engine(sqlite_url, clock) as first:
        handle = await order.start(4)
        await clock.advance("10m")
        assert calls == ["charge"]
    # a new process: nothing in memory, the store knows everything
    second = simulated_engine(sqlite_url, clock)
    second.register(order)
    async with second:
        await clock.advance("50m")
        await settle()
        assert calls == ["charge", "ship"]
        assert await handle.status() == "suspended"
    async with simulated_engine(sqlite_url, clock) as third:
        third.register(order)
        await third.signal(handle.id, "delivered", True)
        await clock.advance("1s")
        assert await third.handle(handle.id).result() == [40, "shipped 4", True]
    assert calls == ["charge", "ship"]
    assert first.worker is None


async def test_a_replay_that_diverges_fails_with_non_determinism(sqlite_url):
    @step
    async def reserve(n: int) -> int:
        return n

    @step
    async def refund(n: int) -> int:
        return -n

    async def version_one(n: int) -> int:
        await reserve(n)
        await sleep("1h")
        return n

    async def version_two(n: int) -> int:
        await refund(n)
        await sleep("1h")
        return n

    clock = SimulatedClock(START)
    async with simulated_engine(sqlite_url, clock) as engine:
        engine.register("deal", "1", version_one)
        handle = await engine.start("deal", 5)
        await clock.advance("1m")
    async with simulated_engine(sqlite_url, clock) as engine:
        engine.register("deal", "1", version_two)
        await clock.advance("1h")  # a waiting run is replayed when its wait ends
        with pytest.raises(RunFailedError) as info:
            await engine.handle(handle.id).result()
    cause = info.value.cause
    assert isinstance(cause, NonDeterminismError)
    assert (cause.run_id, cause.seq) == (handle.id, 0)
    assert "reserve" in cause.recorded and "refund" in cause.asked
    assert handle.id in str(cause)


async def test_divergence_cannot_be_swallowed_by_workflow_code(sqlite_url):
    @step
    async def a() -> int:
        return 1

    @step
    async def b() -> int:
        return 2

    async def first() -> str:
        await a()
        await sleep("1h")
        return "first"

    async def second() -> str:
        try:
            await b()
        except Exception:  # noqa: BLE001 - the point of the test
            pass
        return "swallowed"

    clock = SimulatedClock(START)
    async with simulated_engine(sqlite_url, clock) as engine:
        engine.register("w", "1", first)
        handle = await engine.start("w")
        await clock.advance("1s")
    async with simulated_engine(sqlite_url, clock) as engine:
        engine.register("w", "1", second)
        await clock.advance("1h")  # replayed when its sleep ends
        with pytest.raises(RunFailedError, match="diverged"):
            await engine.handle(handle.id).result()
