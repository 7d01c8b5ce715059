"""A run handed back (``Evict``) while another transaction ends what it waits for (a child's end,
a signal) and makes it due: on PostgreSQL the two meet on the run's row. The hand-back must not
overwrite that with "not due": the run would then be unowned, blocked and never due, waiting
for ever for a child that has ended (seen once in the chaos suite, a parent left ``blocked``)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from duro.store import Evict, SqlStore, Waiting
from tests.integration.store_contract._support import new_run
from tests.support.waiting import wait_until

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("kind", ["child", "signal"])
def test_a_hand_back_blocked_behind_a_wake_leaves_the_run_due(postgres_url: str, kind: str):
    store = SqlStore(postgres_url)
    try:
        store.create_schema()
        store.runs.insert(new_run("p", owner="w1"), None)
        store.runs.insert(new_run("p.0", owner="w2", parent="p"), None)
        other = sa.create_engine(store.url.set(drivername="postgresql+psycopg"))
        with other.connect() as conn:
            conn.execute(sa.text("UPDATE duro_runs SET status = 'blocked', due_at = NULL WHERE id = 'p'"))
            conn.commit()
            # the other transaction: the child ends (or a signal comes) and makes p due, not committed yet
            if kind == "child":
                conn.execute(sa.text("UPDATE duro_runs SET status = 'completed' WHERE id = 'p.0'"))
            else:
                conn.execute(
                    sa.text(
                        "INSERT INTO duro_signals (run_id, name, payload, created_at) "
                        "VALUES ('p', 'go', 'null', 5)"
                    )
                )
            conn.execute(sa.text("UPDATE duro_runs SET due_at = 5 WHERE id = 'p'"))  # p made due
            key = "p.0" if kind == "child" else "go"
            given_up: list[list[str]] = []
            hand_back = threading.Thread(
                target=lambda: given_up.append(
                    store.steps.apply(Evict("w1", (Waiting("p", kind, key, None),), 6))
                )
            )
            hand_back.start()
            wait_until(
                lambda: _lock_waits(other) == 1, 10, "the hand-back to wait for the row lock of p made due"
            )
            conn.commit()
        hand_back.join(10)
        assert given_up == [["p"]]
        with other.connect() as conn:
            owner, due_at = conn.execute(sa.text("SELECT owner, due_at FROM duro_runs WHERE id = 'p'")).one()
        other.dispose()
        assert owner is None
        assert due_at is not None and due_at <= 6, "the run was handed back not due: lost for ever"
    finally:
        store.close()


def _lock_waits(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            ).scalar_one()
        )
