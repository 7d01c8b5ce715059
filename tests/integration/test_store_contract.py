"""The store contract: one suite, run on a fresh SQLite file and on a real PostgreSQL database."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import sqlalchemy as sa

from duro import ConcurrencyLimitError, DuroError
from duro.store import SCHEMA_VERSION, Claim, NewRun, OwnStep, QuotaCheck, SqlStore, StepRecord
from duro.store._queries import claim_sql
from tests.support import store_ops
from tests.support.waiting import wait_until


@pytest.fixture
def store(database_url):
    store = SqlStore(database_url, decisions_clock="caller")  # these tests pass every instant themselves
    store.create_schema()
    yield store
    store.close()


def new_run(run_id="r1", owner=None, key=None, workflow="wf", namespace="default", parent=None):
    return NewRun(
        id=run_id,
        namespace=namespace,
        workflow=workflow,
        version="1",
        input='{"a":1}',
        owner=owner,
        created_at=1000,
        tags=[f"concurrency:{key}"] if key else [],
        concurrency_key=key,
        parent_id=parent,
    )


def quota(key, limit, statuses=("pending", "running", "suspended", "blocked"), namespace=None):
    return QuotaCheck(workflow="wf", key=key, limit=limit, statuses=statuses, namespace=namespace)


def test_schema_version_is_recorded_and_creation_is_idempotent(store, database_url):
    assert store.schema_version() == SCHEMA_VERSION
    again = SqlStore(database_url)
    again.create_schema()
    assert again.schema_version() == SCHEMA_VERSION
    again.close()


def test_insert_is_idempotent_by_id(store):
    run, created = store.insert_run(new_run(), None)
    assert created and run.status == "pending" and run.owner is None
    again, created = store.insert_run(new_run(), quota("k", 0))
    assert not created and again.id == "r1"
    assert store.get_run("r1").input == '{"a":1}'


def test_owned_insert_starts_running(store):
    run, _ = store.insert_run(new_run(owner="w1"), None)
    assert run.status == "running" and run.owner == "w1"


def test_quota_counts_active_runs_and_refuses_without_creating(store):
    for i in range(2):
        store.insert_run(new_run(f"r{i}", key="tenant:a"), quota("tenant:a", 2))
    with pytest.raises(ConcurrencyLimitError) as info:
        store.insert_run(new_run("r9", key="tenant:a"), quota("tenant:a", 2))
    assert (info.value.key, info.value.limit, info.value.active) == ("tenant:a", 2, 2)
    assert store.get_run("r9") is None
    store.insert_run(new_run("b1", key="tenant:b"), quota("tenant:b", 2))
    assert store.count_active("tenant:a", ["pending"], None) == 2


def test_quota_statuses_and_namespaces(store):
    store.insert_run(new_run("r1", owner="w", key="k"), quota("k", 5))
    assert store_ops.finish_run(store, "r1", "w", "completed", "1", None, 2000)
    store.insert_run(new_run("r2", key="k", namespace="other"), quota("k", 5))
    assert store.count_active("k", ["pending", "running"], None) == 1
    assert store.count_active("k", ["pending", "running"], "default") == 0
    assert store.count_active("k", ["completed"], None) == 1


def test_steps_are_fenced_on_owner_and_status(store):
    store.insert_run(new_run(owner="w1"), None)
    step = StepRecord(0, "step", "charge", "completed", 1000, 1001, result="5")
    assert store_ops.record_step(store, "r1", "w1", step, now=1001)
    assert not store_ops.record_step(
        store, "r1", "w2", StepRecord(1, "step", "x", "completed", 1, 2), now=1002
    )
    assert [s.name for s in store.get_steps("r1")] == ["charge"]
    waiting = StepRecord(1, "sleep", "sleep", "waiting", 1002, wake_at=5000)
    assert store_ops.record_step(store, "r1", "w1", waiting, "suspended", 5000, 1002)
    run = store.get_run("r1")
    assert (run.status, run.wake_at) == ("suspended", 5000)
    assert store_ops.record_step(store, "r1", "w1", None, "running", None, 5000)  # woke: the run only
    run = store.get_run("r1")
    assert (run.status, run.wake_at, run.updated_at) == ("running", None, 5000)
    assert [s.status for s in store.get_steps("r1")] == ["completed", "waiting"]
    assert not store_ops.record_step(store, "r1", "w2", None, "running", None, 5001)
    assert store_ops.finish_run(store, "r1", "w1", "completed", '"ok"', None, 6000)
    assert not store_ops.finish_run(store, "r1", "w1", "failed", None, "{}", 6001)
    assert not store_ops.record_step(
        store, "r1", "w1", StepRecord(2, "step", "late", "completed", 1, 2), now=7000
    )
    assert store.get_run("r1").status == "completed"


def test_cancel_cascades_to_unfinished_children(store):
    store.insert_run(new_run("p", owner="w"), None)
    store.insert_run(new_run("c1", parent="p"), None)
    store.insert_run(new_run("c2", parent="p", owner="w"), None)
    store_ops.finish_run(store, "c2", "w", "completed", "1", None, 10)
    store.insert_run(new_run("g1", parent="c1"), None)
    assert sorted(store.cancel_run("p", None, "{}", 50)) == ["c1", "g1", "p"]
    assert store.get_run("c2").status == "completed"
    assert store.cancel_run("p", None, "{}", 60) == []
    with pytest.raises(DuroError):
        store.cancel_run("nope", None, "{}", 60)


def test_signals_buffer_and_are_consumed_in_order(store):
    store.insert_run(new_run(owner="w"), None)
    store.send_signal("r1", "go", '"first"', 10)
    store.send_signal("r1", "go", '"second"', 11)
    assert store.signalled(["r1"]) == {("r1", "go")}
    first = store_ops.take_signal(store, "r1", "w", "go", StepRecord(0, "signal", "go", "waiting", 5, 12))
    assert first.result == '"first"' and first.status == "completed"
    second = store_ops.take_signal(store, "r1", "w", "go", StepRecord(1, "signal", "go", "waiting", 5, 12))
    assert second.result == '"second"'
    assert (
        store_ops.take_signal(store, "r1", "w", "go", StepRecord(2, "signal", "go", "waiting", 5, 12)) is None
    )
    store_ops.finish_run(store, "r1", "w", "completed", "null", None, 20)
    with pytest.raises(DuroError, match="completed"):
        store.send_signal("r1", "go", "null", 21)
    with pytest.raises(DuroError, match="does not exist"):
        store.send_signal("ghost", "go", "null", 21)


def test_claims_take_unowned_and_condemned_workers_runs_once(store):
    store.register_worker("alive", "default", "h", 1, 1000)
    store.register_worker("dead", "default", "h", 2, 0)
    store.insert_run(new_run("free"), None)
    store.insert_run(new_run("mine", owner="alive"), None)
    store.insert_run(new_run("orphan", owner="dead"), None)
    store.insert_run(new_run("gone", owner="a-worker-without-a-row"), None)
    store.insert_run(new_run("other-wf", workflow="else"), None)
    store.insert_run(new_run("other-ns", namespace="x"), None)
    stamps = store.heartbeat("alive", 1000)
    assert set(stamps) == {"alive", "dead"}
    claim = Claim(worker_id="alive", namespace="default", workflows=["wf"], now=1000)
    claimed = {run.id: run for run in store.claim_runs(claim)}
    assert set(claimed) == {"free", "gone"}  # a registered owner is alive until someone condemns it
    assert claimed["free"].status == "running" and claimed["gone"].owner == "alive"
    stale = Claim(
        worker_id="alive",
        namespace="default",
        workflows=["wf"],
        now=1000,
        condemned=[("dead", stamps["dead"] - 1)],
    )
    assert store.claim_runs(stale) == []  # its heartbeat is not the one the claimer saw: it lives
    condemned = Claim(
        worker_id="alive",
        namespace="default",
        workflows=["wf"],
        now=1000,
        condemned=[("dead", stamps["dead"])],
    )
    assert [run.id for run in store.claim_runs(condemned)] == ["orphan"]
    assert store.heartbeat("dead", 1001) is None  # its row went with the claim: it finds out at once
    assert store.claim_runs(claim) == []


def test_remove_worker_hands_runs_back(store):
    store.register_worker("w", "default", "h", 1, 1000)
    store.insert_run(new_run("r1", owner="w"), None)
    store.remove_worker("w", 2000)
    run = store.get_run("r1")
    assert run.owner is None and run.status == "running"
    assert store.heartbeat("w", 3000) is None


def test_handing_runs_back_and_taking_them_up_change_no_runs_record(store):
    """Ownership is bookkeeping (a dev server's reload does both): a hand-back, by a worker that
    stops or joins again, and a claim of a run that had started leave ``updated_at`` as it was; a
    claim that starts a pending run changes it."""
    store.register_worker("w1", "default", "h", 1, 1000)
    store.insert_run(new_run("started", owner="w1"), None)
    store.insert_run(new_run("pending"), None)
    store.remove_worker("w1", 2000)
    assert (store.get_run("started").owner, store.get_run("started").updated_at) == (None, 1000)
    store.register_worker("w2", "default", "h", 2, 3000)
    claim = Claim(worker_id="w2", namespace="default", workflows=["wf"], now=3000)
    claimed = {run.id: run for run in store.claim_runs(claim)}
    assert (claimed["started"].owner, claimed["started"].updated_at) == ("w2", 1000)
    assert (claimed["pending"].status, claimed["pending"].updated_at) == ("running", 3000)
    assert store.get_run("started").updated_at == 1000
    store.register_worker("w2", "default", "h", 2, 4000)  # joins again: its runs are handed back
    assert [(r.owner, r.updated_at) for r in map(store.get_run, ("started", "pending"))] == [
        (None, 1000),
        (None, 3000),
    ]


def test_listing_filters_and_pages(store):
    for i in range(5):
        run = new_run(f"r{i}", key="k" if i % 2 else None, workflow="a" if i < 3 else "b")
        run.created_at = 1000 + i
        store.insert_run(run, None)
    assert [r.id for r in store.list_runs(None, None, None, None, 10)] == ["r4", "r3", "r2", "r1", "r0"]
    assert [r.id for r in store.list_runs(None, "a", None, None, 10)] == ["r2", "r1", "r0"]
    assert [r.id for r in store.list_runs(None, None, None, "concurrency:k", 10)] == ["r3", "r1"]
    page = store.list_runs(None, None, None, None, 2)
    rest = store.list_runs(None, None, None, None, 10, (page[-1].created_at, page[-1].id))
    assert [r.id for r in page + rest] == ["r4", "r3", "r2", "r1", "r0"]
    assert [r.id for r in store.list_runs(None, None, ["pending"], None, 1)] == ["r4"]


def test_parent_step_is_written_with_the_child(store):
    store.insert_run(new_run("p", owner="w"), None)
    step = StepRecord(0, "child", "kid", "waiting", 5, detail='{"run_id":"p.0"}')
    child, created = store.insert_run(new_run("p.0", parent="p"), None, OwnStep("p", "w", step))
    assert created and child.parent_id == "p"
    assert store.get_run("p").status == "blocked"
    assert [s.kind for s in store.get_steps("p")] == ["child"]


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


def test_a_batch_keeps_each_writes_fence_and_result(store):
    store.insert_run(new_run("a", owner="w1"), None)
    store.insert_run(new_run("b", owner="w2"), None)
    results = store_ops.apply_batch(
        store,
        [
            (
                "record_step",
                ("a", "w1", StepRecord(0, "step", "x", "completed", 1, 2, result="1"), None, None, 2),
            ),
            (
                "record_step",
                ("b", "w1", StepRecord(0, "step", "x", "completed", 1, 2, result="1"), None, None, 2),
            ),
            ("finish_run", ("a", "w1", "completed", '"done"', None, 3)),
            ("finish_run", ("b", "w1", "completed", '"stolen"', None, 3)),
        ],
    )
    assert results == [True, False, True, False]
    assert [s.result for s in store.get_steps("a")] == ["1"] and store.get_steps("b") == []
    assert (store.get_run("a").status, store.get_run("b").status) == ("completed", "running")


def test_a_batch_of_owned_writes_applies_in_one_go_and_announces_a_childs_end(store):
    """No write fenced: on PostgreSQL the whole batch goes in one pipeline; each result is True,
    every write is stored, and a child's end is still announced to its parent."""
    store.insert_run(new_run("p", owner="w1"), None)
    store.insert_run(new_run("p.0", owner="w1", parent="p"), None)
    store.insert_run(new_run("q", owner="w1"), None)
    heard: list[list] = []
    stopping = threading.Event()
    listener = threading.Thread(target=store.listen, args=(heard.append, stopping), daemon=True)
    listener.start()
    try:
        if store.dialect == "postgresql":  # the listener is connected once a notification gets through
            wait_until(lambda: _pinged(store, heard), what="the listener to connect")
        results = store_ops.apply_batch(
            store,
            [
                (
                    "record_step",
                    ("p.0", "w1", StepRecord(0, "step", "x", "completed", 1, 2, result="1"), None, None, 2),
                ),
                (
                    "record_step",
                    ("q", "w1", StepRecord(0, "sleep", "sleep", "waiting", 1, wake_at=9), "suspended", 9, 2),
                ),
                ("finish_run", ("p.0", "w1", "completed", '"done"', None, 3)),
                ("record_step", ("p", "w1", None, "running", None, 3)),
            ],
        )
        assert results == [True, True, True, True]
        assert [s.result for s in store.get_steps("p.0")] == ["1"]
        assert (store.get_run("q").status, store.get_run("q").wake_at) == ("suspended", 9)
        assert store.get_run("p.0").status == "completed"
        if store.dialect == "postgresql":
            wait_until(lambda: ["done", "p.0", "completed"] in heard, what="the child's end to be announced")
    finally:
        stopping.set()
        listener.join(5)


def _pinged(store: SqlStore, heard: list[list]) -> bool:
    with store.db.write() as conn:
        store.db.notify(conn, ["ping"])
    return ["ping"] in heard


def test_an_older_schema_is_migrated_step_by_step(database_url, monkeypatch):
    from duro.store import _schema
    from duro.store._tables import meta

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


# (schema 4's index, schema 3's index in its place, its table and columns)
SCHEMA_3_INDEXES = [
    ("duro_runs_quota", "duro_runs_quota", "duro_runs", "concurrency_key, status"),
    ("duro_runs_parent", "duro_runs_parent", "duro_runs", "parent_id"),
    ("duro_slots_due", "duro_slots_due", "duro_slots", "due_at"),
    ("duro_slots_run", "duro_slots_run", "duro_slots", "run_id"),
]
# PostgreSQL only: schema 4 claims through duro_runs_active instead (SQLite keeps duro_runs_claim)
SCHEMA_3_CLAIM_INDEX = ("duro_runs_active", "duro_runs_claim", "duro_runs", "namespace, status, owner")


def test_schema_3_is_migrated_to_partial_indexes_keeping_every_run(database_url):
    """A version-3 database (full indexes) opened by this duro: four indexes become partial, the
    claims' index gives way to one on unfinished runs, the runs stay, and counts and children
    answer as before."""
    first = SqlStore(database_url)
    first.create_schema()
    first.insert_run(NewRun("parent", "default", "wf", "1", "{}", None, 1, concurrency_key="tenant:a"), None)
    first.insert_run(
        NewRun("child", "default", "wf", "1", "{}", None, 2, parent_id="parent", parent_seq=0), None
    )
    with first._engine.begin() as conn:  # back to schema 3's layout
        claim = [SCHEMA_3_CLAIM_INDEX] if first.dialect == "postgresql" else []
        for index, old, table, columns in SCHEMA_3_INDEXES + claim:
            conn.execute(sa.text(f"DROP INDEX {index}"))
            conn.execute(sa.text(f"CREATE INDEX {old} ON {table} ({columns})"))
        conn.execute(sa.text("UPDATE duro_meta SET value = '3' WHERE key = 'schema_version'"))
    assert "WHERE" not in _index_definition(first, "duro_runs_quota").upper()
    first.close()
    second = SqlStore(database_url)
    second.create_schema()
    assert second.schema_version() == SCHEMA_VERSION == 4
    assert "concurrency_key IS NOT NULL" in _index_definition(second, "duro_runs_quota")
    assert "parent_id IS NOT NULL" in _index_definition(second, "duro_runs_parent")
    assert "due_at IS NOT NULL" in _index_definition(second, "duro_slots_due")
    assert "waiting" in _index_definition(second, "duro_slots_run")
    if second.dialect == "postgresql":
        assert "pending" in _index_definition(second, "duro_runs_active")
        with second._engine.connect() as conn:
            assert not conn.execute(
                sa.text("SELECT count(*) FROM pg_indexes WHERE indexname = 'duro_runs_claim'")
            ).scalar()
    else:
        assert "namespace, status, owner" in _index_definition(second, "duro_runs_claim")
    assert second.count_active("tenant:a", ("pending", "running"), None) == 1
    assert second.get_run("child").parent_id == "parent"
    second.close()


def test_a_newer_schema_is_refused(database_url):
    from duro.store._tables import meta

    first = SqlStore(database_url)
    first.create_schema()
    with first._engine.begin() as conn:
        conn.execute(meta.update().values(value=str(SCHEMA_VERSION + 1)))
    first.close()
    newer = SqlStore(database_url)
    with pytest.raises(DuroError, match="upgrade duro"):
        newer.create_schema()
    newer.close()


@pytest.mark.parametrize("owner, taken", [("w1", True), ("someone-else", False)])
def test_a_release_hands_the_slot_straight_to_a_waiter_of_its_own_process(store, owner, taken):
    """``takers`` (the caller's parked waiters): the head of the queue takes the slot in the release's
    transaction, its hook step written completed, when the write passes its run's fence; otherwise
    the slot is reserved for it as usual."""
    from duro._config import LimitConfig

    config = LimitConfig("line", capacity=1, max_hold_ms=60_000)
    store.insert_run(new_run("holder", owner="w1"), None)
    store.insert_run(new_run("waiter", owner="w1"), None)
    assert store_ops.slot_request(store, config, "h.1", "holder", None, None, 1000).state == "busy"
    assert store_ops.slot_request(store, config, "w.1", "waiter", None, 9000, 1000).state == "waiting"
    hook = StepRecord(1, "hook", "Esperando hueco · line", "waiting", 1000, wake_at=9000)
    _, released, granted = store_ops.slot_release(
        store, {"line": config}, "h.1", 2000, takers={"w.1": ("waiter", owner, hook)}
    )
    assert released and [row.id for row in granted] == ["w.1"]
    assert granted[0].state == ("busy" if taken else "reserved")
    assert hook.status == "waiting"  # the caller's record is not touched: the store wrote a copy
    steps = {s.seq: s for s in store.get_steps("waiter")}
    if taken:
        assert (steps[1].status, steps[1].ended_at, granted[0].expires_at) == ("completed", 2000, 62_000)
        assert '"id": "w.1"' in steps[1].result
    else:
        assert 1 not in steps and granted[0].reserved_until == 2000 + 120_000
    assert store.limit_states()["line"].busy == (1 if taken else 0)


def test_a_slot_decision_whose_run_is_no_longer_the_callers_changes_nothing(store):
    """The hook step's fence is checked after the decision's writes are sent (pipelined on
    PostgreSQL): a run that is not the caller's rolls the whole decision back."""
    from duro._config import LimitConfig
    from duro.store import Fenced

    config = LimitConfig("line", capacity=1, max_hold_ms=60_000)
    store.insert_run(new_run("holder", owner="w1"), None)
    store_ops.slot_request(store, config, "h.1", "holder", None, None, 1000)
    step = StepRecord(2, "release", "release_slot", "completed", 2000, 2000)
    with pytest.raises(Fenced):
        store_ops.slot_release(store, {"line": config}, "h.1", 2000, hook=("holder", "w2", step))
    assert store.get_slot("h.1").state == "busy"
    assert store.limit_states()["line"].busy == 1
    assert [s.seq for s in store.get_steps("holder")] == []
    _, released, _ = store_ops.slot_release(store, {"line": config}, "h.1", 2000, hook=("holder", "w1", step))
    assert released and [s.seq for s in store.get_steps("holder")] == [2]


def test_a_sqlite_write_commits_or_rolls_back_raw_and_core_statements_together(sqlite_url):
    """SQLite's write transaction is begun on the driver (SQLAlchemy's bookkeeping skipped): a Core
    statement inside joins it, a failure anywhere undoes both kinds, and the next write starts clean."""
    from duro.store._tables import meta

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


def test_a_claim_reads_unfinished_runs_through_their_partial_index_and_tells_fresh_ones(store):
    """On PostgreSQL the claim's candidates come from duro_runs_active (unfinished runs in creation
    order; its status condition has the index's literal values), not from every run of the
    namespace; on SQLite (one process, rare claims) from an index, never a table scan. A run taken
    from pending is ``fresh`` (never executed: its worker reads no history)."""
    for i in range(3):
        store.insert_run(NewRun(f"r{i}", "default", "wf", "1", "{}", None, i), None)
    store.insert_run(NewRun("orphan", "default", "wf", "1", "{}", "a-dead-worker", 3), None)  # running
    statements: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if "ORDER BY duro_runs.created_at" in statement:  # the candidates (PostgreSQL: inside the UPDATE)
            statements.append((statement, parameters))

    sa.event.listen(store._engine, "before_cursor_execute", capture)
    claimed = store.claim_runs(Claim("w1", "default", ["wf"], now=10))
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
    if store.dialect == "postgresql":
        assert any("duro_runs_active" in str(row) for row in plan), plan
    else:  # SQLite searches the namespace's runs in creation order, as before schema 4
        assert not any(str(row[-1]).startswith("SCAN duro_runs") for row in plan), plan


def _start_together(store: SqlStore, starters: int, run: NewRun, check: QuotaCheck | None) -> list[Any]:
    """``starters`` threads insert ``run`` at the same instant; what each got (or raised)."""
    barrier = threading.Barrier(starters)
    results: list[Any] = []

    def start() -> None:
        barrier.wait(10)
        try:
            results.append(store.insert_run(run, check))
        except Exception as err:  # noqa: BLE001 - the caller's assertion shows it
            results.append(err)

    threads = [threading.Thread(target=start) for _ in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@pytest.mark.parametrize("with_quota", [False, True], ids=["plain", "with a quota"])
def test_concurrent_starts_of_one_run_id_create_it_once(store, with_quota):
    """Processes starting the same run id at once: one creates it, every other gets that run back
    (on PostgreSQL their inserts race past each other's existence check)."""
    for attempt in range(10):
        run_id = f"same-{attempt}"
        results = _start_together(
            store,
            6,
            new_run(run_id, key="k" if with_quota else None),
            quota("k", 100) if with_quota else None,
        )
        assert all(isinstance(r, tuple) for r in results), results
        assert sorted(created for _, created in results) == [False] * 5 + [True]
        assert {record.id for record, _ in results} == {run_id}


def test_ended_runs_leave_every_queue_they_wait_in_and_hand_the_places_on(store):
    """``slots_leave`` with runs waiting in two limits (taken in name order: see the store): each
    leaves its queue, the next in line moves up, and busy slots stay held."""
    from duro._config import LimitConfig

    configs = {name: LimitConfig(name, capacity=1, max_hold_ms=60_000) for name in ("b-line", "a-line")}
    for name in configs:
        store_ops.slot_request(store, configs[name], f"{name}.holder", "holder", None, None, 1000)
        store_ops.slot_request(store, configs[name], f"{name}.leaving", f"leaving-{name}", None, None, 1000)
        store_ops.slot_request(store, configs[name], f"{name}.next", f"next-{name}", None, None, 1000)
    assert store.slots_leave(configs, ["leaving-b-line", "leaving-a-line", "holder"], 2000) == []
    for name in configs:
        assert store.get_slot(f"{name}.leaving").state not in ("waiting", "reserved", "busy")
        assert store.get_slot(f"{name}.holder").state == "busy"  # ending a run never releases its slot
        assert [(s.id, s.state) for s in store.limit_slots(name)] == [
            (f"{name}.holder", "busy"),
            (f"{name}.next", "waiting"),
        ]
        assert (store.limit_states()[name].busy, store.limit_states()[name].waiting) == (1, 1)


def _queued_with_hook(store, config, run_id, now, timeout_at=None):
    """A run of worker w1 whose slot request waits in ``config``'s queue, its hook step written with it."""
    store.insert_run(new_run(run_id, owner="w1"), None)
    hook = StepRecord(0, "hook", f"Esperando hueco · {config.name}", "waiting", now, wake_at=timeout_at)
    row = store_ops.slot_request(
        store, config, f"{run_id}.0", run_id, None, timeout_at, now, (run_id, "w1", hook)
    )
    assert row.state == "waiting"


@pytest.mark.parametrize("ending", ["cancelled", "failed"])
def test_a_run_that_ends_while_queued_has_its_hook_step_closed_with_its_end(store, ending):
    """``slots_leave`` closes the run's waiting hook step in its transaction: ended then, with the
    run's end as status. A step that is not a waiting hook is left as it is."""
    from duro._config import LimitConfig

    config = LimitConfig("lines", capacity=1, max_hold_ms=60_000)
    store_ops.slot_request(store, config, "holder.0", "holder", None, None, 1000)
    _queued_with_hook(store, config, "leaver", 1000)
    store_ops.record_step(
        store, "leaver", "w1", StepRecord(1, "step", "other", "completed", 1000, 1001), now=1001
    )
    if ending == "cancelled":
        assert store.cancel_run("leaver", None, '{"type": "RunCancelled"}', 5000) == ["leaver"]
    else:
        assert store_ops.finish_run(store, "leaver", "w1", "failed", None, '{"type": "RuntimeError"}', 5000)
    assert store.slots_leave({"lines": config}, ["leaver"], 5000) == []
    hook, other = store.get_steps("leaver")
    assert (hook.kind, hook.status, hook.ended_at) == ("hook", ending, 5000)
    assert (other.status, other.ended_at) == ("completed", 1001)
    assert store.get_slot("leaver.0").state == "cancelled"
    assert store.slots_leave({"lines": config}, ["leaver"], 9000) == []  # again: nothing changes
    assert store.get_steps("leaver")[0].ended_at == 5000


def test_an_expired_request_still_closes_its_hook_step_when_its_run_gives_up(store):
    """The expiry pass timed the request out before its run woke: the run's give-up writes its hook
    step failed all the same (a run that catches SlotTimeoutError goes on with a closed step)."""
    from duro._config import LimitConfig

    config = LimitConfig("lines", capacity=1, max_hold_ms=60_000)
    store_ops.slot_request(store, config, "holder.0", "holder", None, None, 1000)
    _queued_with_hook(store, config, "late", 1000, timeout_at=3000)
    store.slots_expire({"lines": config}, 3000)
    assert store.get_slot("late.0").state == "timed_out"
    failed = StepRecord(
        0, "hook", "Esperando hueco · lines", "failed", 1000, 3500, wake_at=3000, error='{"a": 1}'
    )
    assert store_ops.slot_give_up(store, config, "late.0", 3500, ("late", "w1", failed)).state == "timed_out"
    (hook,) = store.get_steps("late")
    assert (hook.status, hook.ended_at) == ("failed", 3500)


def test_a_released_reservation_goes_back_to_the_queue_and_the_slot_to_the_next_run(store):
    """An operator release of a reserved slot (its run has not confirmed) is no timeout: as a
    lapsed reservation, the run queues last with what is left of its timeout, and the slot goes
    to the next run; a reservation whose timeout has passed times out."""
    from duro._config import LimitConfig

    configs = {"lines": LimitConfig("lines", capacity=1, max_hold_ms=60_000)}
    config = configs["lines"]
    store_ops.slot_request(store, config, "holder.0", "holder", None, None, 1000)
    store_ops.slot_request(store, config, "first.0", "first", None, 50_000, 1000)
    store_ops.slot_request(store, config, "second.0", "second", None, None, 1000)
    _, released, granted = store_ops.slot_release(store, configs, "holder.0", 2000)
    assert released and [(r.id, r.state) for r in granted] == [("first.0", "reserved")]
    row, released, granted = store_ops.slot_release(store, configs, "first.0", 3000, "operator")
    assert released and (row.id, row.state, row.timeout_at) == ("first.0", "waiting", 50_000)
    assert [(r.id, r.state) for r in granted] == [("second.0", "reserved")]
    assert [(s.id, s.state) for s in store.limit_slots("lines")] == [
        ("second.0", "reserved"),
        ("first.0", "waiting"),
    ]
    assert (
        store_ops.slot_release(store, configs, "first.0", 3001, "operator")[1] is False
    )  # waiting: nothing to release
    store_ops.slot_confirm(store, config, "second.0", 3002)
    store_ops.slot_release(store, configs, "second.0", 4000)
    assert store.get_slot("first.0").state == "reserved"
    row, released, granted = store_ops.slot_release(
        store, configs, "first.0", 60_000, "operator"
    )  # past its timeout
    assert released and row.state == "timed_out" and granted == []
    counts = store.limit_states()["lines"]
    assert (counts.busy, counts.reserved, counts.waiting) == (0, 0, 0)


def test_a_start_on_another_workflows_run_id_is_a_conflict_and_writes_nothing(store):
    from duro import RunIdConflictError

    store.insert_run(new_run("parent", owner="w1"), None)
    store.insert_run(new_run("taken", workflow="echo"), None)
    step = StepRecord(0, "child", "wf", "waiting", 1000)
    with pytest.raises(RunIdConflictError) as info:
        store.insert_run(new_run("taken", workflow="wf", parent="parent"), None, ("parent", "w1", step))
    assert (info.value.workflow, info.value.existing_workflow) == ("wf", "echo")
    assert store.get_steps("parent") == [] and store.get_run("parent").status == "running"
    assert store.get_run("taken").workflow == "echo"
    for start_quota in (None, quota("k", 5)):  # a top-level start, with a quota or not, is refused alike
        with pytest.raises(RunIdConflictError):
            store.insert_run(new_run("taken", workflow="wf", key="k" if start_quota else None), start_quota)
    assert [r.id for r in store.list_runs(None, "wf", None, None, 10)] == ["parent"]  # no "taken" of wf
