"""Re-driving ended runs on SQLite and a real PostgreSQL: a retry goes on from the failing call
(the calls before it replayed, never executed again), takes a slot again before its slot-holding
work, is checked against its quota, and is refused for a run that has not ended or completed; a fork
starts a new run from a copy of the first calls; bulk retries and cancels act on what a filter
matches, and their dry runs change nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from duro import (
    BulkReport,
    Concurrency,
    ConcurrencyLimitError,
    Engine,
    Limit,
    NonDeterminismError,
    Rate,
    RunFailedError,
    RunNotFoundError,
    RunStatusError,
    WorkerOptions,
    acquire_rate,
    child,
    define_workspace,
    limit_slot,
    sleep,
    step,
    wait_for_signal,
    workflow,
)
from duro.testing import run_store_inline
from duro_harness import SimulatedClock

START = datetime(2030, 1, 1, tzinfo=UTC)
WORKSPACE = define_workspace(
    limits={"payments": Limit(capacity=1, max_hold="1h")}, rates={"gateway": Rate(limit=5, per="1h")}
)
calls: list[str] = []
broken = {"charge": True}


class PaymentError(Exception):
    pass


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    broken["charge"] = True


@step
async def reserve(order: str) -> str:
    calls.append(f"reserve {order}")
    return f"stock for {order}"


@step
async def charge(order: str) -> str:
    calls.append(f"charge {order}")
    if broken["charge"]:
        raise PaymentError(f"gateway refused {order}")
    return f"charged {order}"


@step
async def receipt(order: str) -> str:
    calls.append(f"receipt {order}")
    return f"receipt for {order}"


@workflow(name="checkout")
async def checkout(order: str) -> str:
    stock = await reserve(order)
    paid = await charge(order)
    await receipt(order)
    return f"{stock}, {paid}"


@workflow(name="paid-checkout")
async def paid_checkout(order: str) -> str:
    await reserve(order)
    async with limit_slot("payments", label=order):
        paid = await charge(order)
    return paid


@workflow(name="payments-holder")
async def holder(order: str) -> str:
    async with limit_slot("payments", label=order):
        await wait_for_signal("done")
    return order


@workflow(name="quoted", concurrency=Concurrency(key=lambda order: "acme", limit=1))
async def quoted(order: str) -> str:
    if order == "wait":
        await wait_for_signal("done")
    return await charge(order)


@workflow(name="waiter")
async def waiter(order: str) -> str:
    await reserve(order)
    return await wait_for_signal("go")


@workflow(name="rated")
async def rated(order: str) -> str:
    await acquire_rate("gateway")
    return await charge(order)


@workflow(name="order-with-payment")
async def order_with_payment(order: str) -> str:
    await reserve(f"{order}/parent")
    return await child(checkout, order, run_id=f"{order}-payment")


@workflow(name="compensating")
async def compensating(order: str) -> str:
    await reserve(order)
    try:
        return await charge(order)
    except PaymentError:
        await sleep("1m")  # the code goes on past the failure, then fails the run with it
        await receipt(f"refund {order}")
        raise


@workflow(name="versioned", version="1")
async def versioned_v1(order: str) -> str:
    await reserve(order)
    return await charge(order)


@workflow(name="versioned", version="2")
async def versioned_v2(order: str) -> str:
    await reserve(order)
    return "v2 " + await charge(order)


@workflow(name="versioned", version="3")
async def versioned_v3(order: str) -> str:
    await receipt(order)  # another first call: a history of versions 1 and 2 does not replay here
    return await charge(order)


async def payments(engine: Engine) -> tuple[int, int]:
    """The payments limit's (busy, waiting)."""
    [info] = [limit for limit in await engine.limits.list() if limit.name == "payments"]
    return info.busy, info.waiting


def engine_on(url: str, clock: SimulatedClock, *extra) -> Engine:
    engine = Engine(
        url, workspace=WORKSPACE, clock=clock, options=WorkerOptions(poll_interval=None, evict_after=None)
    )
    run_store_inline(engine)
    for wf in (
        checkout,
        paid_checkout,
        holder,
        quoted,
        waiter,
        rated,
        order_with_payment,
        versioned_v1,
        *extra,
    ):
        engine.register(wf)
    return engine


async def failed(engine: Engine, clock: SimulatedClock, wf, order: str, **options) -> str:
    handle = await engine.start(wf, order, run_id=order, **options)
    await clock.advance(1)
    assert (await handle.info()).status.value == "failed"
    return handle.id


async def test_a_retry_keeps_the_completed_steps_and_runs_the_failed_one_and_the_rest(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        run_id = await failed(engine, clock, checkout, "o-1")
        assert calls == ["reserve o-1", "charge o-1"]
        broken["charge"] = False  # the fix is deployed
        handle = await engine.retry(run_id)
        assert handle.id == run_id
        info = await handle.info()
        assert (info.status.value, info.attempt, info.error) == ("pending", 2, None)
        await clock.advance(1)
        assert await handle.result() == "stock for o-1, charged o-1"
        assert calls == ["reserve o-1", "charge o-1", "charge o-1", "receipt o-1"]  # reserve ran once
        steps = [(s.seq, s.name, s.status, s.attempt) for s in await handle.steps()]
        assert steps == [
            (0, "reserve", "completed", 1),
            (1, "charge", "failed", 1),
            (1, "charge", "completed", 2),
            (2, "receipt", "completed", 2),
        ]
        [earlier] = await engine.attempts(run_id)
        assert (earlier.attempt, earlier.status, earlier.resume_seq) == (1, "failed", 1)
        assert earlier.error is not None and "PaymentError" in earlier.error["type"]


async def test_completed_running_and_unknown_runs_are_refused(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        broken["charge"] = False
        done = await engine.start(checkout, "o-2", run_id="o-2")
        waiting = await engine.start(waiter, "o-3", run_id="o-3")
        await clock.advance(1)
        with pytest.raises(RunStatusError, match=r"cannot retry run 'o-2': it is completed"):
            await engine.retry(done.id)
        with pytest.raises(RunStatusError, match=r"cannot retry run 'o-3': it is suspended"):
            await engine.retry(waiting.id)
        with pytest.raises(RunNotFoundError):
            await engine.retry("nobody")
        with pytest.raises(RunStatusError, match="cannot fork run 'o-3'"):
            await engine.fork(waiting.id, 0)
        assert (await done.info()).attempt == 1


async def test_of_two_concurrent_retries_one_wins(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        run_id = await failed(engine, clock, checkout, "o-4")
        first = await engine.retry(run_id)
        with pytest.raises(RunStatusError, match="it is pending"):
            await engine.retry(run_id)
        broken["charge"] = False
        await clock.advance(1)
        assert (await first.info()).attempt == 2


async def test_a_retry_against_a_full_quota_key_is_refused_and_changes_nothing(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        run_id = await failed(engine, clock, quoted, "q-1")
        before = await engine.steps(run_id)
        holding = await engine.start(quoted, "wait", run_id="q-wait")
        await clock.advance(1)
        with pytest.raises(ConcurrencyLimitError) as refused:
            await engine.retry(run_id)
        assert refused.value.key == "acme"
        info = await engine.get_run(run_id)
        assert (info.status.value, info.attempt) == ("failed", 1)
        assert await engine.steps(run_id) == before
        assert await engine.attempts(run_id) == []
        await engine.signal(holding.id, "done")
        await clock.advance(1)
        broken["charge"] = False
        retried = await engine.retry(run_id)  # the key has room again
        await clock.advance(1)
        assert await retried.result() == "charged q-1"


async def test_a_run_that_failed_inside_limit_slot_takes_the_slot_again_first(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        run_id = await failed(engine, clock, paid_checkout, "p-1")
        assert await payments(engine) == (0, 0)  # released as the charge raised
        other = await engine.start(holder, "p-2", run_id="p-2")
        await clock.advance(1)
        broken["charge"] = False
        await engine.retry(run_id)
        await clock.advance(1)
        # it waits in line for the slot: the charge has not run again yet, and the limit is not over
        assert await payments(engine) == (1, 1)
        assert calls == ["reserve p-1", "charge p-1"]
        steps = [(s.seq, s.kind, s.status, s.attempt) for s in await engine.steps(run_id)]
        assert (1, "hook", "completed", 1) in steps and (1, "hook", "waiting", 2) in steps
        await engine.signal(other.id, "done")
        await clock.advance(1)
        assert await engine.result(run_id) == "charged p-1"
        assert calls == ["reserve p-1", "charge p-1", "charge p-1"]  # reserve once, charge in its slot
        assert await payments(engine) == (0, 0)
        [earlier] = await engine.attempts(run_id)
        assert earlier.resume_seq == 1  # back to the slot's grant, not the charge


async def test_a_fork_from_a_step_reruns_from_there_and_records_where_it_came_from(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        broken["charge"] = False
        original = await engine.start(checkout, "f-1", run_id="f-1")
        await clock.advance(1)
        assert await original.result() == "stock for f-1, charged f-1"
        forked = await engine.fork(original.id, 1, new_run_id="f-1-again")
        info = await forked.info()
        assert (info.id, info.forked_from, info.attempt, info.workflow) == (
            "f-1-again",
            ("f-1", 1),
            1,
            "checkout",
        )
        await clock.advance(1)
        assert await forked.result() == "stock for f-1, charged f-1"
        # reserve came from the copy; charge and receipt ran again in the fork
        assert calls == ["reserve f-1", "charge f-1", "receipt f-1", "charge f-1", "receipt f-1"]
        assert [s.name for s in await forked.steps()] == ["reserve", "charge", "receipt"]
        assert (await original.info()).status.value == "completed"
        with pytest.raises(Exception, match="that id is taken"):
            await engine.fork(original.id, 1, new_run_id="f-1-again")


async def test_a_fork_is_cut_before_a_slot_grant(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        broken["charge"] = False
        original = await engine.start(paid_checkout, "f-2", run_id="f-2")
        await clock.advance(1)
        await original.result()
        forked = await engine.fork(original.id, 3)  # after the slot's hook: cut before it
        await clock.advance(1)
        assert await forked.result() == "charged f-2"
        assert calls == ["reserve f-2", "charge f-2", "charge f-2"]
        assert await payments(engine) == (0, 0)


async def test_a_bulk_retry_dry_run_changes_nothing_and_the_real_one_retries_exactly_the_filtered_runs(
    database_url,
):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        ids = [await failed(engine, clock, checkout, f"b-{n}") for n in range(3)]
        await clock.advance(3_600_000)
        later = await failed(engine, clock, checkout, "b-late")
        other = await failed(engine, clock, versioned_v1, "b-other")
        dry = await engine.retry_runs(workflow="checkout", error_type="PaymentError", dry_run=True)
        assert dry == BulkReport([*ids, later], {}, True)
        assert [(await engine.get_run(i)).status.value for i in [*ids, later]] == ["failed"] * 4
        recent = await engine.retry_runs(workflow="checkout", since="30m", dry_run=True)
        assert recent.run_ids == [later]
        assert (await engine.retry_runs(error_type="ValueError", dry_run=True)).run_ids == []
        broken["charge"] = False
        report = await engine.retry_runs(workflow="checkout", until="30m")
        assert report == BulkReport(ids, {}, False)
        await clock.advance(1)
        assert [(await engine.get_run(i)).status.value for i in ids] == ["completed"] * 3
        assert (await engine.get_run(later)).status.value == "failed"
        assert (await engine.get_run(other)).status.value == "failed"


async def test_a_bulk_cancel_acts_on_what_the_filter_matches(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        waiting = [await engine.start(waiter, f"c-{n}", run_id=f"c-{n}") for n in range(3)]
        await clock.advance(1)
        dry = await engine.cancel_runs(workflow="waiter", dry_run=True)
        assert sorted(dry.run_ids) == ["c-0", "c-1", "c-2"] and dry.dry_run
        assert [(await h.info()).status.value for h in waiting] == ["suspended"] * 3
        report = await engine.cancel_runs(workflow="waiter", limit=2)
        assert len(report.run_ids) == 2 and not report.dry_run
        await clock.advance(1)
        statuses = sorted([(await h.info()).status.value for h in waiting])
        assert statuses == ["cancelled", "cancelled", "suspended"]


async def test_a_cancelled_run_retried_waits_again_and_gets_signals_sent_after(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        handle = await engine.start(waiter, "s-1", run_id="s-1")
        await clock.advance(1)
        await handle.cancel()
        await clock.advance(1)
        assert (await handle.info()).status.value == "cancelled"
        await handle.retry()
        await clock.advance(1)
        assert (await handle.info()).status.value == "suspended"
        await handle.signal("go", "at last")
        await clock.advance(1)
        assert await handle.result() == "at last"
        assert calls == ["reserve s-1"]  # reserve ran once


async def test_version_moves_a_run_and_a_history_that_does_not_replay_fails(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock, versioned_v2, versioned_v3) as engine:
        moved = await failed(engine, clock, "versioned", "v-1", version="1")
        stuck = await failed(engine, clock, "versioned", "v-2", version="1")
        broken["charge"] = False
        await engine.retry(moved, version="2")
        await engine.retry(stuck, version="3")
        await clock.advance(1)
        assert await engine.result(moved) == "v2 charged v-1"
        assert (await engine.get_run(moved)).version == "2"
        with pytest.raises(RunFailedError) as failure:
            await engine.result(stuck)
        assert isinstance(failure.value.__cause__, NonDeterminismError) or "NonDeterminismError" in str(
            failure.value
        )
        with pytest.raises(Exception, match="no version '9' here"):
            await engine.retry(stuck, version="9")


async def test_a_rate_grant_is_kept_inside_its_window_and_taken_again_after_it(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        run_id = await failed(engine, clock, rated, "r-1")
        await engine.retry(run_id)  # at once: the grant still counts in the window, kept
        await clock.advance(1)
        assert (await engine.get_run(run_id)).status.value == "failed"
        await clock.advance(2 * 3_600_000)  # the window has passed the grant: taken again
        broken["charge"] = False
        await engine.retry(run_id)
        await clock.advance(1)
        assert await engine.result(run_id) == "charged r-1"
        assert [a.resume_seq for a in await engine.attempts(run_id)] == [1, 0]
        hooks = [(s.seq, s.status, s.attempt) for s in await engine.steps(run_id) if s.kind == "hook"]
        assert hooks == [(0, "completed", 1), (0, "completed", 3)]


async def test_a_retried_parent_retries_its_failed_child_with_it(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        parent = await failed(engine, clock, order_with_payment, "pc-1")
        assert (await engine.get_run("pc-1-payment")).status.value == "failed"
        broken["charge"] = False
        await engine.retry(parent)  # the parent alone: its child call runs again, and retries the child
        await clock.advance(1)
        assert await engine.result(parent) == "stock for pc-1, charged pc-1"
        child_run = await engine.get_run("pc-1-payment")
        assert (child_run.status.value, child_run.attempt) == ("completed", 2)
        assert calls.count("reserve pc-1/parent") == 1 and calls.count("reserve pc-1") == 1  # each once

        # a bulk retry of both, whichever comes first: each retried once, and both complete
        broken["charge"] = True
        second = await failed(engine, clock, order_with_payment, "pc-2")
        broken["charge"] = False
        report = await engine.retry_runs()
        assert second in report.run_ids and len(report.run_ids) + len(report.refused) == 2
        await clock.advance(1)
        assert await engine.result(second) == "stock for pc-2, charged pc-2"
        assert (await engine.get_run("pc-2-payment")).attempt == 2


async def test_the_call_whose_error_failed_the_run_is_where_it_resumes_after_the_code_went_on(database_url):
    clock = SimulatedClock(START)
    async with engine_on(database_url, clock) as engine:
        handle = await engine.start(compensating, "k-1", run_id="k-1")
        await clock.advance(120_000)
        assert (await handle.info()).status.value == "failed"
        broken["charge"] = False
        await handle.retry()
        await clock.advance(1)
        assert await handle.result() == "charged k-1"
        [earlier] = await engine.attempts(handle.id)
        assert earlier.resume_seq == 1  # the charge, not after the refund the code made before failing
        assert calls == ["reserve k-1", "charge k-1", "receipt refund k-1", "charge k-1"]
