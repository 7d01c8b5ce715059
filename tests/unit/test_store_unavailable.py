"""Which store errors mean "the database did not answer in time" (``SqlStore.is_unavailable``: the
dev server's 503), SQLite's ``busy_timeout`` URL option, and how the CLI tells a busy database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from duro import DuroError
from duro.store import SqlStore, parse_database_url
from duro_devserver.cli_api import describe_api_error
from duro_devserver.client import ApiError, Target


def _real_locked_error(tmp_path: Path) -> sqlite3.OperationalError:
    """The error SQLite itself raises when another connection holds the write lock."""
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    waiter = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as caught:
            waiter.execute("BEGIN IMMEDIATE")
        return caught.value
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        waiter.close()


def test_sqlite_locked_by_another_connection_is_unavailable_wrapped_or_not(tmp_path):
    locked = _real_locked_error(tmp_path)
    assert "locked" in str(locked)
    assert SqlStore.is_unavailable(locked)  # raw, from the hot path's driver calls
    assert SqlStore.is_unavailable(
        sa.exc.OperationalError("BEGIN IMMEDIATE", {}, locked)
    )  # through SQLAlchemy


@pytest.mark.parametrize(
    "err",
    [
        sqlite3.OperationalError("database is locked"),
        sqlite3.OperationalError("database is busy"),
        sqlite3.OperationalError("database table is locked"),
        sa.exc.OperationalError(
            "INSERT INTO duro_runs VALUES (?)", ("x",), sqlite3.OperationalError("database is locked")
        ),
        psycopg.OperationalError("connection refused"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        sa.exc.OperationalError("SELECT 1", {}, psycopg.OperationalError("server closed the connection")),
    ],
)
def test_a_locked_file_or_an_unreachable_server_is_unavailable(err):
    assert SqlStore.is_unavailable(err)


@pytest.mark.parametrize(
    "err",
    [
        sqlite3.IntegrityError("UNIQUE constraint failed: duro_runs.id"),
        sa.exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed: duro_runs.id")),
        sqlite3.OperationalError("no such table: duro_runs"),
        sa.exc.OperationalError("SELECT", {}, sqlite3.OperationalError("no such table: duro_runs")),
        psycopg.errors.UniqueViolation("duplicate key"),
        sa.exc.IntegrityError("INSERT", {}, psycopg.errors.UniqueViolation("duplicate key")),
        sa.exc.ProgrammingError("SELECT", {}, psycopg.errors.UndefinedTable("no such table")),
        DuroError("run 'x' does not exist"),
        ValueError("not a database error"),
    ],
)
def test_a_refused_statement_or_a_bug_is_not_unavailable(err):
    assert not SqlStore.is_unavailable(err)


def test_sqlite_errors_are_never_made_again(tmp_path):
    """A locked file was already waited for (busy_timeout): the engine does not wait all over again."""
    locked = _real_locked_error(tmp_path)
    assert not SqlStore.is_transient(locked)
    assert not SqlStore.is_transient(sa.exc.OperationalError("BEGIN IMMEDIATE", {}, locked))


# -- busy_timeout -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "ms"),
    [
        ("2s", 2000),
        ("500ms", 500),
        ("2000", 2000),
        ("0", 0),
        ("1m30s", 90_000),
        ("1h", 3_600_000),
        (" 250ms ", 250),
    ],
)
def test_busy_timeout_takes_a_duration_or_whole_milliseconds(option, ms):
    url, options = parse_database_url(f"sqlite:///x.db?busy_timeout={option}&synchronous=full")
    assert options == {"busy_timeout": ms, "synchronous": "FULL"}
    assert "busy_timeout" not in url.query and url.database == "x.db"  # duro's option, not the driver's


def test_without_busy_timeout_the_default_is_left_to_the_store():
    assert parse_database_url("sqlite:///x.db")[1] == {}


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("sqlite:///x.db?busy_timeout=soon", "busy_timeout='soon' is not a duration"),
        ("sqlite:///x.db?busy_timeout=-5", "busy_timeout='-5' is not a duration"),
        ("sqlite:///x.db?busy_timeout=1.5", "busy_timeout='1.5' is not a duration"),
        (
            "sqlite:///x.db?busy_timeout=%C2%B2",
            "is not a duration",
        ),  # a superscript two: a digit, not a number
        ("sqlite:///x.db?busy_timeout=2h", "busy_timeout='2h' is too long"),
        ("sqlite:///x.db?busy_timeout=1s&busy_timeout=2s", "busy_timeout is given 2 times; give it once"),
        ("postgresql+psycopg://u:p@h/db?busy_timeout=2s", "'busy_timeout' applies to SQLite only; remove it"),
    ],
)
def test_a_bad_busy_timeout_is_refused_with_what_to_write(url, words):
    with pytest.raises(DuroError) as caught:
        parse_database_url(url)
    assert words in str(caught.value)
    if "SQLite only" not in words:
        assert "e.g. busy_timeout=2s" in str(caught.value) and "default, 30s" in str(caught.value)


def test_the_store_applies_busy_timeout_to_its_connections(tmp_path):
    def busy_timeout(url: str) -> int:
        store = SqlStore(url)
        try:
            with store._engine.connect() as conn:
                return conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one()
        finally:
            store.close()

    assert busy_timeout(f"sqlite:///{tmp_path / 'a.db'}?busy_timeout=250ms") == 250
    assert busy_timeout(f"sqlite:///{tmp_path / 'b.db'}") == 30_000


# -- the CLI ------------------------------------------------------------------------------------------


def test_the_cli_tells_a_busy_database_from_a_project_that_failed_to_load():
    target = Target(
        url="http://127.0.0.1:8787",
        token=None,
        description="the dev server at http://127.0.0.1:8787",
        unreachable_hint="is `duro dev` running?",
        token_hint="set DURO_TOKEN to it",
    )
    message = (
        "the database is busy: another process holds the SQLite file's write lock; "
        "the request did not complete: retry in 5 s"
    )
    body = {"error": "unavailable", "message": message, "retry_after": 5}
    text = describe_api_error(ApiError(503, "unavailable", message, body), target)
    assert text.startswith(
        "the dev server at http://127.0.0.1:8787 is up but its database did not answer in time"
    )
    assert "retry in 5 s" in text and "cannot serve the project" not in text
