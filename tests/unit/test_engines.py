"""Which store errors the engine answers with the same call again (``SqlStore.is_transient``)."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from duro.store import SqlStore


@pytest.mark.parametrize(
    "err",
    [
        psycopg.errors.AdminShutdown(
            "terminating connection due to administrator command"
        ),  # raw, from the hot path
        psycopg.OperationalError("the connection is lost"),
        psycopg.errors.DeadlockDetected("deadlock detected"),
        psycopg.errors.SerializationFailure("could not serialize access"),
        psycopg.errors.IdleInTransactionSessionTimeout(
            "terminating connection due to idle-in-transaction timeout"
        ),
        sa.exc.OperationalError("SELECT 1", {}, psycopg.OperationalError("server closed the connection")),
        sa.exc.InternalError("SELECT 1", {}, psycopg.errors.IdleInTransactionSessionTimeout("timeout")),
    ],
)
def test_a_lost_or_restarting_server_is_transient(err):
    assert SqlStore.is_transient(err)


@pytest.mark.parametrize(
    "err",
    [
        psycopg.errors.UniqueViolation("duplicate key"),
        sa.exc.IntegrityError("INSERT", {}, psycopg.errors.UniqueViolation("duplicate key")),
        sa.exc.ProgrammingError("SELECT", {}, psycopg.errors.UndefinedTable("no such table")),
        ValueError("not a database error"),
    ],
)
def test_a_refused_statement_or_a_bug_is_not(err):
    assert not SqlStore.is_transient(err)
