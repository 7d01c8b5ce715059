"""SqlStore beyond the store contract: its URLs, its schema migrations, its SQLite transactions and
the indexes its queries use."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from duro import DuroError
from duro.store import SCHEMA_VERSION, Claim, NewRun, SqlStore
from duro.store._queries import claim_sql
from duro.store._tables import meta


@pytest.fixture
def store(database_url):
    store = SqlStore(database_url, decisions_clock="caller")  # these tests pass every instant themselves
    store.create_schema()
    yield store
    store.close()


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "mysql://u@h/db",
        "sqlite://",
        "sqlite:///x.db?synchronous=MAYBE",
        "postgresql+psycopg://u@h/db?synchronous=FULL",
    ],
)
def test_bad_database_urls_say_what_to_use(url):
    with pytest.raises(DuroError) as info:
        SqlStore(url)
    assert "sqlite:///" in str(info.value) or "synchronous" in str(info.value)


def test_an_older_schema_is_migrated_step_by_step(database_url, monkeypatch):
    from duro.store import _schema

    first = SqlStore(database_url)
    first.create_schema()
    with first._engine.begin() as conn:
        conn.execute(meta.update().values(value="0"))
    first.close()
    applied = []
    monkeypatch.setitem(_schema.MIGRATIONS, 0, lambda conn, dialect: applied.append(dialect))
    second = SqlStore(database_url)
    second.create_schema()
    assert applied == [second.dialect] and second.schema_version() == SCHEMA_VERSION
    second.close()


def _index_definition(store: SqlStore, name: str) -> str:
    with store._engine.connect() as conn:
        if store.dialect == "sqlite":
            sql = "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :name"
        else:
            sql = "SELECT indexdef FROM pg_indexes WHERE indexname = :name"
        return conn.execute(sa.text(sql), {"name": name}).scalar_one()


SCHEMA_3_INDEXES = [
    ("duro_runs_quota", "duro_runs_quota", "duro_runs", "concurrency_key, status"),
    ("duro_runs_parent", "duro_runs_parent", "duro_runs", "parent_id"),
    ("duro_slots_due", "duro_slots_due", "duro_slots", "due_at"),
    ("duro_slots_run", "duro_slots_run", "duro_slots", "run_id"),
]


SCHEMA_3_CLAIM_INDEX = ("duro_runs_active", "duro_runs_claim", "duro_runs", "namespace, status, owner")


def test_schema_3_is_migrated_to_partial_indexes_keeping_every_run(database_url):
    """A version-3 database (full indexes) opened by this duro: four indexes become partial, the
    claims' index gives way to one on unfinished runs, the runs stay, and counts and children
    answer as before."""
    first = SqlStore(database_url)
    first.create_schema()
    first.runs.insert(NewRun("parent", "default", "wf", "1", "{}", None, 1, concurrency_key="tenant:a"), None)
    first.runs.insert(
        NewRun("child", "default", "wf", "1", "{}", None, 2, parent_id="parent", parent_seq=0), None
    )
    with first._engine.begin() as conn:  # back to schema 3's layout
        claim = [SCHEMA_3_CLAIM_INDEX] if first.dialect == "postgresql" else []
        for index, old, table, columns in SCHEMA_3_INDEXES + claim:
            conn.execute(sa.text(f"DROP INDEX IF EXISTS {index}"))
            conn.execute(sa.text(f"CREATE INDEX {old} ON {table} ({columns})"))
        conn.execute(sa.text("UPDATE duro_meta SET value = '3' WHERE key = 'schema_version'"))
    assert "WHERE" not in _index_definition(first, "duro_runs_quota").upper()
    first.close()
    second = SqlStore(database_url)
    second.create_schema()
    assert second.schema_version() == SCHEMA_VERSION == 13
    assert "concurrency_key IS NOT NULL" in _index_definition(second, "duro_runs_quota")
    assert "parent_id IS NOT NULL" in _index_definition(second, "duro_runs_parent")
    assert "due_at IS NOT NULL" in _index_definition(second, "duro_slots_due")
    assert "waiting" in _index_definition(second, "duro_slots_run")
    assert "owner IS NULL" in _index_definition(second, "duro_runs_due")  # schema 5 (see below)
    if second.dialect == "postgresql":  # unfinished runs by status, for lists of active runs
        assert "pending" in _index_definition(second, "duro_runs_active")
    else:
        assert "namespace, status, owner" in _index_definition(second, "duro_runs_claim")
    assert second.runs.count_active("tenant:a", ("pending", "running"), None) == 1
    assert second.runs.get("child").parent_id == "parent"
    second.close()


def test_a_newer_schema_is_refused(database_url):
    first = SqlStore(database_url)
    first.create_schema()
    with first._engine.begin() as conn:
        conn.execute(meta.update().values(value=str(SCHEMA_VERSION + 1)))
    first.close()
    newer = SqlStore(database_url)
    with pytest.raises(DuroError, match="upgrade duro"):
        newer.create_schema()
    newer.close()


def test_a_sqlite_write_commits_or_rolls_back_raw_and_core_statements_together(sqlite_url):
    """SQLite's write transaction is begun on the driver (SQLAlchemy's bookkeeping skipped): a Core
    statement inside joins it, a failure anywhere undoes both kinds, and the next write starts clean."""
    store = SqlStore(sqlite_url)
    store.create_schema()

    def keys() -> set[str]:
        with store.db.read() as conn:
            return set(conn.execute(sa.select(meta.c.key)).scalars())

    with store.db.write() as conn:  # raw only
        conn.connection.driver_connection.execute("INSERT INTO duro_meta (key, value) VALUES ('raw', '1')")
    with store.db.write() as conn:  # raw, then Core
        conn.connection.driver_connection.execute(
            "INSERT INTO duro_meta (key, value) VALUES ('mixed-raw', '1')"
        )
        conn.execute(meta.insert().values(key="mixed-core", value="1"))
    assert {"raw", "mixed-raw", "mixed-core"} <= keys()
    for core, explicit in [(False, False), (False, True), (True, False), (True, True)]:
        with pytest.raises(RuntimeError, match="undo"), store.db.write() as conn:
            conn.connection.driver_connection.execute(
                "INSERT INTO duro_meta (key, value) VALUES ('gone-raw', '1')"
            )
            if core:
                conn.execute(meta.insert().values(key="gone-core", value="1"))
            if explicit:
                conn.rollback()  # as a fenced decision does before raising
            raise RuntimeError("undo")
        assert not {"gone-raw", "gone-core"} & keys()
    with store.db.write() as conn:  # nothing left open by the failures
        conn.execute(meta.insert().values(key="after", value="1"))
    assert "after" in keys()
    store.close()


def test_schema_5_gains_the_trace_context_keeping_every_run(database_url):
    """A version-5 database (no ``trace_context``, no ``duro_slots_ended``): the column and the index
    are added, the runs stay, and a new run keeps the context it was started with."""
    first = SqlStore(database_url)
    first.create_schema()
    first.runs.insert(NewRun("old", "default", "wf", "1", "{}", None, 1), None)
    with first._engine.begin() as conn:  # back to schema 5's layout
        conn.execute(sa.text("ALTER TABLE duro_runs DROP COLUMN trace_context"))
        conn.execute(sa.text("DROP INDEX duro_slots_ended"))
        conn.execute(sa.text("UPDATE duro_meta SET value = '5' WHERE key = 'schema_version'"))
    first.close()
    second = SqlStore(database_url)
    second.create_schema()
    assert second.schema_version() == SCHEMA_VERSION == 13
    assert "ended_at IS NOT NULL" in _index_definition(second, "duro_slots_ended")
    assert second.runs.get("old").trace_context is None
    context = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    second.runs.insert(NewRun("new", "default", "wf", "1", "{}", None, 2, trace_context=context), None)
    assert second.runs.get("new").trace_context == context
    assert [run.trace_context for run in second.runs.claim(Claim("w", "default", ["wf"], now=10))] == [
        None,
        context,
    ]
    second.close()


def test_schema_6_gains_the_cancel_request_keeping_every_run(database_url):
    """A version-6 database (no ``cancel_requested_at``): the column is added, the runs stay with
    none asked for, and a cancel of a run held by a worker is recorded in it."""
    first = SqlStore(database_url)
    first.create_schema()
    first.runs.insert(NewRun("old", "default", "wf", "1", "{}", "w", 1), None)
    with first._engine.begin() as conn:  # back to schema 6's layout
        conn.execute(sa.text("ALTER TABLE duro_runs DROP COLUMN cancel_requested_at"))
        conn.execute(sa.text("UPDATE duro_meta SET value = '6' WHERE key = 'schema_version'"))
    first.close()
    second = SqlStore(database_url)
    second.create_schema()
    assert second.schema_version() == SCHEMA_VERSION == 13
    assert second.runs.get("old").cancel_requested_at is None
    assert second.runs.cancel("old", None, "{}", 5).requested == ["old"]
    assert second.runs.get("old").cancel_requested_at == 5
    second.close()


def test_schema_4_is_migrated_to_due_work_keeping_every_run(database_url):
    """A version-4 database (no ``due_at``): every unfinished run becomes due at once, the runs of
    owners with no row go back, duro_runs_due and duro_runs_owner are made, and finished runs stay
    out of the due index."""
    first = SqlStore(database_url)
    first.create_schema()
    first.workers.register("w-alive", "default", "h", 1, 1)
    first.runs.insert(NewRun("held", "default", "wf", "1", "{}", "w-alive", 1), None)
    first.runs.insert(NewRun("orphan", "default", "wf", "1", "{}", "w-gone", 2), None)
    first.runs.insert(NewRun("pending", "default", "wf", "1", "{}", None, 3), None)
    first.runs.insert(NewRun("done", "default", "wf", "1", "{}", None, 4), None)
    with first._engine.begin() as conn:  # back to schema 4's layout
        conn.execute(sa.text("UPDATE duro_runs SET status = 'completed' WHERE id = 'done'"))
        for index in ("duro_runs_due", "duro_runs_owner"):
            conn.execute(sa.text(f"DROP INDEX {index}"))
        conn.execute(sa.text("ALTER TABLE duro_runs DROP COLUMN due_at"))
        conn.execute(sa.text("UPDATE duro_meta SET value = '4' WHERE key = 'schema_version'"))
    first.close()
    second = SqlStore(database_url)
    second.create_schema()
    assert second.schema_version() == SCHEMA_VERSION == 13
    with second._engine.connect() as conn:
        rows = dict(conn.execute(sa.text("SELECT id, due_at FROM duro_runs")).fetchall())
    assert rows == {"held": 1, "orphan": 2, "pending": 3, "done": None}
    assert second.runs.get("orphan").owner is None and second.runs.get("held").owner == "w-alive"
    claimed = second.runs.claim(Claim("w-alive", "default", ["wf"], now=10))
    assert sorted(run.id for run in claimed) == ["orphan", "pending"]
    assert "owner IS NOT NULL" in _index_definition(second, "duro_runs_owner")
    second.close()


def test_a_claim_reads_due_runs_through_their_partial_index_and_tells_fresh_ones(store):
    """The claim's candidates come from duro_runs_due (unowned runs with a due time, in due order),
    never from every run of the namespace: a million runs asleep until next week are outside what
    it reads. A run taken from pending is ``fresh`` (never executed: its worker reads no history);
    a run whose owner has no row is taken only once its runs are handed back (``orphans``)."""
    for i in range(3):
        store.runs.insert(NewRun(f"r{i}", "default", "wf", "1", "{}", None, i), None)
    store.runs.insert(NewRun("orphan", "default", "wf", "1", "{}", "a-dead-worker", 3), None)  # running
    statements: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if "ORDER BY duro_runs.due_at" in statement:  # the candidates (PostgreSQL: inside the UPDATE)
            statements.append((statement, parameters))

    sa.event.listen(store._engine, "before_cursor_execute", capture)
    claimed = store.runs.claim(Claim("w1", "default", ["wf"], now=10, orphans=True))
    sa.event.remove(store._engine, "before_cursor_execute", capture)
    assert sorted(run.id for run in claimed) == ["orphan", "r0", "r1", "r2"]
    # taken from pending: nothing to replay; the dead worker's run: its history must be read
    assert {run.id: (run.fresh, run.status) for run in claimed} == {
        "r0": (True, "running"),
        "r1": (True, "running"),
        "r2": (True, "running"),
        "orphan": (False, "running"),
    }
    assert statements == []  # one fixed statement (on SQLite the candidates, then their claim), on the driver
    params = {"namespace": "default", "workflows": ["wf"], "owner": "w2", "now": 20, "limit": 100}
    candidates = claim_sql(store.dialect, False)[0]  # PostgreSQL: the claim, candidates inside
    with store._engine.connect() as conn:
        if store.dialect == "sqlite":
            plan = store.db.run_text(conn, "EXPLAIN QUERY PLAN " + candidates, params).fetchall()
        else:
            # a 4-row table: make the planner show its index
            conn.connection.driver_connection.execute("SET enable_seqscan = off")
            plan = store.db.run_text(conn, "EXPLAIN " + candidates, params).fetchall()
    assert any("duro_runs_due" in str(row) for row in plan), plan
    assert not any(str(row[-1]).startswith("SCAN duro_runs") for row in plan), plan


def test_hand_backs_read_only_the_unfinished_runs_workers_hold(store):
    """A stopping or expired worker's runs, and runs whose owner has no row, are found through an
    index of unfinished runs (duro_runs_owner: unfinished owned runs): a worker's past runs never
    slow them."""
    from duro.store._queries import QUERIES

    store.runs.insert(NewRun("held", "default", "wf", "1", "{}", "w1", 1), None)
    with store._engine.connect() as conn:
        if store.dialect == "postgresql":
            conn.connection.driver_connection.execute("SET enable_seqscan = off")
        for name, params in (("hand_back", {"id": "w1"}), ("hand_back_orphans", {"now": 0})):
            explain = "EXPLAIN QUERY PLAN " if store.dialect == "sqlite" else "EXPLAIN "
            plan = store.db.run_text(conn, explain + QUERIES[name], params).fetchall()
            # an index of unfinished runs only (PostgreSQL's planner may take duro_runs_active)
            assert any("duro_runs_owner" in str(row) or "duro_runs_active" in str(row) for row in plan), (
                name,
                plan,
            )


def test_schema_6_gains_the_quota_index_by_end_keeping_every_run(database_url):
    """A version-6 database (the quota index on key and status only): it is rebuilt with the runs'
    end, and a count and a refusal's recent durations read it."""
    first = SqlStore(database_url)
    first.create_schema()
    first.runs.insert(NewRun("old", "default", "wf", "1", "{}", None, 1, concurrency_key="tenant:a"), None)
    with first._engine.begin() as conn:  # back to schema 6's layout
        conn.execute(sa.text("DROP INDEX duro_runs_quota"))
        conn.execute(
            sa.text(
                "CREATE INDEX duro_runs_quota ON duro_runs (concurrency_key, status) "
                "WHERE concurrency_key IS NOT NULL"
            )
        )
        conn.execute(sa.text("UPDATE duro_meta SET value = '6' WHERE key = 'schema_version'"))
    first.close()
    second = SqlStore(database_url)
    second.create_schema()
    assert second.schema_version() == SCHEMA_VERSION == 13
    assert "ended_at" in _index_definition(second, "duro_runs_quota")
    assert second.runs.count_active("tenant:a", ("pending",), None) == 1
    second.close()


def test_schema_8_counts_the_keys_of_a_keyed_limit_keeping_their_overrides(database_url):
    """A version-8 database (a keyed limit's keys had overrides only, their counts read from the
    slots): the keys' rows are made from the slots, overrides kept, and a grant pass reads them."""
    from duro import Limit, define_workspace
    from duro.store import ReleaseSlot, RequestSlot

    config = define_workspace(limits={"api": Limit(capacity=4, per_key=1, max_hold="1h")}).limits["api"]
    first = SqlStore(database_url)
    first.create_schema()
    for i, key in enumerate(["a", "a", "b", "c"]):
        first.steps.apply(RequestSlot(config, f"s{i}", None, None, None, 1000 + i, None, key))
    with first._engine.begin() as conn:  # back to schema 8's layout: overrides only
        conn.execute(sa.text("DROP TABLE duro_limit_keys"))
        conn.execute(
            sa.text(
                "CREATE TABLE duro_limit_keys (limit_name VARCHAR(64) NOT NULL, limit_key VARCHAR(200) "
                "NOT NULL, capacity_override INTEGER NOT NULL, updated_at BIGINT NOT NULL, "
                "PRIMARY KEY (limit_name, limit_key))"
            )
        )
        conn.execute(sa.text("INSERT INTO duro_limit_keys VALUES ('api', 'z', 3, 5)"))
        conn.execute(sa.text("UPDATE duro_meta SET value = '8' WHERE key = 'schema_version'"))
    first.close()
    second = SqlStore(database_url)
    second.create_schema()
    assert second.schema_version() == SCHEMA_VERSION == 13
    assert second.limits.keys(config) == [
        ("a", 1, False, 1, 0, 1),
        ("b", 1, False, 1, 0, 0),
        ("c", 1, False, 1, 0, 0),
        ("z", 3, True, 0, 0, 0),
    ]
    released = second.steps.apply(ReleaseSlot({"api": config}, "s0", 2000))
    assert [row.id for row in released.granted] == ["s1"]  # a's waiter, through its key's row
    assert second.limits.keys(config)[0] == ("a", 1, False, 0, 1, 0)
    second.close()


def test_schema_10_indexes_a_rates_ended_waits_and_ends_its_grants(database_url):
    """A version-10 database (a grant had no end): its grants end when they were granted, the new
    index exists, and the window's grants still count."""
    from duro.definitions._config import check_rate

    rate = check_rate("api", 2, "1m")
    first = SqlStore(database_url, decisions_clock="caller")
    first.create_schema()
    first.rates.declare([rate], 1000)
    first.rates.request(rate, "w0", None, None, 1, None, 1000)
    first.rates.request(rate, "w1", None, None, 1, None, 1001)
    first.rates.request(rate, "w2", None, None, 1, None, 1002)  # waits: the window is full
    with first._engine.begin() as conn:  # back to schema 10: no counts, no end on a grant
        conn.execute(sa.text("UPDATE duro_rate_waits SET ended_at = NULL WHERE state = 'granted'"))
        for index in ("duro_rate_waits_ended", "duro_rate_waits_granted"):
            conn.execute(sa.text(f"DROP INDEX {index}"))
        conn.execute(sa.text("ALTER TABLE duro_rate_waits DROP COLUMN cum"))
        conn.execute(sa.text("ALTER TABLE duro_rate_keys DROP COLUMN next_pos"))
        conn.execute(sa.text("ALTER TABLE duro_rate_keys DROP COLUMN granted_cum"))
        conn.execute(
            sa.text(
                "CREATE INDEX duro_rate_waits_granted ON duro_rate_waits (rate_key, granted_at, rate_name)"
            )
        )
        conn.execute(sa.text("UPDATE duro_meta SET value = '10' WHERE key = 'schema_version'"))
    first.close()
    second = SqlStore(database_url, decisions_clock="caller")
    second.create_schema()
    assert second.schema_version() == SCHEMA_VERSION == 13
    assert second.rates.get_wait("w0").ended_at == 1000
    (state,) = second.rates.states(2000)
    assert (state.granted, state.waiting) == (2, 1)
    assert second.rates.request(rate, "w3", None, None, 1, None, 2000).wait.pos == 3  # after w2
    assert second.rates.due({"api": rate}, 60_999).granted == []  # w0 and w1 still in the window
    assert [w.id for w in second.rates.due({"api": rate}, 61_000).granted] == ["w2"]
    with second._engine.begin() as conn:
        names = {name for (name,) in conn.execute(sa.text(_INDEX_NAMES[second.dialect]))}
    assert "duro_rate_waits_ended" in names
    second.close()


_INDEX_NAMES = {
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'index'",
    "postgresql": "SELECT indexname FROM pg_indexes",
}


def test_postgresql_transactions_are_the_stores_own_and_reads_keep_the_prepared_statements(
    postgres_url,
):
    """The store's sessions are in autocommit and it begins each transaction with its first
    statement: what a transaction wrote before an error is rolled back (also when the error was
    caught inside: the transaction then raises instead of committing), and a one-statement read
    runs in no transaction at all, so that it needs no rollback either (psycopg forgets a session's
    prepared statements at every rollback, and every statement after one would be parsed and
    planned again)."""
    import psycopg

    status = psycopg.pq.TransactionStatus
    store = SqlStore(postgres_url, pool_size=1)
    store.create_schema()
    db = store.db
    try:
        with pytest.raises(RuntimeError), db.write() as conn:
            params = {"id": "written-then-undone", "namespace": "default", "host": "h", "pid": 1, "now": 1}
            db.run(conn, "insert_worker", params)
            assert conn.connection.dbapi_connection.info.transaction_status == status.INTRANS
            raise RuntimeError("after the first statement")
        assert store.workers.all() == []
        with pytest.raises(psycopg.errors.InFailedSqlTransaction), db.write() as conn:
            db.run(conn, "insert_worker", params)
            with pytest.raises(psycopg.errors.UniqueViolation):  # caught: the transaction is lost
                db.run(conn, "insert_worker", params)
        assert store.workers.all() == []  # and nothing of it was committed
        for _ in range(10):  # past psycopg's prepare threshold
            assert store.slots.get("nobody.1") is None
            assert store.workers.all() == []
        with db.single_read() as conn:
            prepared = conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements").scalar()
            assert conn.connection.dbapi_connection.info.transaction_status == status.IDLE
        assert prepared and prepared >= 2
    finally:
        store.close()


def test_schema_12_gains_attempts_and_forks_keeping_every_run(database_url):
    """A version-12 database (no attempt, no fork, no earlier attempts' tables): every run reads as
    its first attempt, and a failed one can be retried."""
    from duro.store import Retry, StepRecord
    from duro.store._commands import FinishRun, RecordStep

    first = SqlStore(database_url, decisions_clock="caller")
    first.create_schema()
    first.runs.insert(NewRun("old", "default", "wf", "1", "{}", "w", 1), None)
    first.steps.apply(
        RecordStep("old", "w", StepRecord(0, "step", "work", "failed", 1, 2, error="{}"), None, None, 2)
    )
    first.steps.apply(FinishRun("old", "w", "failed", None, '{"type": "x.Boom"}', 3, None))
    with first._engine.begin() as conn:  # back to schema 12
        for column in ("attempt", "forked_from", "forked_seq"):
            conn.execute(sa.text(f"ALTER TABLE duro_runs DROP COLUMN {column}"))
        conn.execute(sa.text("DROP TABLE duro_attempts"))
        conn.execute(sa.text("DROP TABLE duro_past_steps"))
        conn.execute(sa.text("UPDATE duro_meta SET value = '12' WHERE key = 'schema_version'"))
    first.close()
    second = SqlStore(database_url, decisions_clock="caller")
    second.create_schema()
    assert second.schema_version() == SCHEMA_VERSION == 13
    old = second.runs.get("old")
    assert (old.status, old.attempt, old.forked_from) == ("failed", 1, None)
    retried = second.runs.retry(Retry("old", None, 1, "1", None, 10))
    assert (retried.run.status, retried.run.attempt, retried.resume_seq) == ("pending", 2, 0)
    assert second.steps.of("old") == [] and [a for a, _ in second.steps.past("old")] == [1]
    second.close()
