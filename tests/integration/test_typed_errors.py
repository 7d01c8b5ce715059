"""Each place a run id or an input is refused raises its typed error, on both stores, and changes
nothing: RunNotFoundError, RunEndedError, InputError."""

from __future__ import annotations

import pytest

from duro import (
    Engine,
    InputError,
    RunEndedError,
    RunFailedError,
    RunNotFoundError,
    RunStatus,
    WorkerOptions,
    child,
    wait_for_signal,
    workflow,
)
from tests.integration.flows import double, fulfil
from tests.support.waiting import eventually


def engine_for(url: str, **kw) -> Engine:
    return Engine(url, **kw, options=WorkerOptions(poll_interval="50ms"))


@workflow
async def waits() -> str:
    return await wait_for_signal("go")


@workflow
async def hands_on(qty: str) -> int:
    return await child(fulfil, {"name": "x", "qty": qty})


async def test_every_read_and_act_on_a_missing_run_is_run_not_found(database_url):
    async with engine_for(database_url) as engine:
        handle = engine.handle("nobody")
        for call in (
            lambda: engine.get_run("nobody"),
            lambda: engine.steps("nobody"),
            lambda: engine.result("nobody", timeout="1s"),
            lambda: engine.signal("nobody", "go", {"x": 1}),
            lambda: engine.cancel("nobody"),
            handle.status,
            handle.info,
            handle.steps,
            lambda: handle.result(timeout="1s"),
            lambda: handle.signal("go"),
            handle.cancel,
        ):
            with pytest.raises(RunNotFoundError) as missing:
                await call()
            assert missing.value.run_id == "nobody" and "'nobody' does not exist" in str(missing.value)
        assert await engine.list_runs() == []


async def test_a_run_of_another_namespace_is_not_found_when_reads_are_fenced(database_url):
    async with engine_for(database_url, namespace="red") as red:
        run = await red.start(waits)
        async with engine_for(database_url, namespace="blue", scope_reads=True) as blue:
            for call in (blue.get_run, blue.cancel, lambda run_id: blue.signal(run_id, "go")):
                with pytest.raises(RunNotFoundError) as missing:
                    await call(run.id)
                assert missing.value.namespace == "blue" and "in namespace 'blue'" in str(missing.value)

        # it waits for its signal (it may still be on its way there)
        async def suspended() -> bool:
            return await run.status() == RunStatus.SUSPENDED

        await eventually(suspended, what="the run waiting for its signal")
        await run.signal("go", "on")
        assert await run.result(timeout="10s") == "on"


async def test_a_signal_to_an_ended_run_is_run_ended_and_sends_nothing(database_url):
    async with engine_for(database_url) as engine:
        done = await double.start(2)
        assert await done.result(timeout="10s") == 4
        with pytest.raises(RunEndedError) as ended:
            await done.signal("go", {"late": True})
        assert (ended.value.run_id, ended.value.status, ended.value.signal) == (done.id, "completed", "go")
        cancelled = await waits.start()
        await cancelled.cancel()  # delivered into its wait: it ends a moment later
        with pytest.raises(RunFailedError):
            await cancelled.result(timeout="10s")
        with pytest.raises(RunEndedError) as ended:
            await engine.signal(cancelled.id, "go")
        assert ended.value.status == "cancelled"
        await cancelled.cancel()  # cancelling an ended run is no error: it is left as it is
        await done.cancel()
        assert await done.status() == RunStatus.COMPLETED and await done.result() == 4


async def test_the_store_refuses_a_signal_to_a_run_that_ended_since_the_check(database_url):
    async with engine_for(database_url) as engine:
        done = await double.start(3)
        await done.result(timeout="10s")
        with pytest.raises(RunEndedError):
            engine.store.signals.send(done.id, "go", "null", 0)
        with pytest.raises(RunNotFoundError):
            engine.store.signals.send("nobody", "go", "null", 0)
        with pytest.raises(RunNotFoundError):
            engine.store.runs.cancel("nobody", None, "{}", 0)


async def test_an_input_that_does_not_match_is_an_input_error_and_starts_nothing(database_url):
    async with engine_for(database_url) as engine:
        with pytest.raises(InputError) as bad:
            await fulfil.start({"name": "lamp", "qty": "lots"})
        assert bad.value.workflow == "fulfil"
        assert [(e["type"], e["loc"]) for e in bad.value.errors] == [("int_parsing", ["qty"])]
        with pytest.raises(InputError):
            await double.start("two", run_id="kept-free")
        with pytest.raises(InputError) as no_input:
            await waits.start({"x": 1})
        assert no_input.value.workflow == "waits"
        assert await engine.list_runs() == []
        # a child's input goes the same way: the parent fails with it
        parent = await hands_on.start("lots")
        with pytest.raises(RunFailedError) as failed:
            await parent.result(timeout="10s")
        cause = failed.value.cause
        assert isinstance(cause, InputError) and cause.workflow == "fulfil"
        assert [e["loc"] for e in cause.errors] == [["qty"]]
