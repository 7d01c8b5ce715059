"""The harness itself: simulated time, restarts, crashes between two steps, determinism."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from duro import RunStatus, sleep, step, workflow
from duro_harness import DuroEnv, simulated

PROJECT = "tests/integration/harness_project"
pytestmark = pytest.mark.duro(project=PROJECT)


async def test_a_three_day_sleep_ends_after_three_days_and_not_a_millisecond_before(duro_env):
    run = await duro_env.start("nap", 3)
    await duro_env.advance(timedelta(days=3) - timedelta(milliseconds=1))
    await duro_env.assert_status(run, "suspended")
    await duro_env.advance("1ms")
    await duro_env.assert_status(run, "completed")
    assert await run.result() == "rested"
    assert duro_env.now == datetime(2030, 1, 4, tzinfo=UTC)


async def test_a_runs_times_are_its_acceptance_its_last_write_and_its_end_in_utc(duro_env):
    """What ``RunInfo`` documents: ``created_at`` is when the start was accepted and never moves;
    ``updated_at`` the last write; ``ended_at`` the end (``None`` until then)."""
    t0 = duro_env.now
    run = await duro_env.start("nap", 1)
    await duro_env.advance("1h")
    waiting = await run.info()
    assert (waiting.created_at, waiting.ended_at) == (t0, None)
    assert waiting.created_at.tzinfo == UTC
    await duro_env.advance("1d")
    done = await run.info()
    assert done.status == "completed"
    assert (done.created_at, done.ended_at, done.updated_at) == (
        t0,
        t0 + timedelta(days=1),
        t0 + timedelta(days=1),
    )


@pytest.mark.duro(project=PROJECT, start="2031-06-01T08:00:00Z")
async def test_user_code_reading_the_time_sees_simulated_time(duro_env):
    run = await duro_env.start("wall_clock", 1)
    await asyncio.sleep(0.001)  # asyncio keeps real time under freezegun
    await duro_env.advance("1h")
    seen = await run.result()
    assert seen["datetime"] == "2031-06-01T09:00:00+00:00"
    assert seen["time"] == datetime(2031, 6, 1, 9, tzinfo=UTC).timestamp()
    assert datetime.now(UTC) == duro_env.now


async def test_step_retries_are_fast_forwarded_with_backoff(duro_env):
    attempts: list[datetime] = []

    @step(retries=4, retry_delay="30s")
    async def flaky() -> str:
        attempts.append(datetime.now(UTC))
        if len(attempts) < 4:
            raise ConnectionError("partner down")
        return "ok"

    @workflow
    async def calls_partner() -> str:
        return await flaky()

    run = await duro_env.start(calls_partner)
    await duro_env.advance("29s")
    assert len(attempts) == 1
    await duro_env.advance("5m")
    assert await run.result() == "ok"
    gaps = [(b - a).total_seconds() for a, b in zip(attempts, attempts[1:], strict=False)]
    assert gaps == [30, 60, 120]


async def test_a_timeout_a_resume_and_a_sleep_chain_inside_one_advance(duro_env):
    from workflows.clocked import CALLS

    CALLS.clear()
    run = await duro_env.start("chain", 7)
    await duro_env.advance("1h")
    assert await run.result() == [None, "slept"]
    assert CALLS == ["7:after-timeout", "7:after-sleep"]
    steps = await run.steps()
    assert steps[-1].ended_at == datetime(2030, 1, 1, 0, 15, tzinfo=UTC)


async def test_a_restart_mid_run_resumes_with_no_step_executed_twice(duro_env):
    from workflows.clocked import CALLS

    CALLS.clear()
    run = await duro_env.start("chain", 1)
    await duro_env.advance("12m")  # timed out, recorded, now sleeping
    assert CALLS == ["1:after-timeout"]
    await duro_env.restart()
    await duro_env.assert_status(run, "suspended")
    await duro_env.advance("3m")
    assert await run.result() == [None, "slept"]  # a handle from before the restart
    assert CALLS == ["1:after-timeout", "1:after-sleep"]
    assert duro_env.restarts == 1


async def test_a_crash_between_a_step_and_its_record_reruns_that_step_only(duro_env):
    from workflows.clocked import CALLS

    CALLS.clear()
    duro_env.crash_at("step.executed", occurrence=2)  # the second step's result is lost
    run = await duro_env.start("chain", 2)
    await duro_env.engine.signal(run.id, "go", "now")
    await duro_env.advance("10m")
    assert await run.result() == ["now", "slept"]
    assert CALLS == ["2:after-timeout", "2:after-sleep", "2:after-sleep"]
    assert duro_env.restarts == 1


async def test_run_until_idle_lets_every_runnable_run_proceed(duro_env):
    runs = [await duro_env.start("chain", i) for i in range(3)]
    for run in runs:
        await duro_env.engine.signal(run.id, "go", run.id)
    await duro_env.run_until_idle()
    assert [await duro_env.status(r) for r in runs] == [RunStatus.SUSPENDED] * 3
    assert duro_env.now == datetime(2030, 1, 1, tzinfo=UTC)
    await duro_env.assert_steps(runs[0], "go", "record", "sleep")


async def _scenario() -> list:
    async with simulated(PROJECT) as env:
        runs = [await env.start("chain", i) for i in range(4)]
        await env.engine.signal(runs[1].id, "go", "early")
        await env.advance("2m")
        await env.engine.signal(runs[3].id, "go", "late")
        await env.advance("1h")
        return env.timeline()


async def test_the_same_scenario_gives_the_same_event_order():
    first, second = await _scenario(), await _scenario()
    assert first == second
    assert len(first) > 20
    assert [kind for _, kind, _, _ in first].count("run.completed") == 4


@pytest.mark.duro(project=PROJECT, config={"limits": {"partner-api": {"capacity": 9, "max_hold": "1h"}}})
async def test_marker_config_overrides_limits(duro_env):
    assert duro_env.engine.workspace.limits["partner-api"].capacity == 9


async def test_thirty_idle_days_cost_nothing_per_pass(duro_env):
    run = await duro_env.start("hourly", 24 * 30)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await duro_env.advance("30d")
    assert await run.result() == 720
    assert loop.time() - began < 30  # a bound against hangs, not a benchmark (see bench/harness.py)


def test_the_environment_refuses_unknown_config():
    with pytest.raises(Exception, match="only 'limits'"):
        DuroEnv(PROJECT, config={"workflows": []})


def test_duro_env_needs_an_async_test(pytester):
    pytester.makepyfile("def test_sync(duro_env):\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:asyncio")  # its config nag aside
    result.assert_outcomes(errors=1)
    assert "needs an `async def` test" in result.stdout.str()


async def test_waiting_for_an_unfinished_run_says_what_to_do_instead_of_hanging(duro_env):
    run = await duro_env.start("nap", 1)
    with pytest.raises(AssertionError, match="it is suspended at 2030-01-01T00:00:00.*advance time"):
        await run.result()
    await duro_env.advance("1d")
    assert await run.result() == "rested"


async def test_handles_from_workflow_start_survive_a_restart_too(duro_env):
    from workflows.clocked import nap

    run = await nap.start(1)  # on the current engine, not through env.start
    await duro_env.restart()
    await duro_env.advance("1d")
    assert await run.result() == "rested"


async def test_a_sleep_shows_completed_once_the_run_wakes_and_a_replay_does_not_sleep_again(duro_env):
    release = asyncio.Event()

    @step
    async def slow() -> str:
        await release.wait()
        return "done"

    @workflow(name="nap_then_work")
    async def nap_then_work() -> str:
        await sleep("1h")
        return await slow()

    duro_env.engine.register(nap_then_work)
    run = await duro_env.start("nap_then_work")
    await duro_env.run_until_idle()
    assert await duro_env.steps(run) == [("sleep", "waiting")]
    await duro_env.advance("1h")
    await duro_env.assert_status(run, "running")  # woke, inside its step
    (slept,) = await run.steps()
    assert (slept.status, slept.ended_at) == ("completed", slept.wake_at)
    await duro_env.restart()
    release.set()
    await duro_env.run_until_idle()
    assert await run.result() == "done"  # no second hour: the wake was recorded
    assert await duro_env.steps(run) == [("sleep", "completed"), ("slow", "completed")]


async def test_the_store_is_in_memory_unless_a_directory_is_given(tmp_path):
    @workflow(name="nap_a_day")
    async def nap_a_day() -> str:
        await sleep("1d")
        return "rested"

    async with simulated() as env:
        env.engine.register(nap_a_day)
        run = await env.start("nap_a_day")
        await env.restart()  # the in-memory store outlives the engine
        await env.advance("1d")
        assert await run.result() == "rested"
        assert env.engine.store.url.query["mode"] == "memory"
    async with simulated(directory=tmp_path) as env:
        env.engine.register(nap_a_day)
        run = await env.start("nap_a_day", run_id="kept")
        await env.advance("1d")
        assert await run.result() == "rested"
    assert (tmp_path / "duro.db").exists()  # left for the test to look at
    async with simulated(directory=tmp_path) as env:
        assert (await env.engine.get_run("kept")).status == "completed"


async def test_an_environment_whose_engine_cannot_start_unfreezes_time_and_drops_its_store():
    import gc

    from duro import ConfigError

    with pytest.raises(ConfigError, match="capacity"):
        async with simulated(config={"limits": {"calls": {"capacity": 0}}}):
            pass
    gc.collect()  # an unclosed store connection would warn here (warnings are errors)
    assert datetime.now(UTC) != datetime(2030, 1, 1, tzinfo=UTC)  # freezegun stopped
