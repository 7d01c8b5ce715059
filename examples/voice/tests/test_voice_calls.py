"""The voice-calls pair under simulated time."""

from __future__ import annotations


async def place(env, n: int):
    return [await env.start("place_call", {"call_id": f"c{i}", "to": "+100"}) for i in range(n)]


async def test_the_21st_call_waits_for_a_line_and_gets_the_first_one_freed(duro_env):
    calls = await place(duro_env, 21)
    await duro_env.run_until_idle()
    await duro_env.assert_limit("voice-calls", busy=20, waiting=1)
    await duro_env.assert_status(calls[20], "running")  # waiting in the queue
    first = await calls[0].result()
    assert first["placed"] and first["slot_id"]
    ended = await duro_env.engine.emit(
        "call.ended", {"call_id": "c0", "slot_id": first["slot_id"], "seconds": 95}
    )
    assert len(ended.started) == 1 and await ended.started[0].result() is True
    assert (await calls[20].result())["placed"] is True
    await duro_env.assert_limit("voice-calls", busy=20, waiting=0)


async def test_a_duplicate_webhook_releases_nothing_more(duro_env):
    (call,) = await place(duro_env, 1)
    slot_id = (await call.result())["slot_id"]
    payload = {"call_id": "c0", "slot_id": slot_id, "seconds": 10}
    first = await duro_env.engine.emit("call.ended", payload)
    again = await duro_env.engine.emit("call.ended", payload)
    assert [await r.result() for r in first.started + again.started] == [True, False]


async def test_a_lost_webhook_is_covered_by_max_hold(duro_env):
    await place(duro_env, 20)
    await duro_env.advance(45 * 60_000 - 1)  # no webhook ever comes for these 20 calls
    await duro_env.assert_limit("voice-calls", busy=20, waiting=0)
    await duro_env.advance("1ms")  # max_hold takes every line back
    await duro_env.assert_limit("voice-calls", busy=0, waiting=0)
    (late,) = await place(duro_env, 1)
    assert (await late.result())["placed"] is True


async def test_a_call_waiting_more_than_30_minutes_gives_up(duro_env):
    await duro_env.engine.limits.set_capacity("voice-calls", 1)
    first, second = await place(duro_env, 2)
    await duro_env.advance("30m")
    assert (await second.result()) == {"call_id": "c1", "placed": False}
    (slot,) = await duro_env.engine.limits.slots("voice-calls")
    assert (slot.label, slot.state) == ("c0", "busy")
