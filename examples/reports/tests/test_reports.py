"""The partner-API report under simulated time: at most 5 sessions at once across every report."""

from __future__ import annotations


async def test_twelve_reports_share_five_sessions(duro_env):
    reports = [await duro_env.start("monthly_report", f"tenant-{i}") for i in range(12)]
    await duro_env.run_until_idle()
    await duro_env.assert_limit("partner-api", busy=5, waiting=7)
    assert await duro_env.queue("partner-api") == [r.id for r in reports[5:]]
    # 12 reports x 3 pages x 2 minutes over 5 sessions: done in 8 rounds of 2 minutes
    await duro_env.advance("16m")
    assert [await r.result() for r in reports] == [{"tenant": f"tenant-{i}", "rows": 9} for i in range(12)]
    await duro_env.assert_limit("partner-api", busy=0, waiting=0)


async def test_each_page_releases_its_session_even_when_a_report_is_cancelled(duro_env):
    report = await duro_env.start("monthly_report", "acme")
    await duro_env.run_until_idle()
    await duro_env.assert_limit("partner-api", busy=1, waiting=0)
    await report.cancel()
    # a cancelled run does not release a slot it holds: the session's max_hold (10 m) takes it back
    await duro_env.advance("10m")
    await duro_env.assert_limit("partner-api", busy=0, waiting=0)
