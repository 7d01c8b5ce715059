"""``Store.runs.unfinished_by_version``: the unfinished runs of each (workflow, version) of a namespace,
the workflows page's versions, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from duro.store import NewRun, SqlStore, StepRecord, store_call
from duro.store._runs import UNFINISHED_BY_VERSION
from tests.support import store_ops


@pytest.fixture
def store(database_url):
    store = SqlStore(database_url, decisions_clock="caller")
    store.create_schema()
    try:
        yield store
    finally:
        store.close()


def start(store: SqlStore, run_id: str, workflow: str, version: str, namespace: str = "default") -> None:
    new = NewRun(run_id, namespace, workflow, version, None, "w1", created_at=1000)
    store.runs.insert(new, None)


def test_unfinished_runs_are_counted_by_workflow_and_version_in_their_namespace(store):
    assert store.runs.unfinished_by_version("default") == {}
    start(store, "c1-running", "charge", "1")  # owned by w1 at its start: running
    start(store, "c1-waiting", "charge", "1")
    waiting = StepRecord(0, "signal", "go", "waiting", 1000)
    assert store_ops.record_step(store, "c1-waiting", "w1", waiting, "suspended", None, 1000)
    start(store, "c2-running", "charge", "2")
    start(store, "c2-done", "charge", "2")
    assert store_ops.finish_run(store, "c2-done", "w1", "completed", "1", None, 2000)
    start(store, "d1-failed", "deal", "1")
    assert store_ops.finish_run(store, "d1-failed", "w1", "failed", None, '{"message": "no"}', 2000)
    start(store, "c1-elsewhere", "charge", "1", namespace="other")

    statuses = store.runs.statuses(["c1-running", "c1-waiting", "c2-running", "c2-done", "d1-failed"])
    assert statuses == {
        "c1-running": "running",
        "c1-waiting": "suspended",
        "c2-running": "running",
        "c2-done": "completed",
        "d1-failed": "failed",
    }
    assert store.runs.unfinished_by_version("default") == {("charge", "1"): 2, ("charge", "2"): 1}
    assert store.runs.unfinished_by_version("other") == {("charge", "1"): 1}
    assert store.runs.unfinished_by_version("nope") == {}
    assert store_call(store.runs.unfinished_by_version) == "read"


def test_the_count_reads_only_the_unfinished_runs_through_an_index(store):
    """SQLite: ranges of duro_runs_claim (namespace, status, owner); PostgreSQL: the partial index
    duro_runs_active (namespace, created_at, id) WHERE status IN (active), whose condition the
    query repeats. Neither scans the table (finished runs only grow)."""
    for n in range(3):
        start(store, f"r{n}", "charge", "1")
    index = "duro_runs_claim" if store.dialect == "sqlite" else "duro_runs_active"
    with store._engine.connect() as conn:
        if store.dialect == "postgresql":
            conn.connection.driver_connection.execute("SET enable_seqscan = off")  # a 3-row table
        explain = "EXPLAIN QUERY PLAN " if store.dialect == "sqlite" else "EXPLAIN "
        plan = store.db.run_text(conn, explain + UNFINISHED_BY_VERSION, {"namespace": "default"}).fetchall()
    assert any(index in str(row) for row in plan), plan
    assert not any("SCAN duro_runs" in str(row) or "Seq Scan" in str(row) for row in plan), plan
