"""Concurrency quotas, every bullet of the contract, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from duro import (
    ChildWorkflowError,
    Concurrency,
    ConcurrencyLimitError,
    DuroError,
    Engine,
    RunStatus,
    WorkerOptions,
    child,
    step,
    wait_for_signal,
    workflow,
)
from duro.store import SqlStore, store_call
from tests.support.waiting import eventually

PLANS = {"acme": 2, "globex": 1}


async def plan_limit(key: str) -> int:  # an async limit function: per-plan limits
    return PLANS[key.removeprefix("tenant:")]


@workflow(concurrency=Concurrency(key=lambda inp: f"tenant:{inp['tenant']}", limit=plan_limit))
async def chat_turn(inp: dict) -> str:
    await wait_for_signal("reply")
    return inp["tenant"]


@workflow(concurrency=Concurrency(key=lambda inp: f"tenant:{inp['tenant']}", limit=10))
async def report(inp: dict) -> str:
    await wait_for_signal("reply")
    return "report"


def engine_for(url: str, **kw) -> Engine:
    return Engine(url, **kw, options=WorkerOptions(poll_interval="50ms"))


async def refused(start) -> ConcurrencyLimitError:
    with pytest.raises(ConcurrencyLimitError) as info:
        await start
    return info.value


async def test_per_plan_limits_from_an_async_function(database_url):
    async with engine_for(database_url) as engine:
        for _ in range(2):
            await chat_turn.start({"tenant": "acme"})
        err = await refused(chat_turn.start({"tenant": "acme"}))
        assert (err.workflow, err.key, err.limit, err.active) == ("chat_turn", "tenant:acme", 2, 2)
        await chat_turn.start({"tenant": "globex"})
        await refused(chat_turn.start({"tenant": "globex"}))
        assert len(await engine.list_runs()) == 3


async def test_keys_are_global_across_workflows(database_url):
    async with engine_for(database_url):
        await report.start({"tenant": "globex"})
        # chat_turn's own limit for globex is 1, and report's run already holds the key
        err = await refused(chat_turn.start({"tenant": "globex"}))
        assert err.active == 1 and err.workflow == "chat_turn"


async def test_count_statuses_narrow_what_counts(database_url):
    running = asyncio.Event()  # the first run stays running until the test lets it go on

    @step
    async def hold() -> None:
        await running.wait()

    @workflow(
        concurrency=Concurrency(key=lambda n: "only-running", limit=1, count_statuses=("pending", "running"))
    )
    async def sleeper(n: int) -> int:
        await hold()
        await wait_for_signal("go")  # suspended: stops counting
        return n

    async with engine_for(database_url) as engine:
        first = await sleeper.start(1)
        await refused(sleeper.start(2))  # the first counts while it is pending or running
        running.set()
        await eventually(lambda: _status_is(first, "suspended"), what="first run idle")
        second = await sleeper.start(2)  # suspended runs do not count
        assert second.id != first.id and len(await engine.list_runs()) == 2


async def _status_is(handle, status):
    return await handle.status() == status


async def test_per_start_quota_replaces_the_workflows_entirely(database_url):
    async with engine_for(database_url) as engine:
        await chat_turn.start({"tenant": "globex"})
        # the workflow's key (tenant:globex, limit 1) no longer applies; this start's own does
        run = await chat_turn.start({"tenant": "globex"}, concurrency=Concurrency(key="vip", limit=1))
        info = await engine.get_run(run.id)
        assert info.tags == ("concurrency:vip",)
        await refused(chat_turn.start({"tenant": "zzz"}, concurrency=Concurrency(key="vip", limit=1)))
        unlimited = await chat_turn.start({"tenant": "globex"}, concurrency=Concurrency(key=None, limit=0))
        assert (await engine.get_run(unlimited.id)).tags == ()
        await refused(chat_turn.start({"tenant": "acme"}, concurrency=Concurrency(key="closed", limit=0)))
        await refused(chat_turn.start({"tenant": "acme"}, concurrency=Concurrency(key="closed", limit=-3)))


async def test_idempotent_restart_is_never_refused(database_url):
    async with engine_for(database_url):
        first = await chat_turn.start({"tenant": "globex"}, run_id="turn-1")
        again = await chat_turn.start({"tenant": "globex"}, run_id="turn-1")
        assert again.id == first.id


async def test_namespaces_share_quotas_unless_reads_are_scoped(database_url):
    async with (
        engine_for(database_url, namespace="a") as a,
        engine_for(database_url, namespace="b") as b,
        engine_for(database_url, namespace="c", scope_reads=True) as c,
    ):
        await a.start(chat_turn, {"tenant": "globex"})
        await refused(b.start(chat_turn, {"tenant": "globex"}))
        await c.start(chat_turn, {"tenant": "globex"})  # counts only namespace c
        await refused(c.start(chat_turn, {"tenant": "globex"}))


async def test_a_child_refused_while_another_holds_the_key(database_url):
    @workflow
    async def spawner(n: int) -> str:
        try:
            await child(chat_turn, {"tenant": "globex"})
        except ChildWorkflowError as err:
            assert isinstance(err.cause, ConcurrencyLimitError)
            return f"refused: {err.cause.key} {err.cause.active}/{err.cause.limit}"
        return "started"

    async with engine_for(database_url) as engine:
        await chat_turn.start({"tenant": "globex"})
        run = await spawner.start(1)
        assert await run.result(timeout="10s") == "refused: tenant:globex 1/1"
        step = (await run.steps())[0]
        assert (step.kind, step.status) == ("child", "failed")
        assert "ChildWorkflowError" in step.error["type"]
        assert len(await engine.list_runs(workflow="chat_turn")) == 1


async def test_event_triggers_skip_refused_subscribers(database_url):
    @workflow(name="notify", on_event="order.created")
    async def notify(inp: dict) -> str:
        return f"notified {inp['tenant']}"

    @workflow(
        name="bill",
        on_event="order.created",
        concurrency=Concurrency(key=lambda inp: f"bill:{inp['tenant']}", limit=1),
    )
    async def bill(inp: dict) -> str:
        await wait_for_signal("paid")
        return "billed"

    async with engine_for(database_url) as engine:
        engine.register(notify)
        engine.register(bill)
        first = await engine.emit("order.created", {"tenant": "acme"})
        assert sorted(h.id for h in first.started) == sorted(r.id for r in await engine.list_runs())
        assert len(first.started) == 2 and first.skipped == []
        second = await engine.emit("order.created", {"tenant": "acme"})
        assert [s.workflow for s in second.skipped] == ["bill"]
        assert isinstance(second.skipped[0].error, ConcurrencyLimitError)
        assert len(second.started) == 1
        assert (await engine.emit("nobody.listens", {})).started == []
        once = await engine.emit("order.created", {"tenant": "other"}, event_id="evt-1")
        again = await engine.emit("order.created", {"tenant": "other"}, event_id="evt-1")
        assert [h.id for h in once.started] == [h.id for h in again.started]
        with pytest.raises(DuroError, match="event name"):
            await engine.emit("bad name!", {})


async def test_register_and_register_remote_take_a_quota(database_url):
    async def plain(n: int) -> int:
        return n

    client = Engine(database_url)
    client.register("plain", "1", plain, concurrency=Concurrency(key=lambda n: "p", limit=1))
    client.register_remote("far", concurrency=Concurrency(key=lambda inp: "f", limit=1))
    await client.start("plain", 1)
    await refused(client.start("plain", 2))
    await client.start("far", {})
    await refused(client.start("far", {}))
    client.close()


def test_the_sql_store_marks_its_reads_and_bulk_writes_and_says_its_capabilities(sqlite_url):
    """Every operation is mandatory (there is no fallback for a store without count_active or
    apply_batch): a part marks where it defines them the methods that only read and those that may
    write many transactions, and the store says its capabilities."""
    store = SqlStore(sqlite_url)
    assert store_call(store.runs.count_active) == store_call(store.steps.of) == "read"
    assert store_call(store.slots.set_override) == store_call(store.slots.expire) == "bulk"
    assert store_call(store.steps.apply_batch) is store_call(store.runs.insert) is None
    assert store.batches and isinstance(store.notifies, bool)
    store.close()


def test_the_queries_on_partial_indexes_still_use_them(sqlite_url):
    """Schema 4's partial indexes (runs with a key / a parent, slots with a due time / waiting or
    reserved): the queries that need them still use them, with bound parameters."""
    store = SqlStore(sqlite_url)
    store.create_schema()
    with store._engine.connect() as conn:
        plan = conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT count(*) FROM duro_runs WHERE concurrency_key = ? "
            "AND status IN ('pending', 'running')",
            ("k",),
        ).fetchall()
        children = conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT id FROM duro_runs WHERE parent_id = ?", ("p",)
        ).fetchall()
        plans = {
            name: conn.exec_driver_sql("EXPLAIN QUERY PLAN " + store.db.queries[name], params).fetchall()
            for name, params in (
                ("run_slots", {"run_id": "r"}),
                ("due_slots", {"now": 1, "n": 10, "names": "lines"}),
                ("next_due", {}),
                ("next_due_of", {"names": "lines"}),
            )
        }
    store.close()
    assert any("duro_runs_quota" in str(row) for row in plan), plan
    assert any("duro_runs_parent" in str(row) for row in children), children
    assert any("duro_slots_run" in str(row) for row in plans["run_slots"]), plans
    assert any("duro_slots_due" in str(row) for row in plans["due_slots"]), plans
    assert any("duro_slots_due" in str(row) for row in plans["next_due_of"]), plans
    assert any("duro_slots_due" in str(row) for row in plans["next_due"]), plans


def test_statuses_are_names_or_run_statuses():
    quota = Concurrency(key="k", limit=1, count_statuses=(RunStatus.RUNNING, "pending"))
    assert quota.count_statuses == ("running", "pending")
