"""The orders example under simulated time (the duro_env fixture finds this project by itself)."""

from __future__ import annotations

ORDER = {"id": "A-1", "customer": "ada", "items": {"lamp": 2}}


async def test_an_order_is_delivered(duro_env):
    run = await duro_env.start("fulfil_order", ORDER)
    await duro_env.advance("1s")  # the warehouse's cool-off
    await duro_env.assert_status(run, "suspended")
    await run.signal("delivered", True)
    receipt = await run.result()
    assert (receipt.payment, receipt.tracking, receipt.delivered) == ("pay_A-1_9000", "trk_A-1", True)
    await duro_env.assert_steps(run, "price_order", "charge_payment", "sleep", "book_courier", "delivered")


async def test_an_undelivered_order_times_out_after_seven_days_even_across_a_restart(duro_env):
    run = await duro_env.start("fulfil_order", ORDER)
    await duro_env.advance("3d")
    await duro_env.restart()
    await duro_env.advance("4d")  # the wait began 1 s after the start, after the cool-off sleep
    await duro_env.assert_status(run, "suspended")
    await duro_env.advance("1s")
    assert (await run.result()).delivered is False


async def test_a_crash_before_the_provider_call_is_recorded_repeats_that_call_only(duro_env):
    # Steps run at least once: a box dying after the provider answered but before duro recorded the
    # answer calls the provider again on recovery. Send the provider an idempotency key (the order id).
    duro_env.crash_at("step.executed", occurrence=2)  # price_order, then the provider call
    run = await duro_env.start("fulfil_order", ORDER)
    await duro_env.advance("1s")
    await run.signal("delivered", True)
    assert (await run.result()).payment == "pay_A-1_9000"
    child_steps = await duro_env.engine.steps("run-00001.1")
    assert [(s.name, s.status) for s in child_steps] == [("call_payment_provider", "completed")]
    assert duro_env.restarts == 1
