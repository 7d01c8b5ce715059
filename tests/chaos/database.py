"""The chaos suite's own access to the store's database, not through duro: the driver, the sampler
and the audit each open one. PostgreSQL through psycopg; SQLite through ``sqlite3``, read-only and
in autocommit, so each statement is one short read transaction (WAL lets it read while a worker, or
the chaos, holds the write lock) and the suite never holds a lock the workers wait on.

Also here: the slot log (a trigger on ``duro_slots``, installed once the schema exists), and the one
write the suite makes on purpose on SQLite, holding its write lock (``hold_sqlite_write_lock``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

Error = (psycopg.Error, sqlite3.Error)  # what a read raises while the database is away or locked


def wall_ms() -> int:
    """Wall-clock milliseconds, the clock the workers stamp their steps and effects with (same host)."""
    return time.time_ns() // 1_000_000  # noqa: TID251 - the chaos lines up with the workers' own stamps


class Database:
    """One connection, opened on first use and again after an error (the server restarting)."""

    dialect: str
    # does the slot log know each change's transaction? PostgreSQL's trigger reads txid_current();
    # SQLite has nothing a trigger could read for it
    slot_log_has_transactions: bool

    def __init__(self) -> None:
        self._conn: Any = None

    @staticmethod
    def for_url(url: str) -> Database:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            return SqliteDatabase(Path(parsed.database or ""))
        return PostgresDatabase(parsed.set(drivername="postgresql").render_as_string(hide_password=False))

    def _connect(self) -> Any:
        raise NotImplementedError

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of one statement; on an error the connection is dropped (and the error raised)."""
        try:
            if self._conn is None:
                self._conn = self._connect()
            return self._conn.execute(sql).fetchall()
        except Error:
            self.close()
            raise

    def scalar(self, sql: str, attempts: int = 50) -> Any:
        """One value, asked again (every 0.2 s) while the database does not answer."""
        for _attempt in range(attempts):
            try:
                return self.rows(sql)[0][0]
            except Error:
                threading.Event().wait(0.2)
        raise AssertionError(f"the database did not answer: {sql}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def install_slot_log(self) -> None:
        raise NotImplementedError


class PostgresDatabase(Database):
    dialect = "postgresql"
    slot_log_has_transactions = True

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.dsn = dsn

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True, connect_timeout=2)

    def install_slot_log(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(PG_SLOT_LOG)


class SqliteDatabase(Database):
    dialect = "sqlite"
    slot_log_has_transactions = False

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        # read-only: this connection can never take the write lock; a read waits at most 1 s (WAL
        # readers wait only while a checkpoint resets the log)
        return sqlite3.connect(
            f"file:{self.path}?mode=ro", uri=True, isolation_level=None, timeout=1.0, check_same_thread=False
        )

    def install_slot_log(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        try:
            conn.executescript(SQLITE_SLOT_LOG)
        finally:
            conn.close()


# The slot log: every change of a slot's state or queue position, and any write at all to a slot
# that had ended, in the order the changes were made. Each slot transaction locks its limit's row
# before it writes a slot (on SQLite, BEGIN IMMEDIATE holds the whole file), so within a limit this
# order is the order of duro's decisions (no clocks involved). ``tx`` (PostgreSQL only) groups the
# changes of one transaction.
ENDED = "('released', 'timed_out', 'cancelled')"
PG_SLOT_LOG = f"""
CREATE TABLE chaos_slot_log (seq bigserial PRIMARY KEY, tx bigint NOT NULL, slot_id text NOT NULL,
                             limit_name text NOT NULL, old_state text, new_state text NOT NULL,
                             pos bigint NOT NULL);
CREATE FUNCTION chaos_log_slot() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM NEW.state OR OLD.pos IS DISTINCT FROM NEW.pos
            OR OLD.state IN {ENDED} THEN
        INSERT INTO chaos_slot_log (tx, slot_id, limit_name, old_state, new_state, pos)
        VALUES (txid_current(), NEW.id, NEW.limit_name, CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END,
                NEW.state, NEW.pos);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_log_slot AFTER INSERT OR UPDATE ON duro_slots
    FOR EACH ROW EXECUTE FUNCTION chaos_log_slot();
"""
SQLITE_SLOT_LOG = f"""
CREATE TABLE chaos_slot_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, tx INTEGER, slot_id TEXT NOT NULL,
                             limit_name TEXT NOT NULL, old_state TEXT, new_state TEXT NOT NULL,
                             pos INTEGER NOT NULL);
CREATE TRIGGER chaos_log_slot_insert AFTER INSERT ON duro_slots BEGIN
    INSERT INTO chaos_slot_log (slot_id, limit_name, old_state, new_state, pos)
    VALUES (NEW.id, NEW.limit_name, NULL, NEW.state, NEW.pos);
END;
CREATE TRIGGER chaos_log_slot_update AFTER UPDATE ON duro_slots
WHEN OLD.state IS NOT NEW.state OR OLD.pos IS NOT NEW.pos OR OLD.state IN {ENDED} BEGIN
    INSERT INTO chaos_slot_log (slot_id, limit_name, old_state, new_state, pos)
    VALUES (NEW.id, NEW.limit_name, OLD.state, NEW.state, NEW.pos);
END;
"""


def hold_sqlite_write_lock(path: Path, seconds: float) -> tuple[float, float]:
    """Take SQLite's write lock on ``path`` (``BEGIN IMMEDIATE`` on a connection of our own), keep it
    ``seconds``, then roll back: every writer waits meanwhile, readers go on. Returns (seconds waited
    for the lock — a worker stopped inside a write holds it —, seconds held)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=60.0)
    try:
        asked = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        taken = time.perf_counter()
        threading.Event().wait(seconds)
        conn.execute("ROLLBACK")
        return taken - asked, time.perf_counter() - taken
    finally:
        conn.close()
