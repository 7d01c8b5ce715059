"""Cancelling is delivered into the code, under the harness (both variants of ``duro_env``: waiting
runs resident, and every waiting run evicted at once and replayed when the cancel comes)."""

from __future__ import annotations

import asyncio

import pytest

from duro import (
    RunCancelled,
    RunFailedError,
    acquire_slot,
    child,
    limit_slot,
    release_slot,
    sleep,
    step,
    wait_for_signal,
    with_limit,
    workflow,
)
from duro.tooling import history_to_json

pytestmark = pytest.mark.duro(project="tests/integration/harness_project")
HOOK = "Esperando hueco · voice-calls"
calls: list[str] = []
gate: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    gate.clear()


@step
async def cleanup(tag: str) -> str:
    calls.append(tag)
    return tag


@step
async def slow(tag: str) -> str:
    """A step whose body waits for the test (real I/O, say)."""
    await gate.setdefault(tag, asyncio.Event()).wait()
    calls.append(tag)
    return tag


@step
async def forever() -> None:
    await asyncio.Event().wait()


@workflow
async def tidy(inp: dict) -> str:
    try:
        if inp.get("sleep"):
            await sleep("1h")
        else:
            await wait_for_signal("go")
    finally:
        await cleanup("finally")
    return "done"


@workflow
async def line(inp: dict) -> str:
    async with limit_slot("voice-calls", label=inp["label"]):
        await wait_for_signal("hang up")
    return inp["label"]


@workflow
async def line_fn(inp: dict) -> str:
    await with_limit("voice-calls", lambda: wait_for_signal("hang up"), label=inp["label"])
    return inp["label"]


@workflow
async def bare(inp: dict) -> None:
    await acquire_slot("voice-calls")
    await wait_for_signal("go")


@workflow
async def guarded(inp: dict) -> str:
    slot = await acquire_slot("voice-calls")
    try:
        await slow("work")
    finally:
        await release_slot(slot.id)
    return "done"


@workflow
async def stubborn(inp: dict) -> str:
    try:
        await wait_for_signal("go")
    except RunCancelled:
        calls.append("caught")
        try:
            await sleep("1s")  # a wait: refused at once
        except RunCancelled:
            calls.append("refused")
        await cleanup("after")
        return "swallowed"  # the run ends cancelled all the same
    return "signalled"


@workflow
async def stuck(inp: dict) -> None:
    try:
        await wait_for_signal("go")
    finally:
        await forever()


@workflow
async def parent(inp: dict) -> str:
    try:
        return await child(tidy, {}, run_id="kid")
    finally:
        await cleanup("parent")


async def _cancelled(env, run) -> None:
    await env.assert_status(run, "cancelled")
    with pytest.raises(RunFailedError) as info:
        await run.result()
    assert info.value.status == "cancelled" and isinstance(info.value.cause, RunCancelled)


async def test_finally_runs_and_records_its_step(duro_env):
    run = await duro_env.start(tidy, {})
    await duro_env.run_until_idle()
    await run.cancel()
    await duro_env.run_until_idle()
    await _cancelled(duro_env, run)
    assert await duro_env.steps(run) == [("go", "cancelled"), ("cleanup", "completed")]
    assert calls == ["finally"]


async def test_a_sleeping_run_gets_the_cancel_and_its_sleep_is_closed(duro_env):
    run = await duro_env.start(tidy, {"sleep": True})
    await duro_env.run_until_idle()
    await run.cancel()
    await duro_env.run_until_idle()
    await _cancelled(duro_env, run)
    assert await duro_env.steps(run) == [("sleep", "cancelled"), ("cleanup", "completed")]
    await duro_env.advance("2h")
    assert calls == ["finally"]


@pytest.mark.parametrize("flow", [line, line_fn], ids=["limit_slot", "with_limit"])
async def test_limit_slot_and_with_limit_release_on_cancel_and_the_next_waiter_gets_the_slot(duro_env, flow):
    first = await duro_env.start(flow, {"label": "a"})
    second = await duro_env.start(flow, {"label": "b"})
    await duro_env.run_until_idle()
    assert (await duro_env.busy("voice-calls"), await duro_env.queue("voice-calls")) == (
        [first.id],
        [second.id],
    )
    await first.cancel()
    await duro_env.run_until_idle()
    await _cancelled(duro_env, first)
    assert await duro_env.busy("voice-calls") == [second.id]
    assert await duro_env.steps(first) == [
        (HOOK, "completed"),
        ("hang up", "cancelled"),
        ("release_slot", "completed"),
    ]
    await second.signal("hang up")
    assert await second.result() == "b"


async def test_a_cancelled_waiter_leaves_the_queue_with_its_hook_step_cancelled(duro_env):
    first = await duro_env.start(line, {"label": "a"})
    second = await duro_env.start(line, {"label": "b"})
    third = await duro_env.start(line, {"label": "c"})
    await duro_env.run_until_idle()
    await second.cancel()
    await duro_env.run_until_idle()
    await _cancelled(duro_env, second)
    assert await duro_env.steps(second) == [(HOOK, "cancelled")]
    await duro_env.assert_limit("voice-calls", busy=1, waiting=1)
    await first.signal("hang up")
    await duro_env.run_until_idle()
    assert await duro_env.busy("voice-calls") == [third.id]


async def test_a_step_executing_is_not_interrupted_and_the_finally_releases(duro_env):
    """The cancel comes while a step's body runs: the body finishes and is recorded, the step's call
    raises RunCancelled, and the ``finally`` releases the slot."""
    run = await duro_env.start(guarded, {})
    waiter = await duro_env.start(line, {"label": "next"})
    await duro_env.run_until_idle()
    await run.cancel()
    await duro_env.run_until_idle()
    await duro_env.assert_status(run, "running")  # its step is still executing
    gate["work"].set()
    await duro_env.run_until_idle()
    await _cancelled(duro_env, run)
    assert await duro_env.steps(run) == [
        (HOOK, "completed"),
        ("slow", "completed"),
        ("cancel", "cancelled"),
        ("release_slot", "completed"),
    ]
    assert calls == ["work"] and await duro_env.busy("voice-calls") == [waiter.id]


async def test_waits_after_the_cancel_are_refused_and_the_run_ends_cancelled_anyway(duro_env):
    run = await duro_env.start(stubborn, {})
    await duro_env.run_until_idle()
    await run.cancel()
    await duro_env.run_until_idle()
    await _cancelled(duro_env, run)
    assert calls == ["caught", "refused", "after"]
    assert await duro_env.steps(run) == [
        ("go", "cancelled"),
        ("sleep", "cancelled"),
        ("cleanup", "completed"),
    ]


async def test_a_bare_acquire_slot_keeps_its_slot(duro_env):
    run = await duro_env.start(bare, {})
    waiter = await duro_env.start(line, {"label": "next"})
    await duro_env.run_until_idle()
    await run.cancel()
    await duro_env.run_until_idle()
    await _cancelled(duro_env, run)
    assert await duro_env.steps(run) == [(HOOK, "completed"), ("go", "cancelled")]
    assert await duro_env.busy("voice-calls") == [run.id]  # ending a run releases nothing
    assert await duro_env.queue("voice-calls") == [waiter.id]


async def test_the_grace_period_stops_a_run_whose_finally_never_ends(duro_env):
    run = await duro_env.start(stuck, {})
    await duro_env.run_until_idle()
    await run.cancel()
    await duro_env.run_until_idle()
    await duro_env.advance("29s")
    await duro_env.assert_status(run, "running")  # its finally is still in its step
    await duro_env.advance("1s")  # WorkerOptions.cancel_grace: 30s by default
    await _cancelled(duro_env, run)
    assert await duro_env.steps(run) == [("go", "cancelled")]


async def test_a_run_cancelled_before_it_starts_runs_nothing(duro_env):
    run = await duro_env.start(tidy, {})
    await run.cancel()
    await duro_env.run_until_idle()
    await _cancelled(duro_env, run)
    assert await duro_env.steps(run) == [] and calls == []


async def test_each_unfinished_child_gets_its_own_delivery(duro_env):
    run = await duro_env.start(parent, {})
    await duro_env.run_until_idle()
    await run.cancel()
    await duro_env.run_until_idle()
    await _cancelled(duro_env, run)
    await _cancelled(duro_env, duro_env.handle("kid"))
    assert sorted(calls) == ["finally", "parent"]
    assert await duro_env.steps("kid") == [("go", "cancelled"), ("cleanup", "completed")]
    assert await duro_env.steps(run) == [("tidy", "cancelled"), ("cleanup", "completed")]


async def test_a_replay_delivers_the_cancel_at_the_same_call(duro_env):
    """The box dies in the ``finally`` (its step ran, its record is not in): the next engine replays
    the run, which raises RunCancelled at the same call and runs the ``finally`` again."""
    run = await duro_env.start(tidy, {})
    await duro_env.run_until_idle()
    duro_env.crash_at("step.executed")
    await run.cancel()
    await duro_env.run_until_idle()
    assert duro_env.restarts == 1
    await _cancelled(duro_env, run)
    steps = await duro_env.engine.steps(run.id)
    assert [(s.seq, s.name, s.status) for s in steps] == [(0, "go", "cancelled"), (1, "cleanup", "completed")]
    assert calls == ["finally", "finally"]  # a step is run at least once: its record was lost
    record = duro_env.engine.store.runs.get(run.id)
    checked = await duro_env.replay(history_to_json(record, duro_env.engine.store.steps.of(run.id)))
    assert not checked.diverged and (checked.ended, checked.replayed) == ("raised", 2)


async def test_the_replay_check_sees_a_cancel_delivered_as_a_step_returned(duro_env):
    run = await duro_env.start(guarded, {})
    await duro_env.run_until_idle()
    await run.cancel()
    gate["work"].set()
    await duro_env.run_until_idle()
    record = duro_env.engine.store.runs.get(run.id)
    checked = await duro_env.replay(history_to_json(record, duro_env.engine.store.steps.of(run.id)))
    assert not checked.diverged and (checked.ended, checked.replayed) == ("raised", 4)
