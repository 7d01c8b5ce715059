"""Limits, every bullet of the contract, under the harness's simulated clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from duro import (
    DuroError,
    SlotRelease,
    SlotTimeoutError,
    acquire_slot,
    limit_slot,
    release_slot,
    sleep,
    step,
    wait_for_signal,
    with_limit,
    workflow,
)
from duro.store import ConfirmSlot

pytestmark = pytest.mark.duro(project="tests/integration/harness_project")
T0 = datetime(2030, 1, 1, tzinfo=UTC)


@workflow
async def hold(inp: dict) -> dict:
    """Take a slot, wait for "done" (or a while), release it unless told to keep it."""
    slot = await acquire_slot(
        inp.get("limit", "voice-calls"), label=inp.get("label"), timeout=inp.get("timeout", "24h")
    )
    await wait_for_signal("done", timeout=inp.get("work", "1h"))
    released = None if inp.get("keep") else (await release_slot(slot.id)).released
    return {"slot": slot.id, "released": released}


@workflow
async def releaser(slot_id: str) -> bool:
    return (await release_slot(slot_id)).released


async def started(env, n: int, **inp) -> list:
    runs = [await env.start(hold, {**inp, "label": f"call-{i}"}) for i in range(n)]
    await env.run_until_idle()
    return runs


async def test_a_slot_is_acquired_labelled_and_released_once(duro_env):
    (run,) = await started(duro_env, 1)
    (slot,) = await duro_env.engine.limits.slots("voice-calls")
    assert (slot.state, slot.run_id, slot.label, slot.held_since, slot.expires_at) == (
        "busy",
        run.id,
        "call-0",
        T0,
        T0 + timedelta(minutes=45),
    )
    await run.signal("done")
    assert (await run.result())["released"] is True
    assert await release_slot(slot.id) == SlotRelease(released=False)  # a second release changes nothing
    assert await release_slot("no-such-slot") == SlotRelease(released=False)
    await duro_env.assert_limit("voice-calls", busy=0, waiting=0)
    await duro_env.assert_steps(run, "Esperando hueco · voice-calls", "done", "release_slot")


async def test_waiters_queue_fifo_stay_running_and_show_the_hook_step(duro_env):
    first, second, third = await started(duro_env, 3)
    assert [await duro_env.status(r) for r in (first, second, third)] == ["suspended", "running", "running"]
    assert await duro_env.busy("voice-calls") == [first.id]
    assert await duro_env.queue("voice-calls") == [second.id, third.id]
    assert (await second.steps())[0].name == "Esperando hueco · voice-calls"
    assert (await second.steps())[0].status == "waiting"
    slots = await duro_env.engine.limits.slots("voice-calls")
    assert [(s.state, s.position) for s in slots] == [("busy", None), ("waiting", 1), ("waiting", 2)]
    await duro_env.advance("5m")
    assert (await duro_env.engine.limits.slots("voice-calls"))[1].waited == timedelta(minutes=5)
    await first.signal("done")
    await duro_env.run_until_idle()
    assert await duro_env.busy("voice-calls") == [second.id]
    assert (await second.steps())[0].status == "completed"
    await second.signal("done")
    await duro_env.run_until_idle()
    assert await duro_env.busy("voice-calls") == [third.id]


async def test_a_waiter_in_the_releasing_engine_takes_the_slot_in_the_release_transaction(duro_env):
    """No reservation and no confirming transaction when the next run waits in the same engine: the
    release writes its hook step; the slot's held time and max hold run from the release."""
    first, second = await started(duro_env, 2)
    store = duro_env.engine.store
    confirms = []
    apply = store.steps.apply
    store.steps.apply = lambda command: (
        (  # every ConfirmSlot the engine makes
            isinstance(command, ConfirmSlot) and confirms.append(command.slot_id)
        )
        or apply(command)
    )
    await duro_env.advance("10m")
    await first.signal("done")
    await duro_env.run_until_idle()
    assert confirms == []
    (slot,) = [s for s in await duro_env.engine.limits.slots("voice-calls") if s.run_id == second.id]
    assert (slot.state, slot.held_since, slot.expires_at) == (
        "busy",
        duro_env.now,
        duro_env.now + timedelta(minutes=45),
    )
    hook = (await second.steps())[0]
    assert (hook.name, hook.status, hook.ended_at) == (
        "Esperando hueco · voice-calls",
        "completed",
        duro_env.now,
    )


async def test_a_cancelled_waiter_leaves_the_queue(duro_env):
    first, second, third = await started(duro_env, 3)
    await duro_env.advance("5m")
    await second.cancel()
    await duro_env.run_until_idle()  # the cancel is delivered at its wait, which leaves the queue
    assert await duro_env.queue("voice-calls") == [third.id]
    hook = (await second.steps())[0]  # closed when the run left the queue, not left "waiting"
    assert (hook.name, hook.status, hook.ended_at) == (
        "Esperando hueco · voice-calls",
        "cancelled",
        duro_env.now,
    )
    await first.signal("done")
    await duro_env.run_until_idle()
    assert await duro_env.busy("voice-calls") == [third.id]


async def test_ending_a_run_does_not_release_its_slot_but_another_workflow_may(duro_env):
    keeper, waiter = await started(duro_env, 2, keep=True)
    await keeper.signal("done")
    assert (await keeper.result())["released"] is None
    await duro_env.assert_status(keeper, "completed")
    assert await duro_env.busy("voice-calls") == [keeper.id]  # held by a finished run
    slot_id = (await keeper.result())["slot"]
    other = await duro_env.start(releaser, slot_id)
    assert await other.result() is True
    await duro_env.run_until_idle()
    assert await duro_env.busy("voice-calls") == [waiter.id]


async def test_timeouts_raise_slot_timeout_error_and_leave_the_queue(duro_env):
    @workflow
    async def impatient(n: int) -> str:
        try:
            await acquire_slot("voice-calls", timeout="30m")
        except SlotTimeoutError as err:
            assert SlotTimeoutError.is_(err)
            return f"{err.limiter} {err.timeout}"
        return "got it"

    (holder,) = await started(duro_env, 1, work="2h")
    run = await duro_env.start(impatient, 1)
    await duro_env.advance("30m")
    assert await run.result() == "voice-calls 30m"
    assert await duro_env.queue("voice-calls") == []
    assert (await run.steps())[0].status == "failed"


@workflow
async def try_line(n: int) -> str:
    """A try-acquire: ``timeout=0`` takes a free slot or raises at once."""
    try:
        slot = await acquire_slot("voice-calls", label=f"try-{n}", timeout=0)
    except SlotTimeoutError as err:
        return f"busy: {err.limiter} {err.timeout}"
    await release_slot(slot.id)
    return f"took {slot.id}"


async def test_a_zero_timeout_takes_a_free_slot_or_raises_at_once_leaving_no_queue_entry(duro_env):
    free = await duro_env.start(try_line, 1)
    await duro_env.run_until_idle()
    assert (await free.result()).startswith("took ")
    (holder,) = await started(duro_env, 1)
    before = duro_env.now
    busy = await duro_env.start(try_line, 2)
    await duro_env.run_until_idle()  # no time passes: the refusal does not wait
    assert await busy.result() == "busy: voice-calls 0"
    assert duro_env.now == before
    assert await duro_env.queue("voice-calls") == []
    assert [s.run_id for s in await duro_env.engine.limits.slots("voice-calls")] == [holder.id]
    (step,) = await busy.steps()
    assert (step.kind, step.status) == ("hook", "failed")
    assert step.error["type"].endswith("SlotTimeoutError")
    await holder.signal("done")
    await duro_env.run_until_idle()
    assert (await holder.result())["released"] is True


async def test_the_default_timeout_is_24_hours(duro_env):
    await duro_env.engine.limits.set_max_hold("voice-calls", "30d")
    (holder,) = await started(duro_env, 1, work="30d", keep=True)
    (waiter,) = [await duro_env.start(hold, {"label": "late"})]
    await duro_env.advance(timedelta(hours=24) - timedelta(milliseconds=1))
    await duro_env.assert_status(waiter, "running")
    await duro_env.advance("1ms")
    await duro_env.assert_status(waiter, "failed")
    assert (await waiter.info()).error["type"].endswith("SlotTimeoutError")


async def test_max_hold_takes_a_slot_back_and_gives_it_to_the_next_waiter(duro_env):
    first, second = await started(duro_env, 2, work="2h")
    await duro_env.advance(timedelta(minutes=45) - timedelta(milliseconds=1))
    assert await duro_env.busy("voice-calls") == [first.id]
    await duro_env.advance("1ms")
    assert await duro_env.busy("voice-calls") == [second.id]
    await first.signal("done")
    assert (await first.result())["released"] is False  # max_hold took it back already


async def test_a_slot_taken_up_after_an_expiry_expires_on_time_too(duro_env):
    """The second holder got its slot through the expiry pass (a reservation it confirmed): its own
    max_hold, shorter than the pass's 15 s safety interval, still ends it to the millisecond."""
    await duro_env.engine.limits.set_max_hold("voice-calls", "5s")
    first, second = await started(duro_env, 2, work="2h")
    await duro_env.advance("5s")
    assert await duro_env.busy("voice-calls") == [second.id]
    await duro_env.advance(timedelta(seconds=5) - timedelta(milliseconds=1))
    assert await duro_env.busy("voice-calls") == [second.id]
    await duro_env.advance("1ms")
    assert await duro_env.busy("voice-calls") == []


async def test_max_hold_is_read_once_per_slot_at_grant(duro_env):
    (first,) = await started(duro_env, 1, work="2h")
    await duro_env.engine.limits.set_max_hold("voice-calls", "10m")
    await duro_env.advance("44m")
    assert await duro_env.busy("voice-calls") == [first.id]  # its 45 m were read at its grant
    await duro_env.advance("1m")
    (second,) = await started(duro_env, 1, work="2h")
    await duro_env.advance("10m")
    assert await duro_env.busy("voice-calls") == []  # the override applies to later grants


async def test_capacity_raise_grants_at_once_and_lowering_takes_nothing_back(duro_env):
    runs = await started(duro_env, 4)
    info = await duro_env.engine.limits.set_capacity("voice-calls", 3)
    assert (info.capacity, info.effective_capacity, info.capacity_override) == (1, 3, 3)
    await duro_env.run_until_idle()
    assert await duro_env.busy("voice-calls") == [r.id for r in runs[:3]]
    await duro_env.engine.limits.set_capacity("voice-calls", 1)
    assert len(await duro_env.busy("voice-calls")) == 3
    await runs[0].signal("done")
    await runs[1].signal("done")
    await duro_env.run_until_idle()
    assert await duro_env.queue("voice-calls") == [runs[3].id]  # 1 busy of capacity 1: no grant pass
    await runs[2].signal("done")
    await duro_env.run_until_idle()
    assert await duro_env.busy("voice-calls") == [runs[3].id]


async def test_overrides_win_until_reset_and_survive_restarts(duro_env):
    await duro_env.engine.limits.set_capacity("partner-api", 7)
    await duro_env.engine.limits.set_max_hold("partner-api", "2h")
    await duro_env.restart()
    (info,) = [i for i in await duro_env.engine.limits.list() if i.name == "partner-api"]
    assert (info.effective_capacity, info.effective_max_hold, info.max_hold_override) == (7, "2h", "2h")
    await duro_env.engine.limits.set_capacity("partner-api", None)
    await duro_env.engine.limits.set_max_hold("partner-api", None)
    (info,) = [i for i in await duro_env.engine.limits.list() if i.name == "partner-api"]
    assert (info.effective_capacity, info.capacity_override, info.effective_max_hold) == (2, None, "10m")


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda limits: limits.set_capacity("voice-calls", 0), ["voice-calls", "capacity"]),
        (lambda limits: limits.set_capacity("voice-calls", 100_001), ["voice-calls", "capacity"]),
        (lambda limits: limits.set_capacity("voice-calls", "3"), ["voice-calls", "capacity"]),
        (lambda limits: limits.set_max_hold("voice-calls", "31d"), ["voice-calls", "max_hold"]),
        (lambda limits: limits.set_max_hold("voice-calls", "soon"), ["voice-calls", "max_hold"]),
        (lambda limits: limits.set_capacity("nope", 3), ["unknown limit 'nope'"]),
        (lambda limits: limits.slots("nope"), ["unknown limit 'nope'"]),
        (lambda limits: limits.release("no-such-slot"), ["slot 'no-such-slot' does not exist"]),
    ],
)
async def test_bad_overrides_name_the_limit_and_the_field_and_change_nothing(duro_env, call, words):
    before = await duro_env.engine.limits.list()
    with pytest.raises(DuroError) as info:
        await call(duro_env.engine.limits)
    for word in words:
        assert word in str(info.value)
    assert await duro_env.engine.limits.list() == before


async def test_bad_labels_and_unknown_limits_fail_the_acquire(duro_env):
    @workflow
    async def labelled(label: object) -> str:
        try:
            await acquire_slot("partner-api", label=label)
        except DuroError as err:
            return str(err)
        return "ok"

    @workflow
    async def unknown(n: int) -> str:
        try:
            await acquire_slot("nope")
        except DuroError as err:
            return str(err)
        return "ok"

    assert (
        "label must be a string of at most 200" in await (await duro_env.start(labelled, "x" * 201)).result()
    )
    assert "label must be a string" in await (await duro_env.start(labelled, 5)).result()
    assert "unknown limit 'nope'" in await (await duro_env.start(unknown, 1)).result()
    await duro_env.assert_limit("partner-api", busy=0, waiting=0)


async def test_with_limit_and_limit_slot_release_on_return_and_on_raise(duro_env):
    @workflow
    async def uses_both(fail: bool) -> str:
        async def body() -> str:
            await sleep("1m")
            return "done"

        first = await with_limit("partner-api", body, label="report")
        try:
            async with limit_slot("partner-api", label="export") as slot:
                assert slot.limit == "partner-api"
                if fail:
                    raise ValueError("export failed")
        except ValueError:
            return f"{first}, then released after a failure"
        return f"{first}, then released"

    ok, failing = await duro_env.start(uses_both, False), await duro_env.start(uses_both, True)
    await duro_env.advance("1m")
    assert await ok.result() == "done, then released"
    assert await failing.result() == "done, then released after a failure"
    await duro_env.assert_limit("partner-api", busy=0, waiting=0)


async def test_acquire_inside_a_step_is_a_clear_error(duro_env):
    @step
    async def sneaky() -> None:
        await acquire_slot("partner-api")

    @workflow
    async def misuse(n: int) -> str:
        try:
            await sneaky()
        except DuroError as err:
            return str(err)
        return "no error"

    assert "inside step 'sneaky'" in await (await duro_env.start(misuse, 1)).result()


async def test_a_restart_keeps_the_queue_and_every_waiters_place(duro_env):
    runs = await started(duro_env, 4)
    await duro_env.restart()
    assert await duro_env.queue("voice-calls") == [r.id for r in runs[1:]]
    for run in runs:
        await run.signal("done")
        await duro_env.run_until_idle()
    assert [(await r.result())["released"] for r in runs] == [True] * 4


async def test_an_unconfirmed_reservation_goes_to_the_next_run_and_the_late_run_queues_last(duro_env):
    first, late, next_in_line = await started(duro_env, 3, work="3h", timeout="1h")
    duro_env.crash_at("slot.confirming", down_for="3m")  # the box dies as `late` is picked
    await first.signal("done")
    await duro_env.run_until_idle()
    assert duro_env.restarts == 1
    assert await duro_env.busy("voice-calls") == [next_in_line.id]
    assert await duro_env.queue("voice-calls") == [late.id]
    (queued,) = [s for s in await duro_env.engine.limits.slots("voice-calls") if s.state == "waiting"]
    assert queued.timeout_at == T0 + timedelta(hours=1)  # what was left of its timeout
    await duro_env.advance("45m")  # next_in_line's max_hold (45 m from 00:03) hands the slot on
    assert await duro_env.busy("voice-calls") == [late.id]


async def test_the_safety_pass_runs_every_15_seconds_while_slots_are_active(duro_env):
    (run,) = await started(duro_env, 1, work="1h")
    passes = []
    original = duro_env.engine.store.slots.expire

    def counting(configs, now):
        passes.append(now)
        return original(configs, now)

    duro_env.engine.store.slots.expire = counting
    duro_env.engine.worker.slots.look_again()
    await duro_env.advance("1m")
    gaps = {b - a for a, b in zip(passes[1:], passes[2:], strict=False)}
    assert gaps == {15_000}
    await run.signal("done")
    await duro_env.run_until_idle()
    count = len(passes)
    await duro_env.advance("1h")  # nothing active: no passes while idle
    assert len(passes) - count <= 1


async def test_serial_workflows_run_one_at_a_time_in_order(duro_env):
    @workflow
    async def nightly(n: int) -> int:
        await sleep("10m")
        return n

    duro_env.engine.register(nightly)
    duro_env.engine.workflows["nightly"].serial = True
    runs = [await duro_env.start(nightly, i) for i in range(3)]
    await duro_env.run_until_idle()
    assert [await duro_env.status(r) for r in runs] == ["suspended", "pending", "pending"]
    await duro_env.advance("10m")
    assert [await duro_env.status(r) for r in runs] == ["completed", "suspended", "pending"]
    await duro_env.advance("20m")
    assert [await r.result() for r in runs] == [0, 1, 2]


async def test_a_release_outcome_is_the_same_after_a_restart(duro_env):
    @workflow
    async def releases(n: int) -> list:
        slot = await acquire_slot("partner-api")
        first = (await release_slot(slot.id)).released
        second = (await release_slot(slot.id)).released
        await wait_for_signal("go")
        return [first, second]

    run = await duro_env.start(releases, 1)
    await duro_env.run_until_idle()
    await duro_env.restart()
    await run.signal("go")
    assert await run.result() == [True, False]


async def test_the_class_form_gets_the_slot_helpers_on_ctx(duro_env):
    from duro import Workflow

    @workflow
    class Dialer(Workflow):
        name = "dialer"

        async def run(self, ctx, n: int) -> list:
            slot = await ctx.acquire_slot("voice-calls", label=f"call-{n}")
            released = await ctx.release_slot(slot.id)
            async with ctx.limit_slot("partner-api") as held:
                assert held.limit == "partner-api"

            async def body() -> str:
                return "inside"

            inside = await ctx.with_limit("partner-api", body)
            return [released.released, inside]

    assert await (await duro_env.start(Dialer, 1)).result() == [True, "inside"]


async def test_a_capacity_raised_in_the_config_hands_slots_out_after_a_restart(duro_env):
    runs = await started(duro_env, 3)
    assert len(await duro_env.queue("voice-calls")) == 2
    from dataclasses import replace

    from duro import define_workspace

    duro_env._project.workspace = replace(
        duro_env._project.workspace,
        limits=define_workspace(
            limits={
                "voice-calls": {"capacity": 3, "max_hold": "45m"},
                "partner-api": {"capacity": 2, "max_hold": "10m"},
            }
        ).limits,
    )
    await duro_env.restart()  # a redeploy with the larger capacity
    await duro_env.run_until_idle()
    assert await duro_env.busy("voice-calls") == [r.id for r in runs]
