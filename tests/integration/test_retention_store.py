"""Retention at the store, on SQLite and PostgreSQL: a prune deletes finished runs past the cutoff
with their steps, signals and ended slots, a bounded batch per transaction from where the last one
stopped; it keeps unfinished runs, a finished child of an unfinished parent and a run whose slot is
held; on PostgreSQL one pruner of a namespace at a time; and it reads through duro_runs_ended."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from duro.store import Prune, SqlStore
from duro.store._queries import QUERIES, list_runs_sql

T0 = 1_000_000_000


def _store(url: str) -> SqlStore:
    store = SqlStore(url, decisions_clock="caller")
    store.create_schema()
    return store


def _run(conn: Any, run_id: str, status: str, ended_at: int | None, **extra: Any) -> None:
    values = {
        "id": run_id,
        "namespace": extra.get("namespace", "default"),
        "workflow": "wf",
        "version": "1",
        "status": status,
        "tags": "[]",
        "created_at": T0,
        "updated_at": T0,
        "ended_at": ended_at,
        "parent_id": extra.get("parent_id"),
    }
    conn.execute(
        sa.text(
            "INSERT INTO duro_runs (id, namespace, workflow, version, status, tags, created_at, updated_at, "
            "ended_at, parent_id) VALUES (:id, :namespace, :workflow, :version, :status, :tags, :created_at, "
            ":updated_at, :ended_at, :parent_id)"
        ),
        values,
    )
    for seq in range(extra.get("steps", 2)):
        conn.execute(
            sa.text(
                "INSERT INTO duro_steps (run_id, seq, kind, name, status, started_at) "
                "VALUES (:run_id, :seq, 'step', 'work', 'completed', :at)"
            ),
            {"run_id": run_id, "seq": seq, "at": T0},
        )


def _slot(conn: Any, run_id: str, seq: int, state: str) -> None:
    conn.execute(
        sa.text(
            "INSERT INTO duro_steps (run_id, seq, kind, name, status, started_at) "
            "VALUES (:run_id, :seq, 'hook', 'Esperando hueco · api', 'completed', :at)"
        ),
        {"run_id": run_id, "seq": seq, "at": T0},
    )
    conn.execute(
        sa.text(
            "INSERT INTO duro_slots (id, limit_name, run_id, state, pos, enqueued_at, ended_at) "
            "VALUES (:id, 'api', :run_id, :state, 1, :at, :ended)"
        ),
        {
            "id": f"{run_id}.{seq}",
            "run_id": run_id,
            "state": state,
            "at": T0,
            "ended": None if state == "busy" else T0,
        },
    )


def _count(store: SqlStore, table: str) -> int:
    with store._engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def _prune_all(store: SqlStore, cutoff: int, n: int = 3, dry_run: bool = False) -> list[tuple[int, int, int]]:
    batches, after = [], (-1, "")
    while True:
        batch = store.runs.prune(Prune("default", cutoff, after, n, dry_run))
        assert batch is not None
        if batch.last is None:
            return batches
        batches.append((batch.runs, batch.steps, batch.slots))
        after = batch.last


def test_a_prune_goes_a_bounded_batch_at_a_time_and_keeps_what_must_stay(database_url):
    store = _store(database_url)
    try:
        with store._engine.begin() as conn:
            for n in range(7):
                _run(conn, f"done-{n}", "completed", T0 + n)
            _run(conn, "failed", "failed", T0 + 10)
            _run(conn, "recent", "completed", T0 + 1_000)  # ended after the cutoff
            _run(conn, "running", "running", None)
            _run(conn, "parent", "suspended", None)
            _run(conn, "kept-child", "completed", T0 + 1, parent_id="parent")
            _run(conn, "ended-parent", "completed", T0 + 2)
            _run(conn, "free-child", "cancelled", T0 + 3, parent_id="ended-parent")
            _run(conn, "orphan-child", "completed", T0 + 3, parent_id="pruned-long-ago")
            _run(conn, "holder", "completed", T0 + 4, steps=0)
            _slot(conn, "holder", 0, "busy")  # held past its run's end
            _run(conn, "released", "completed", T0 + 4, steps=0)
            _slot(conn, "released", 0, "released")
            _run(conn, "other-ns", "completed", T0, namespace="elsewhere")
            conn.execute(
                sa.text("INSERT INTO duro_signals (run_id, name, created_at) VALUES ('done-0', 'go', :at)"),
                {"at": T0},
            )
        dry = _prune_all(store, T0 + 500, dry_run=True)
        assert sum(b[0] for b in dry) == 12 and _count(store, "duro_runs") == 18  # nothing went
        batches = _prune_all(store, T0 + 500)
        assert [runs for runs, _, _ in batches] == [3, 3, 3, 3]  # oldest end first, 3 a transaction
        assert (sum(b[0] for b in batches), sum(b[1] for b in batches), sum(b[2] for b in batches)) == (
            sum(b[0] for b in dry),
            sum(b[1] for b in dry),
            sum(b[2] for b in dry),
        )
        with store._engine.connect() as conn:
            left = {row[0] for row in conn.execute(sa.text("SELECT id FROM duro_runs"))}
            slots = {row[0] for row in conn.execute(sa.text("SELECT id FROM duro_slots"))}
        assert left == {"recent", "running", "parent", "kept-child", "holder", "other-ns"}
        assert slots == {"holder.0"}
        assert _count(store, "duro_signals") == 0
        assert _count(store, "duro_steps") == 2 * 5 + 1  # the six kept runs' steps (holder: its hook)
        assert store.runs.next_prune_due("default", T0 + 500) == T0 + 1_000
        assert store.runs.next_prune_due("default", T0 + 1_001) is None
    finally:
        store.close()


@pytest.mark.postgres
def test_on_postgresql_a_background_batch_gives_way_to_another_pruner(postgres_url):
    store = _store(postgres_url)
    try:
        with store._engine.begin() as conn:
            _run(conn, "done", "completed", T0)
        other = sa.create_engine(postgres_url)  # another worker's session, pruning
        with other.begin() as holder:
            holder.execute(sa.text(QUERIES["lock_key"]), {"key": "duro:prune:default"})
            assert store.runs.prune(Prune("default", T0 + 1, (-1, ""), 10, wait=False)) is None
            assert store.runs.prune(Prune("elsewhere", T0 + 1, (-1, ""), 10, wait=False)) is not None
        other.dispose()
        batch = store.runs.prune(Prune("default", T0 + 1, (-1, ""), 10, wait=False))
        assert batch is not None and batch.runs == 1
    finally:
        store.close()


@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("prune_candidates", "duro_runs_ended"),
        ("next_prune_due", "duro_runs_ended"),
        ("finished_since", "duro_runs_ended"),
        ((), "duro_runs_list"),
        (("before",), "duro_runs_list"),
        (("namespace", "before"), "duro_runs_list"),
        (("statuses", "unfinished"), "duro_runs_active"),
        (("namespace", "statuses", "unfinished", "before"), "duro_runs_active"),
    ],
)
def test_history_is_read_through_an_index_that_skips_it(database_url, query, index):
    """However many finished runs the store keeps, a prune and replay-check read the finished runs
    by their end, a runs page reads its rows newest first in index order (no sort of every run, of
    every namespace or one), and a list of unfinished runs reads unfinished runs alone."""
    store = _store(database_url)
    params = {
        "namespace": "default",
        "cutoff": T0,
        "since": T0,
        "after_at": -1,
        "after_id": "",
        "n": 10,
        "limit": 10,
        "before_at": T0,
        "before_id": "z",
        "statuses": ["running", "suspended"],
    }
    sql = QUERIES[query] if isinstance(query, str) else list_runs_sql(query)
    try:
        with store._engine.connect() as conn:
            if store.dialect == "postgresql":
                conn.connection.driver_connection.execute("SET enable_seqscan = off")
            explain = "EXPLAIN QUERY PLAN " if store.dialect == "sqlite" else "EXPLAIN "
            plan = [str(row) for row in store.db.run_text(conn, explain + sql, params).fetchall()]
    finally:
        store.close()
    assert any(index in row for row in plan), plan
    assert not any("TEMP B-TREE FOR ORDER BY" in row or "('Sort" in row for row in plan), plan
