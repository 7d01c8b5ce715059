"""The partner API's sessions under simulated time: 5 per account, 20 in all."""

from __future__ import annotations

from duro import limit_slot, wait_for_signal, workflow


@workflow(name="hold_session")
async def hold_session(account: str) -> str:
    """Keeps a session of the account open until told to close it."""
    async with limit_slot("partner-api", key=f"account:{account}", label=account) as slot:
        await wait_for_signal("close")
    return slot.key or ""


async def test_each_sync_job_takes_a_session_of_its_account(duro_env, monkeypatch):
    from workflows import partner  # the module the engine runs (this project's, loaded by duro_env)

    fetched = []

    async def fake_fetch(account_id: str, page: int) -> int:
        fetched.append((account_id, page))
        return 3

    monkeypatch.setattr(partner, "fetch_page", fake_fetch)
    run = await duro_env.start("sync_account", {"job_id": "j1", "account_id": "acme", "pages": 2})
    assert await run.result() == 6
    assert fetched == [("acme", 0), ("acme", 1)]
    await duro_env.assert_limit("partner-api", busy=0, waiting=0, key="account:acme")


async def test_a_full_account_never_holds_up_another(duro_env):
    duro_env.engine.register(hold_session)
    acme = [await duro_env.start(hold_session, "acme") for _ in range(6)]
    globex = await duro_env.start(hold_session, "globex")
    await duro_env.run_until_idle()
    await duro_env.assert_limit("partner-api", busy=5, waiting=1, key="account:acme")
    await duro_env.assert_limit("partner-api", busy=1, waiting=0, key="account:globex")
    await acme[0].signal("close")
    await duro_env.run_until_idle()
    await duro_env.assert_limit("partner-api", busy=5, waiting=0, key="account:acme")  # the sixth got it
    for run in [*acme[1:], globex]:
        await run.signal("close")
    assert await globex.result() == "account:globex"
    assert [await run.result() for run in acme] == ["account:acme"] * 6
