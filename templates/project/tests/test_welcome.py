"""The welcome workflow under simulated time: a day passes in a millisecond.

``duro_env`` (from duro's pytest plugin) loads this project on a fresh store, with a clock that only
moves when the test says so.
"""


async def test_the_second_email_goes_out_a_day_later(duro_env):
    run = await duro_env.start("welcome", {"email": "ada@example.com", "name": "Ada"})
    await duro_env.run_until_idle()  # every run goes as far as it can without time moving
    await duro_env.assert_status(run, "suspended")  # asleep for a day, after the first email
    await duro_env.assert_steps(run, "send_email", "sleep")

    await duro_env.advance("1d")  # fast-forward: the sleep ends, the run finishes
    assert await run.result() == [
        "sent 'Welcome, Ada!' to ada@example.com",
        "sent 'Three tips for your first week' to ada@example.com",
    ]
    await duro_env.assert_steps(run, "send_email", "sleep", "send_email")


async def test_a_restart_does_not_send_the_first_email_again(duro_env):
    run = await duro_env.start("welcome", {"email": "ada@example.com", "name": "Ada"})
    await duro_env.advance("1h")
    await duro_env.restart()  # the box dies and comes back: the run resumes from the store
    await duro_env.advance("1d")
    assert len(await run.result()) == 2
    await duro_env.assert_steps(run, "send_email", "sleep", "send_email")
