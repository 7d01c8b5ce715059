"""The partner-API limit under simulated time: 2 sessions at once, a third sync waits its turn."""


async def test_a_sync_copies_the_orders(duro_env):
    run = await duro_env.start("sync_orders", "acme")
    await duro_env.advance("1m")
    assert await run.result() == {"account": "acme", "orders": 3, "total": 60}
    await duro_env.assert_limit("partner-api", busy=0, waiting=0)  # the session was given back


async def test_a_third_sync_waits_for_a_session(duro_env):
    runs = [await duro_env.start("sync_orders", account) for account in ("acme", "globex", "initech")]
    await duro_env.run_until_idle()
    await duro_env.assert_limit("partner-api", busy=2, waiting=1)
    assert await duro_env.queue("partner-api") == [runs[2].id]  # the queue, in order: run ids
    await duro_env.assert_status(runs[2], "running")  # waiting in the queue is `running`

    await duro_env.advance("1m")  # the first two finish and free their sessions; the third gets one
    await duro_env.assert_limit("partner-api", busy=1, waiting=0)
    await duro_env.advance("1m")
    assert [(await run.result())["account"] for run in runs] == ["acme", "globex", "initech"]
    await duro_env.assert_limit("partner-api", busy=0, waiting=0)
