"""A limit's last hour (``engine.limits.stats``, ``Store.limits.stats``) and the queues runs wait in
(``engine.limits.queued_for``, ``Store.limits.queued``): real slots under the harness's simulated
clock, and the store's two reads on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from duro import DuroError, SlotTimeoutError, acquire_slot, release_slot, wait_for_signal, workflow
from duro.definitions._config import LimitConfig
from duro.store import SqlStore
from duro.store._limits import LIMIT_STATS, QUEUED_LIMITS, SlotStats
from tests.support import store_ops

LIMIT = "voice-calls"  # capacity 1, max hold 45 m (tests/integration/harness_project)


@workflow
async def call(inp: dict) -> dict:
    """Take a slot, work until "done" (or ``work``), then release it unless told to keep it."""
    try:
        slot = await acquire_slot(LIMIT, label=inp["label"], timeout=inp.get("timeout", "24h"))
    except SlotTimeoutError:
        return {"slot": None}
    await wait_for_signal("done", timeout=inp.get("work", "2h"))
    released = None if inp.get("keep") else (await release_slot(slot.id)).released
    return {"slot": slot.id, "released": released}


@pytest.mark.duro(project="tests/integration/harness_project")
async def test_a_grant_after_a_wait_an_expiry_and_a_timeout_show_in_the_last_hour(duro_env):
    limits = duro_env.engine.limits
    assert await limits.stats(LIMIT) == (await limits.stats(LIMIT, timedelta(hours=1)))
    empty = await limits.stats(LIMIT)
    assert (empty.granted, empty.wait_p50_s, empty.wait_p99_s, empty.expired, empty.timed_out) == (
        0,
        None,
        None,
        0,
        0,
    )

    first = await duro_env.start(call, {"label": "first"})  # granted at once: a wait of 0
    second = await duro_env.start(call, {"label": "second", "keep": True, "work": "3h"})
    impatient = await duro_env.start(call, {"label": "impatient", "timeout": "10m"})
    await duro_env.run_until_idle()
    ids = [first.id, second.id, impatient.id, "no-such-run"]
    assert await limits.queued_for(ids) == {second.id: LIMIT, impatient.id: LIMIT}

    await duro_env.advance("10m")  # impatient gives up
    assert await impatient.result() == {"slot": None}
    assert await limits.queued_for(ids) == {second.id: LIMIT}
    await first.signal("done")  # second gets the slot after 10 minutes in the queue
    await duro_env.run_until_idle()
    assert await limits.queued_for(ids) == {}
    stats = await limits.stats(LIMIT)
    assert (stats.granted, stats.wait_p50_s, stats.wait_p90_s, stats.wait_p99_s) == (2, 0.0, 600.0, 600.0)
    assert (stats.expired, stats.timed_out, stats.window_s) == (0, 1, 3600.0)

    await duro_env.advance("45m")  # second never releases: max_hold takes the slot back at 00:55
    await duro_env.assert_limit(LIMIT, busy=0, waiting=0)
    stats = await limits.stats(LIMIT)
    assert (stats.granted, stats.expired, stats.timed_out) == (2, 1, 1)

    # 01:10: first's grant (00:00) has left the hour; second's (00:10) and the timeout are at its edge
    await duro_env.advance("15m")
    stats = await limits.stats(LIMIT)
    assert (stats.granted, stats.wait_p50_s, stats.wait_p99_s, stats.expired, stats.timed_out) == (
        1,
        600.0,
        600.0,
        1,
        1,
    )
    await duro_env.advance("1ms")
    stats = await limits.stats(LIMIT)
    assert (stats.granted, stats.wait_p50_s, stats.expired, stats.timed_out) == (0, None, 1, 0)
    narrow = await limits.stats(LIMIT, "10m")  # the expiry at 00:55 is 15 minutes old
    assert (narrow.granted, narrow.expired, narrow.timed_out) == (0, 0, 0)
    assert (await limits.stats(LIMIT, "1d")).granted == 2


@pytest.mark.duro(project="tests/integration/harness_project")
async def test_stats_name_the_limit_and_the_window_they_refuse(duro_env):
    with pytest.raises(DuroError, match="unknown limit 'nope'"):
        await duro_env.engine.limits.stats("nope")
    with pytest.raises(DuroError, match="window"):
        await duro_env.engine.limits.stats(LIMIT, "soon")
    with pytest.raises(DuroError, match="longer than 0"):
        await duro_env.engine.limits.stats(LIMIT, 0)
    assert await duro_env.engine.limits.queued_for([]) == {}
    assert await duro_env.engine.limits.queued_for(["a\x00b"]) == {}


# -- the store's reads, on both databases ----------------------------------------------------------


@pytest.fixture
def store(database_url):
    store = SqlStore(database_url, decisions_clock="caller")  # the test passes every instant
    store.create_schema()
    try:
        yield store
    finally:
        store.close()


def test_the_store_counts_grants_waits_expiries_and_timeouts_by_when_they_happened(store):
    line = LimitConfig("line", capacity=1, max_hold_ms=60_000)
    other = LimitConfig("other", capacity=1, max_hold_ms=600_000)
    configs = {"line": line, "other": other}
    assert store_ops.slot_request(store, line, "h.1", "holder", None, None, 1000).state == "busy"
    assert store_ops.slot_request(store, line, "w.1", "waiter", None, 50_000, 1000).state == "waiting"
    assert store_ops.slot_request(store, line, "t.1", "timer", None, 5000, 1000).state == "waiting"
    assert store_ops.slot_request(store, other, "o.1", "elsewhere", None, None, 1000).state == "busy"
    ids = ["holder", "waiter", "timer", "elsewhere", "nobody"]
    assert store.limits.queued(ids) == {"waiter": "line", "timer": "line"}

    store.slots.expire(configs, 5000)  # the timer's request times out
    assert store.slots.get("t.1").state == "timed_out"
    _, released, granted = store_ops.slot_release(store, configs, "h.1", 7000)
    assert released and [(row.id, row.state) for row in granted] == [("w.1", "reserved")]
    assert store.limits.queued(ids) == {"waiter": "line"}  # reserved, not confirmed: still queued
    assert store.limits.stats("line", 0) == SlotStats(1, 0, 0, 0, 0, 1)  # a reservation is no grant

    row, _ = store_ops.slot_confirm(store, line, "w.1", 8000)
    assert (row.state, row.held_since, row.expires_at) == ("busy", 8000, 68_000)
    assert store.limits.queued(ids) == {}
    store.slots.expire(configs, 68_000)  # the waiter never released: max_hold takes it back
    assert (store.slots.get("w.1").state, store.slots.get("w.1").reason) == ("released", "max_hold")

    assert store.limits.stats("line", 0) == SlotStats(2, 0, 7000, 7000, 1, 1)
    assert store.limits.stats("line", 1001) == SlotStats(1, 7000, 7000, 7000, 1, 1)
    assert store.limits.stats("line", 8001) == SlotStats(0, None, None, None, 1, 0)
    assert store.limits.stats("line", 68_001) == SlotStats(0, None, None, None, 0, 0)
    assert store.limits.stats("other", 0) == SlotStats(1, 0, 0, 0, 0, 0)  # still busy, granted at once
    assert store.limits.stats("nope", 0) == SlotStats(0, None, None, None, 0, 0)
    assert store.limits.queued([]) == {}


def test_the_stats_and_queue_reads_go_through_the_slots_indexes(store):
    """The last hour reads a range of duro_slots_queue (limit, busy) and one of duro_slots_ended
    (limit, ended since); the queues of a page's runs probe duro_slots_run (only waiting and
    reserved slots are in it)."""
    line = LimitConfig("line", capacity=1, max_hold_ms=60_000)
    for n in range(3):
        store_ops.slot_request(store, line, f"s.{n}", f"run-{n}", None, None, 1000)
    cases = [
        (LIMIT_STATS, {"name": "line", "since": 0}, "duro_slots_queue"),
        (LIMIT_STATS, {"name": "line", "since": 0}, "duro_slots_ended"),
        (QUEUED_LIMITS, {"ids": ["run-0", "run-1"]}, "duro_slots_run"),
    ]
    with store._engine.connect() as conn:
        if store.dialect == "postgresql":
            conn.connection.driver_connection.execute("SET enable_seqscan = off")  # a 3-row table
        explain = "EXPLAIN QUERY PLAN " if store.dialect == "sqlite" else "EXPLAIN "
        for sql, params, index in cases:
            plan = store.db.run_text(conn, explain + sql, params).fetchall()
            assert any(index in str(row) for row in plan), (sql, plan)
            assert not any(str(row[-1]).startswith("SCAN duro_slots") for row in plan), (sql, plan)
