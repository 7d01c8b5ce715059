"""duro.current_run() and duro.send_signal(): a run knows who it is (in its code and in its steps),
and signals another run as a durable call — recorded with the signal in one transaction, so a replay
(after a crash right after the send, say) sends nothing again."""

from __future__ import annotations

import asyncio
import pickle
import threading

import pytest

from duro import (
    CurrentRun,
    DuroError,
    Engine,
    Workflow,
    current_run,
    send_signal,
    step,
    wait_for_signal,
    workflow,
)
from duro.tooling import history_to_json

SEEN: list[tuple[str, CurrentRun]] = []


@step
def sync_whoami() -> str:
    SEEN.append((threading.current_thread().name, current_run()))
    return current_run().id


@step
async def async_whoami() -> str:
    SEEN.append(("async", current_run()))
    return current_run().workflow


@workflow(name="whoami", version="3")
async def whoami() -> list[str]:
    me = current_run()
    return [me.id, me.workflow, me.version, me.namespace, await sync_whoami(), await async_whoami()]


@workflow
class WhoAmIClass(Workflow):
    name = "whoami.class"

    async def run(self, ctx) -> list[str]:
        me = current_run()
        assert me.id == ctx.run_id
        return [me.id, me.workflow, me.version]


@workflow
async def receiver() -> list:
    return [await wait_for_signal("ping", timeout="1h"), await wait_for_signal("ping", timeout="1h")]


@workflow
async def sender(target: str) -> str:
    await send_signal(target, "ping", {"from": current_run().id})
    await wait_for_signal("go", timeout="1h")  # a wait after the send: the run is replayed past it
    return "sent"


@workflow
class ClassSender(Workflow):
    name = "class.sender"

    async def run(self, ctx, target: str) -> str:
        await ctx.send_signal(target, "ping", 7)
        return "sent"


@workflow
async def sends_to_nobody(target: str) -> str:
    try:
        await send_signal(target, "ping")
    except DuroError as err:
        return f"refused: {err}"
    return "sent"


@step
async def signal_from_step(target: str) -> None:
    await send_signal(target, "ping", "from a step")


@workflow
async def step_sender(target: str) -> None:
    await signal_from_step(target)


@pytest.fixture(autouse=True)
def clean():
    SEEN.clear()


async def test_current_run_in_workflow_code_and_its_steps(duro_env):
    run = await duro_env.start(whoami)
    out = await run.result()
    assert out == [run.id, "whoami", "3", "default", run.id, "whoami"]
    assert [seen for _, seen in SEEN] == [CurrentRun(run.id, "whoami", "3", "default")] * 2
    assert isinstance(SEEN[0][1], tuple)
    with pytest.raises(AttributeError):
        SEEN[0][1].id = "other"  # immutable


async def test_current_run_in_the_class_form(duro_env):
    run = await duro_env.start(WhoAmIClass)
    assert await run.result() == [run.id, "whoami.class", "1"]


async def test_current_run_reaches_a_sync_step_in_its_thread(tmp_path):
    async with Engine(f"sqlite:///{tmp_path / 'duro.db'}", namespace="team-a") as engine:
        run = await engine.start(whoami)
        out = await engine.result(run.id, timeout="20s")
    assert out[4] == run.id
    thread, seen = SEEN[0]
    assert thread != threading.current_thread().name  # the step ran in a step thread
    assert seen == CurrentRun(run.id, "whoami", "3", "team-a")


async def test_current_run_outside_a_run_is_a_clear_error():
    with pytest.raises(DuroError, match=r"current_run\(\) was called outside any workflow run"):
        current_run()


async def test_send_signal_from_workflow_code_is_recorded_and_never_sent_twice(duro_env):
    target = await duro_env.start(receiver)
    await duro_env.run_until_idle()
    duro_env.crash_at("signal.sent")  # the box dies as the send commits: the replay must not resend
    run = await duro_env.start(sender, target.id)
    await duro_env.run_until_idle()
    assert duro_env.restarts == 1
    steps = await run.steps()
    assert [(s.kind, s.name, s.status) for s in steps][:1] == [("send_signal", "ping", "completed")]
    await duro_env.restart()  # and a replay of a run loaded again sends nothing either
    await duro_env.run_until_idle()
    await run.signal("go")
    assert await run.result() == "sent"
    await duro_env.advance("2h")  # the receiver's second wait times out: one signal came, not two
    assert await target.result() == [{"from": run.id}, None]


async def test_the_class_form_sends_with_ctx(duro_env):
    target = await duro_env.start(receiver)
    run = await duro_env.start(ClassSender, target.id)
    assert await run.result() == "sent"
    await duro_env.advance("2h")
    assert await target.result() == [7, None]


async def test_a_send_to_an_unknown_or_ended_run_fails_the_call_and_is_recorded(duro_env):
    run = await duro_env.start(sends_to_nobody, "no-such-run")
    out = await run.result()
    assert out.startswith("refused: ") and "no-such-run" in out and "does not exist" in out
    steps = await run.steps()
    assert [(s.kind, s.status) for s in steps] == [("send_signal", "failed")]
    ended = await duro_env.start(whoami)
    await ended.result()
    run = await duro_env.start(sends_to_nobody, ended.id)
    assert "completed" in await run.result()


async def test_send_signal_outside_a_run_signals_at_once_on_the_current_engine(duro_env):
    target = await duro_env.start(receiver)
    await duro_env.run_until_idle()
    await send_signal(target.id, "ping", 1)
    await send_signal(target.id, "ping", 2)
    assert await target.result() == [1, 2]


async def test_send_signal_inside_a_step_signals_at_once(duro_env):
    target = await duro_env.start(receiver)
    run = await duro_env.start(step_sender, target.id)
    await run.result()
    assert [s.kind for s in await run.steps()] == ["step"]
    await duro_env.advance("2h")
    assert await target.result() == ["from a step", None]


async def test_send_signal_checks_its_arguments_before_anything(duro_env):
    with pytest.raises(DuroError, match="signal name"):
        await send_signal("run-1", "")
    with pytest.raises(DuroError, match="not JSON"):
        await send_signal("run-1", "ping", object())


async def test_send_signal_across_processes_sharing_the_store(database_url):
    """A run signals a run another engine (process) executes: the signal is in the store, and the
    other worker hears of it (PostgreSQL's notice, or its poll)."""
    async with Engine(database_url, namespace="a") as a, Engine(database_url, namespace="b") as b:
        a.register(sender)
        b.register(receiver)
        target = await b.start(receiver)
        run = await a.start(sender, target.id)
        for _ in range(200):
            if [s.kind for s in await b.steps(target.id)][:1] == ["signal"]:
                break
            await asyncio.sleep(0.05)
        await a.signal(run.id, "go")
        assert await a.result(run.id, timeout="20s") == "sent"
        await b.signal(target.id, "ping", "second")
        assert await b.result(target.id, timeout="20s") == [{"from": run.id}, "second"]


def test_current_run_pickles():
    me = CurrentRun("run-1", "whoami", "1", "default")
    assert pickle.loads(pickle.dumps(me)) == me


async def test_a_replay_check_of_a_history_with_sends_sends_nothing(duro_env):
    target = await duro_env.start(receiver)
    run = await duro_env.start(sender, target.id)
    await duro_env.run_until_idle()
    history = history_to_json(duro_env.engine.store.runs.get(run.id), duro_env.engine.store.steps.of(run.id))
    outcome = await duro_env.replay(history)
    assert not outcome.diverged and outcome.replayed == 1  # the send replayed, then the wait: history ends
    await duro_env.advance("2h")
    assert await target.result() == [{"from": run.id}, None]  # one signal, not two
