"""Retention in the harness: finished runs deleted once they are older than the workspace's
``retention`` (with their steps, signals and ended slots), never an unfinished run, a finished child
its unfinished parent still names, or a run whose slot is still held; ``engine.prune`` on demand,
its dry run, its report, its metric and its log lines."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from duro import (
    ConfigError,
    DuroError,
    PruneReport,
    RunNotFoundError,
    acquire_slot,
    child,
    define_workspace,
    release_slot,
    step,
    wait_for_signal,
    workflow,
)

pytestmark = pytest.mark.duro(
    config={"retention": "30d", "limits": {"partner-api": {"capacity": 1, "max_hold": "30d"}}}
)


@step
async def work(n: int) -> int:
    return n * 2


@workflow(name="retention.quick")
async def quick(n: int) -> int:
    return await work(n) + await work(n + 1) + await work(n + 2)


@workflow(name="retention.waits")
async def waits(_: None) -> str:
    return await wait_for_signal("go")


@workflow(name="retention.parent")
async def parent(_: None) -> str:
    await child(quick, 1, run_id="the-child")
    return await wait_for_signal("go")


@workflow(name="retention.holder")
async def holder(_: None) -> str:
    slot = await acquire_slot("partner-api")
    return slot.id  # ends holding it: another workflow releases it


@workflow(name="retention.releaser")
async def releaser(slot_id: str) -> bool:
    return (await release_slot(slot_id)).released


async def _exists(env, run_id: str) -> bool:
    try:
        await env.engine.get_run(run_id)
    except RunNotFoundError:
        return False
    return True


async def test_finished_runs_go_thirty_days_after_they_end_and_not_before(duro_env):
    early = await duro_env.start(quick, 1, run_id="early")
    await duro_env.advance("1d")
    late = await duro_env.start(quick, 2, run_id="late")
    waiting = await duro_env.start(waits, None, run_id="waiting")
    await duro_env.run_until_idle()
    assert await early.result() == 12 and await late.result() == 18
    await duro_env.advance("29d")  # early ended 30 days ago less a moment
    assert await _exists(duro_env, "early") and await _exists(duro_env, "late")
    await duro_env.advance("1s")
    assert not await _exists(duro_env, "early")
    assert await _exists(duro_env, "late") and await _exists(duro_env, "waiting")
    await duro_env.advance("1d")
    assert not await _exists(duro_env, "late")
    await duro_env.advance("60d")  # unfinished: kept however old
    assert (await duro_env.engine.get_run("waiting")).status.value == "suspended"
    await duro_env.engine.signal("waiting", "go", "now")
    assert await waiting.result() == "now"
    await duro_env.advance("30d")
    await duro_env.advance("1s")
    assert not await _exists(duro_env, "waiting")


async def test_an_unfinished_parents_finished_child_is_kept_until_the_parent_goes(duro_env):
    run = await duro_env.start(parent, None, run_id="the-parent")
    await duro_env.run_until_idle()
    assert (await duro_env.engine.get_run("the-child")).status.value == "completed"
    await duro_env.advance("90d")
    assert await _exists(duro_env, "the-child")  # its parent, waiting, replays from it
    report = await duro_env.engine.prune("1s")
    assert (report.runs, report.steps) == (0, 0)
    await duro_env.engine.signal("the-parent", "go", "done")
    assert await run.result() == "done"
    await duro_env.advance("30d")
    await duro_env.advance("1s")
    assert not await _exists(duro_env, "the-parent") and not await _exists(duro_env, "the-child")


async def test_a_dry_run_deletes_nothing_and_counts_what_the_prune_then_deletes(duro_env):
    for n in range(3):
        await duro_env.start(quick, n, run_id=f"q{n}")
    await duro_env.start(waits, None, run_id="waiting")
    await duro_env.run_until_idle()
    await duro_env.advance("2d")
    dry = await duro_env.engine.prune("1d", dry_run=True)
    assert isinstance(dry, PruneReport)
    assert (dry.runs, dry.steps, dry.slots, dry.dry_run) == (3, 9, 0, True)
    assert all([await _exists(duro_env, f"q{n}") for n in range(3)])
    assert len(await duro_env.engine.steps("q0")) == 3
    real = await duro_env.engine.prune("1d")
    assert (real.runs, real.steps, real.slots, real.dry_run) == (3, 9, 0, False)
    assert real.before == dry.before == duro_env.now - timedelta(days=1)
    assert not any([await _exists(duro_env, f"q{n}") for n in range(3)])
    assert await _exists(duro_env, "waiting")
    again = await duro_env.engine.prune("1d")
    assert (again.runs, again.steps, again.slots) == (0, 0, 0)


async def test_a_run_whose_slot_is_still_held_stays_until_the_slot_is_released(duro_env):
    held = await duro_env.start(holder, None, run_id="holder")
    await duro_env.run_until_idle()
    slot_id = await held.result()
    await duro_env.advance("1m")
    assert (await duro_env.engine.prune("1s")).runs == 0
    assert await _exists(duro_env, "holder")  # its slot is busy: the limit still counts it
    await duro_env.assert_limit("partner-api", busy=1, waiting=0)
    release = await duro_env.start(releaser, slot_id, run_id="releaser")
    assert await release.result() is True
    await duro_env.advance("1m")
    report = await duro_env.engine.prune("30s")
    assert (report.runs, report.slots) == (2, 1)  # the holder with its slot, and the releaser
    assert not await _exists(duro_env, "holder")
    await duro_env.assert_limit("partner-api", busy=0, waiting=0)


async def test_prune_is_counted_and_logged_per_batch_without_run_ids(duro_env, caplog):
    from prometheus_client import CollectorRegistry, generate_latest

    from duro.metrics import collector

    registry = CollectorRegistry()
    registry.register(collector(duro_env.engine))
    for n in range(3):
        await duro_env.start(quick, n, run_id=f"secret-{n}")
    await duro_env.run_until_idle()
    await duro_env.advance("2d")
    with caplog.at_level(logging.INFO, logger="duro.retention"):
        await duro_env.engine.prune("1d")
    lines = [r.getMessage() for r in caplog.records if r.name == "duro.retention"]
    assert len(lines) == 1 and "pruned 3 finished runs (9 steps, 0 slots)" in lines[0]
    assert "secret" not in lines[0]
    assert "duro_runs_pruned_total 3.0" in generate_latest(registry).decode()


async def test_bad_prune_calls_and_retentions_are_refused_with_what_to_do(duro_env):
    await duro_env.start(quick, 1, run_id="kept")
    await duro_env.run_until_idle()
    await duro_env.advance("2d")
    with pytest.raises(DuroError, match="prune older_than 'soon'"):
        await duro_env.engine.prune("soon")
    with pytest.raises(DuroError, match="dry_run must be True or False"):
        await duro_env.engine.prune("1d", dry_run="yes")
    assert await _exists(duro_env, "kept")
    with pytest.raises(ConfigError, match="shorter than a minute"):
        define_workspace(retention="10s")
    with pytest.raises(ConfigError, match="retention 'a month'"):
        define_workspace(retention="a month")
    assert define_workspace().retention_ms is None
    assert define_workspace(retention="30d").retention_ms == 30 * 86_400_000


@pytest.mark.duro(config={})
async def test_without_a_retention_nothing_goes_and_prune_asks_for_a_duration(duro_env):
    await duro_env.start(quick, 1, run_id="kept")
    await duro_env.run_until_idle()
    await duro_env.advance("400d")
    assert await _exists(duro_env, "kept")
    with pytest.raises(DuroError, match="prune needs older_than"):
        await duro_env.engine.prune()
    assert (await duro_env.engine.prune("365d")).runs == 1


async def test_cursor_pages_list_every_run_once_in_order_while_runs_start(duro_env):
    for n in range(25):
        await duro_env.start(quick, n, run_id=f"old-{n:02d}")
        if n % 5 == 0:
            await duro_env.advance("1s")  # some runs share an instant: the id orders them
    await duro_env.run_until_idle()
    expected = [info.id for info in await duro_env.engine.list_runs(limit=1000)]
    assert len(expected) == 25
    seen: list[str] = []
    cursor = None
    for page_number in range(100):
        page = await duro_env.engine.runs_page(cursor=cursor, limit=7)
        seen += [info.id for info in page.runs]
        await duro_env.start(quick, 100 + page_number, run_id=f"new-{page_number}")  # newer: never listed
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == expected
    assert await duro_env.engine.list_runs(
        limit=3, cursor=(await duro_env.engine.runs_page(limit=7)).next_cursor
    )
    waiting = [await duro_env.start(waits, None, run_id=f"w{n}") for n in range(3)]
    await duro_env.run_until_idle()
    first = await duro_env.engine.runs_page(status="suspended", limit=2)
    second = await duro_env.engine.runs_page(status="suspended", cursor=first.next_cursor, limit=2)
    assert [r.id for r in first.runs + second.runs] == ["w2", "w1", "w0"] and second.next_cursor is None
    assert len(waiting) == 3


async def test_a_cursor_duro_did_not_give_and_a_bad_page_size_are_refused(duro_env):
    for bad in ("nonsense", "bm90LWEtbnVtYmVyOng=", 42):
        with pytest.raises(DuroError, match="runs cursor .* is not one duro gave"):
            await duro_env.engine.runs_page(cursor=bad)
    for limit in (0, 1001, True, "10"):
        with pytest.raises(DuroError, match="is not a page size"):
            await duro_env.engine.runs_page(limit=limit)
    with pytest.raises(DuroError, match="cursor or before, not both"):
        await duro_env.engine.list_runs(cursor="eA==", before=(1, "x"))
