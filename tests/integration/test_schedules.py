"""Persisted cron schedules under simulated time: windows, their own quota, last_error, deletion."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from duro import Concurrency, DuroError, wait_for_signal, workflow


@workflow(name="digest", concurrency=Concurrency(key=lambda inp: "digest", limit=5))
async def digest(inp: dict) -> str:
    await wait_for_signal("sent")
    return inp["to"]


@workflow(name="tick")
async def tick(inp: dict) -> int:
    return inp["n"]


async def test_a_schedule_fires_each_window_once_and_is_persisted(duro_env):
    engine = duro_env.engine
    engine.register(tick)
    info = await engine.schedules.create("every-15m", "tick", "*/15 * * * *", input={"n": 1})
    assert info.next_fire_at == datetime(2030, 1, 1, 0, 15, tzinfo=UTC)
    await duro_env.advance("1h")
    runs = await engine.list_runs(workflow="tick")
    windows = [datetime(2030, 1, 1, h, m, tzinfo=UTC) for h, m in ((0, 15), (0, 30), (0, 45), (1, 0))]
    assert sorted(r.id for r in runs) == [f"schedule:every-15m:{int(w.timestamp() * 1000)}" for w in windows]
    assert {r.status for r in runs} == {"completed"}
    await duro_env.restart()  # schedules live in the store
    await duro_env.advance("30m")
    assert len(await duro_env.engine.list_runs(workflow="tick")) == 6
    listed = await duro_env.engine.schedules.list()
    assert [(s.name, s.last_error) for s in listed] == [("every-15m", None)]
    assert listed[0].last_run_id.startswith("schedule:every-15m:")


async def test_an_over_limit_window_is_skipped_and_recorded(duro_env):
    engine = duro_env.engine
    engine.register(digest)
    await engine.schedules.create(
        "hourly-digest",
        "digest",
        "0 * * * *",
        input={"to": "ops"},
        concurrency=Concurrency(key="digest:ops", limit=1),
    )
    await duro_env.advance("1h")
    first = await engine.list_runs(workflow="digest")
    assert len(first) == 1 and first[0].tags == ("concurrency:digest:ops",)
    await duro_env.advance("1h")  # the first digest still waits: this window is refused
    assert len(await engine.list_runs(workflow="digest")) == 1
    (schedule,) = await engine.schedules.list()
    assert "digest:ops" in schedule.last_error and schedule.last_run_id is None
    await engine.signal(first[0].id, "sent")
    await duro_env.advance("1h")
    (schedule,) = await engine.schedules.list()
    assert schedule.last_error is None and len(await engine.list_runs(workflow="digest")) == 2


async def test_schedules_are_validated_and_deleted(duro_env):
    engine = duro_env.engine
    engine.register(tick)
    with pytest.raises(DuroError, match="not a valid cron"):
        await engine.schedules.create("bad", "tick", "every minute")
    with pytest.raises(DuroError, match="unknown workflow"):
        await engine.schedules.create("ghost", "nope", "* * * * *")
    engine.register(digest)
    with pytest.raises(DuroError, match="input of workflow 'digest' is invalid"):
        await engine.schedules.create("typed", digest, "* * * * *", input=[1, 2])
    with pytest.raises(DuroError, match="key must be a string"):
        await engine.schedules.create(
            "fn", "tick", "* * * * *", input={"n": 1}, concurrency=Concurrency(key=lambda inp: "x", limit=1)
        )
    with pytest.raises(DuroError, match="schedule name"):
        await engine.schedules.create("no spaces", "tick", "* * * * *")
    assert await engine.schedules.list() == []
    await engine.schedules.create("minutely", "tick", "* * * * *", input={"n": 2})
    await duro_env.advance("2m")
    await engine.schedules.delete("minutely")
    await duro_env.advance("5m")
    assert len(await engine.list_runs(workflow="tick")) == 2
    with pytest.raises(DuroError, match="does not exist"):
        await engine.schedules.delete("minutely")
