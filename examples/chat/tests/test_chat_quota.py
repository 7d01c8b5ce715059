"""The chat example's per-plan quotas under the harness."""

from __future__ import annotations

import pytest

from duro import Concurrency, ConcurrencyLimitError


def turn(tenant: str, message: str = "hello", conversation: str = "c1") -> dict:
    return {"tenant_id": tenant, "conversation_id": conversation, "message": message}


async def test_each_plan_gets_its_own_number_of_concurrent_turns(duro_env):
    for tenant, allowed in (("acme", 8), ("globex", 3), ("initech", 1), ("unknown", 1)):
        for _ in range(allowed):
            await duro_env.start("chat.turn", turn(tenant))
        with pytest.raises(ConcurrencyLimitError) as info:
            await duro_env.start("chat.turn", turn(tenant))
        assert (info.value.key, info.value.limit, info.value.active) == (f"tenant:{tenant}", allowed, allowed)
    assert len(await duro_env.engine.list_runs()) == 8 + 3 + 1 + 1


async def test_a_finished_turn_frees_its_place_at_once(duro_env):
    first = await duro_env.start("chat.turn", turn("initech"))
    with pytest.raises(ConcurrencyLimitError):
        await duro_env.start("chat.turn", turn("initech"))
    await duro_env.advance("2s")
    assert (await first.result()).reply == "echo: hello"
    second = await duro_env.start("chat.turn", turn("initech"))
    await duro_env.advance("2s")
    await duro_env.assert_status(second, "completed")


async def test_a_turn_waiting_for_a_human_still_counts(duro_env):
    booking = await duro_env.start("chat.turn", turn("initech", "please book a room"))
    await duro_env.run_until_idle()
    await duro_env.assert_status(booking, "suspended")
    with pytest.raises(ConcurrencyLimitError):
        await duro_env.start("chat.turn", turn("initech"))
    await booking.signal("confirmed", True)
    await duro_env.advance("2s")
    assert (await booking.result()).tools_used == ["calendar ok"]


async def test_support_can_bypass_a_tenants_quota_for_one_start(duro_env):
    await duro_env.start("chat.turn", turn("initech"))
    escalated = await duro_env.start(
        "chat.turn", turn("initech"), concurrency=Concurrency(key="support:escalations", limit=2)
    )
    info = await duro_env.engine.get_run(escalated.id)
    assert info.tags == ("concurrency:support:escalations",)


async def test_an_idempotent_retry_of_a_turn_is_never_refused(duro_env):
    first = await duro_env.start("chat.turn", turn("initech"), run_id="msg-42")
    again = await duro_env.start("chat.turn", turn("initech"), run_id="msg-42")
    assert again.id == first.id
