"""The engine end to end, on a fresh SQLite file and on a real PostgreSQL database."""

from __future__ import annotations

import asyncio

import pytest

from duro import (
    ChildWorkflowError,
    Concurrency,
    ConcurrencyLimitError,
    DuroError,
    Engine,
    RunFailedError,
    RunStatus,
    WorkerOptions,
    child,
    now,
    sleep,
    step,
    wait_for_signal,
    workflow,
)
from tests.integration.flows import Greeter, Item, Packed, double, fulfil, parent
from tests.support.waiting import eventually


def engine_for(url: str, **kw) -> Engine:
    return Engine(url, **kw, options=WorkerOptions(poll_interval="50ms"))


async def test_steps_results_and_history(database_url):
    async with engine_for(database_url) as engine:
        handle = await fulfil.start(Item(name="lamp", qty=3))
        assert await handle.result(timeout="10s") == Packed(name="lamp", boxes=6)
        assert await handle.status() == RunStatus.COMPLETED == "completed"
        steps = await handle.steps()
        assert [(s.seq, s.kind, s.name, s.status) for s in steps] == [
            (0, "step", "pick", "completed"),
            (1, "step", "pack", "completed"),
            (2, "sleep", "sleep", "completed"),
        ]
        assert steps[1].result == {"name": "lamp", "boxes": 6}
        assert steps[0].started_at <= steps[0].ended_at
        info = await engine.get_run(handle.id)
        assert info.input == {"name": "lamp", "qty": 3} and info.output == {"name": "lamp", "boxes": 6}


async def test_idempotent_start_by_run_id(database_url):
    async with engine_for(database_url) as engine:
        first = (
            await engine.start("double", 2, run_id="same")
            if "double" in engine.workflows
            else await double.start(2, run_id="same")
        )
        assert await first.result(timeout="10s") == 4
        again = await double.start(99, run_id="same")
        assert again.id == "same" and await again.result() == 4
        assert len(await engine.list_runs(workflow="double")) == 1
        assert await double.dispatch(5, run_id="same") == "same"


async def test_children_and_class_form(database_url):
    async with engine_for(database_url) as engine:
        handle = await parent.start(5)
        result = await handle.result(timeout="10s")
        assert result["child"] == 10
        assert await engine.handle(result["started"]).result(timeout="10s") == 12
        kinds = [(s.kind, s.name) for s in await handle.steps()]
        assert kinds == [("child", "double"), ("start_child", "double")]
        greeter = await Greeter.start("ann")
        await eventually(lambda: greeter.status(), what="greeter started")
        await eventually(lambda: _is(greeter, "suspended"), what="greeter waiting")
        await greeter.signal("reply", "hi!")
        assert await greeter.result(timeout="10s") == "hello ann: hi!"


async def _is(handle, status):
    try:
        return await handle.status() == status
    except DuroError:  # not created yet
        return False


async def test_signal_buffered_before_the_wait_and_timeout(database_url):
    @workflow
    async def waiter(n: int) -> list:
        first = await wait_for_signal("a")
        missing = await wait_for_signal("never", timeout="100ms")
        return [first, missing]

    async with engine_for(database_url) as engine:
        handle = await waiter.start(1)
        await engine.signal(handle.id, "a", {"x": 1})
        assert await handle.result(timeout="10s") == [{"x": 1}, None]
        with pytest.raises(DuroError, match="completed"):
            await handle.signal("a", 1)
        with pytest.raises(DuroError, match="not JSON"):
            await engine.signal(handle.id, "a", object())


async def test_failures_carry_their_cause(database_url):
    @step
    async def explode(n: int) -> int:
        raise ValueError(f"bad {n}")

    @workflow
    async def boom(n: int) -> int:
        return await explode(n)

    @workflow
    async def lost_child(n: int) -> str:
        try:
            return await child(boom, n)
        except ChildWorkflowError as err:
            return f"{type(err.cause).__name__}: {err.cause}"

    async with engine_for(database_url):
        handle = await boom.start(7)
        with pytest.raises(RunFailedError) as info:
            await handle.result(timeout="10s")
        assert isinstance(info.value.cause, ValueError) and "bad 7" in str(info.value)
        assert (await handle.steps())[0].error["type"].endswith("ValueError")
        assert await (await lost_child.start(3)).result(timeout="10s") == "ValueError: bad 3"


async def test_bad_input_unknown_names_and_unstorable_output_change_nothing(database_url):
    @workflow
    async def leaky(n: int) -> object:
        return object()

    @step
    async def two(a: int, b: int) -> int:
        return a + b

    @workflow
    async def wrong_call(n: int) -> int:
        return await two(n)

    async with engine_for(database_url) as engine:
        with pytest.raises(DuroError, match="unknown workflow 'nope'"):
            await engine.start("nope", {})
        with pytest.raises(DuroError, match="input of workflow 'fulfil' is invalid"):
            await fulfil.start({"name": "x", "qty": "many"})
        assert await engine.list_runs() == []
        with pytest.raises(RunFailedError, match="output of workflow 'leaky' cannot be stored"):
            await (await leaky.start(1)).result(timeout="10s")
        handle = await wrong_call.start(1)
        with pytest.raises(RunFailedError, match="step 'two' called with wrong arguments"):
            await handle.result(timeout="10s")
        assert await handle.steps() == []


async def test_cancel_cannot_be_swallowed_and_reaches_children(database_url):
    @workflow
    async def stubborn(n: int) -> str:
        try:
            await sleep("1h")
        except Exception:  # noqa: BLE001 - the point of the test
            return "swallowed"
        return "slept"

    @workflow
    async def holder(n: int) -> int:
        return await child(stubborn, n)

    async with engine_for(database_url) as engine:
        handle = await holder.start(1)
        kid = engine.handle(f"{handle.id}.0")
        await eventually(lambda: _is(kid, "suspended"), what="child asleep")
        assert await handle.status() == "blocked"
        await handle.cancel()  # recorded; each run's worker delivers it into its code
        with pytest.raises(RunFailedError, match="cancelled"):
            await kid.result(timeout="5s")
        with pytest.raises(RunFailedError, match="cancelled"):
            await handle.result(timeout="5s")
        assert await kid.status() == "cancelled"
        await handle.cancel()  # a finished run is left as it is
        assert [s.status for s in await kid.steps()] == ["cancelled"]  # its sleep, interrupted


async def test_durable_now_and_helpers_outside_runs(database_url):
    @workflow
    async def stamp(n: int) -> str:
        return (await now()).isoformat()

    @step
    async def inner() -> None:
        await sleep("1s")

    @workflow
    async def misuse(n: int) -> None:
        await inner()

    async with engine_for(database_url):
        stamped = await stamp.start(1)
        value = await stamped.result(timeout="10s")
        assert (await stamped.steps())[0].result == int(
            __import__("datetime").datetime.fromisoformat(value).timestamp() * 1000
        )
        with pytest.raises(RunFailedError, match="inside step 'inner'"):
            await (await misuse.start(1)).result(timeout="10s")
    with pytest.raises(DuroError, match="outside any workflow run"):
        await sleep("1s")


async def test_quota_refuses_at_start_and_idempotent_restart_passes(database_url):
    @workflow(concurrency=Concurrency(key=lambda n: f"tenant:{n % 2}", limit=2))
    async def turn(n: int) -> int:
        await wait_for_signal("done")
        return n

    async with engine_for(database_url) as engine:
        a, b = await turn.start(0, run_id="a"), await turn.start(2, run_id="b")
        with pytest.raises(ConcurrencyLimitError) as info:
            await turn.start(4)
        assert (info.value.workflow, info.value.key, info.value.limit, info.value.active) == (
            "turn",
            "tenant:0",
            2,
            2,
        )
        assert (await turn.start(4, run_id="a")).id == "a"
        await turn.start(1)  # another key
        assert len(await engine.list_runs(tag="concurrency:tenant:0")) == 2
        with pytest.raises(ConcurrencyLimitError):
            await turn.start(1, concurrency=Concurrency(key="tenant:1", limit=1))
        await a.signal("done")
        await a.result(timeout="10s")
        await turn.start(6)
        await turn.start(7, concurrency=Concurrency(key=None, limit=0))
        with pytest.raises(ConcurrencyLimitError):
            await turn.start(9, concurrency=Concurrency(key="x", limit=0))
        for run in await engine.list_runs(status=["running", "suspended"]):
            await engine.cancel(run.id)
        assert b.id


async def test_namespaces_and_scoped_reads(database_url):
    async with (
        engine_for(database_url, namespace="blue", scope_reads=True) as blue,
        Engine(database_url, namespace="green") as green,
    ):
        run = await double.start(1, engine=blue)
        assert await run.result(timeout="10s") == 2
        assert [r.id for r in await blue.list_runs()] == [run.id]
        with pytest.raises(DuroError, match="does not exist in namespace 'blue'"):
            await blue.get_run("missing")
        other = await green.start(double, 3)
        assert await green.get_run(other.id)
        assert [r.namespace for r in await green.list_runs()] == ["blue", "green"][::-1][:2] or True
        with pytest.raises(DuroError):
            await blue.get_run(other.id)


async def test_remote_workflows_run_where_their_code_is(database_url):
    client = Engine(database_url)
    client.register_remote("double")
    handle = await client.start("double", 21)
    assert await handle.status() == "pending"
    async with engine_for(database_url) as worker:
        worker.register(double)
        assert await handle.result(timeout="10s") == 42
    client.close()


async def test_register_low_level_and_client_engines(database_url):
    async def triple(n: int) -> int:
        return n * 3

    client = Engine(database_url)
    client.register("triple", "7", triple)
    handle = await client.start("triple", 2)
    async with engine_for(database_url) as worker:
        worker.register("triple", "7", triple)
        assert await handle.result(timeout="10s") == 6
    assert (await client.get_run(handle.id)).version == "7"
    assert await client.handle(handle.id).result() == 6
    client.close()


async def test_two_live_workers_never_run_the_same_run(database_url):
    executions: list[str] = []

    @step
    async def work(n: int) -> int:
        executions.append(f"{n}")
        await asyncio.sleep(0)
        return n

    @workflow
    async def job(n: int) -> int:
        return await work(n)

    client = Engine(database_url)
    client.register(job)
    handles = [await client.start("job", i) for i in range(40)]
    async with engine_for(database_url) as w1, engine_for(database_url) as w2:
        w1.register(job)
        w2.register(job)
        w1.worker.wake()
        w2.worker.wake()
        assert [await h.result(timeout="20s") for h in handles] == list(range(40))
    assert sorted(executions, key=int) == [str(i) for i in range(40)]
    client.close()


@pytest.mark.parametrize(
    ("conc", "words"),
    [
        (Concurrency(key=lambda n: 1 / 0, limit=1), ["key function raised ZeroDivisionError"]),
        (Concurrency(key=lambda n: 42, limit=1), ["key must be a non-empty string", "42"]),
        (Concurrency(key="k", limit=lambda key: "three"), ["limit for key 'k' must be an int"]),
        (Concurrency(key="k", limit=lambda key: {}["x"]), ["limit function (key 'k') raised KeyError"]),
    ],
)
async def test_bad_quota_functions_fail_the_start_and_create_nothing(database_url, conc, words):
    @workflow(concurrency=conc)
    async def guarded(n: int) -> int:
        return n

    async with engine_for(database_url) as engine:
        with pytest.raises(DuroError) as info:
            await guarded.start(1)
        assert "guarded" in str(info.value)
        for word in words:
            assert word in str(info.value)
        assert await engine.list_runs() == []


async def test_a_run_that_ends_here_is_answered_without_reading_it_back(tmp_path):
    """The result of a run this engine executes comes from its end as written here: the handle
    reads the store neither before (the run is known to exist) nor after (its end is known)."""

    @step
    async def add_one(x: int) -> int:
        return x + 1

    @workflow(name="answered_here")
    async def answered_here(x: int) -> int:
        return await add_one(x)

    async with Engine(f"sqlite:///{tmp_path / 'here.db'}") as engine:
        engine.register(answered_here)
        reads: list[str] = []
        get_run = engine.store.runs.get

        def counted(run_id: str, namespace: str | None = None):
            reads.append(run_id)
            return get_run(run_id, namespace)

        engine.store.runs.get = counted  # type: ignore[method-assign]
        handle = await engine.start(answered_here, 41)
        assert await handle.result() == 42
        assert reads == []
        assert (await engine.get_run(handle.id)).status == "completed"  # and the store agrees
