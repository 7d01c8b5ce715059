"""A limit's slots a page at a time (``engine.limits.slots_page``): the same slots in the same order
as ``engine.limits.slots``, queue positions counted across pages, a key's slots alone, and a cursor
duro did not give refused; at the store, each page is read in queue order through duro_slots_queue."""

from __future__ import annotations

import pytest

from duro import DuroError, acquire_slot, wait_for_signal, workflow
from duro.store import SqlStore
from duro.store._queries import QUERIES

pytestmark = pytest.mark.duro(
    config={
        "limits": {
            "partner-api": {"capacity": 2, "max_hold": "1h"},
            "sessions": {"capacity": 10, "max_hold": "1h", "per_key": 1},
        }
    }
)


@workflow(name="pages.holder")
async def holder(job: dict) -> str:
    slot = await acquire_slot(job["limit"], key=job.get("key"), label=job["label"])
    await wait_for_signal("done")
    return slot.id


async def _all_pages(env, name: str, key: str | None = None, size: int = 3) -> list:
    slots, cursor = [], None
    while True:
        page = await env.engine.limits.slots_page(name, key=key, cursor=cursor, limit=size)
        slots += page.slots
        assert len(page.slots) <= size
        if page.next_cursor is None:
            return slots
        cursor = page.next_cursor


async def test_pages_of_a_long_queue_list_every_slot_once_in_order_with_positions(duro_env):
    for n in range(9):
        await duro_env.start(holder, {"limit": "partner-api", "label": f"job{n}"}, run_id=f"r{n}")
    await duro_env.run_until_idle()
    whole = await duro_env.engine.limits.slots("partner-api")
    assert [s.state for s in whole] == ["busy"] * 2 + ["waiting"] * 7
    for size in (1, 2, 3, 9, 100):
        paged = await _all_pages(duro_env, "partner-api", size=size)
        assert [(s.id, s.state, s.position) for s in paged] == [(s.id, s.state, s.position) for s in whole]
    assert [s.position for s in whole[2:]] == list(range(1, 8))


async def test_a_keys_slots_page_alone_and_bad_cursors_are_refused(duro_env):
    for n in range(4):
        await duro_env.start(holder, {"limit": "sessions", "key": "acct:a", "label": f"a{n}"}, run_id=f"a{n}")
        await duro_env.start(holder, {"limit": "sessions", "key": "acct:b", "label": f"b{n}"}, run_id=f"b{n}")
    await duro_env.run_until_idle()
    paged = await _all_pages(duro_env, "sessions", key="acct:a", size=2)
    whole = await duro_env.engine.limits.slots("sessions", key="acct:a")
    assert [(s.id, s.position) for s in paged] == [(s.id, s.position) for s in whole]
    assert {s.key for s in paged} == {"acct:a"} and len(paged) == 4
    for bad in ("nonsense", "OTo5Ojk6eA==", 7):
        with pytest.raises(DuroError, match="slots cursor .* is not one duro gave"):
            await duro_env.engine.limits.slots_page("sessions", cursor=bad)
    with pytest.raises(DuroError, match="is not a page size"):
        await duro_env.engine.limits.slots_page("sessions", limit=0)
    with pytest.raises(DuroError, match="does not exist|unknown|not declared"):
        await duro_env.engine.limits.slots_page("no-such-limit")


def test_a_page_reads_one_states_slots_in_queue_order_through_the_index(database_url):
    store = SqlStore(database_url, decisions_clock="caller")
    store.create_schema()
    params = {"name": "api", "state": "waiting", "key": "k", "pos": -1, "id": "", "n": 10}
    try:
        with store._engine.connect() as conn:
            if store.dialect == "postgresql":
                conn.connection.driver_connection.execute("SET enable_seqscan = off")
            explain = "EXPLAIN QUERY PLAN " if store.dialect == "sqlite" else "EXPLAIN "
            for name in ("limit_slots_after", "limit_key_slots_after"):
                plan = [
                    str(row) for row in store.db.run_text(conn, explain + QUERIES[name], params).fetchall()
                ]
                assert any("duro_slots_queue" in row or "duro_slots_key_queue" in row for row in plan), plan
                # never the whole state sorted: at most the slots of one pos ordered by id
                assert not any("TEMP B-TREE FOR ORDER BY" in row or "('Sort" in row for row in plan), plan
    finally:
        store.close()
