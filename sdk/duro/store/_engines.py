"""How a database is opened, and what its errors mean.

SQLite: one file in WAL mode, a busy timeout, and ``BEGIN IMMEDIATE`` for the transactions that
decide; PostgreSQL: a pool whose sessions carry the store's settings. The error readers say which
failures are worth the same call again and which mean the store did not answer in time.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection

from .._clock import pause
from .._errors import DuroError
from . import _psycopg


def server_engine(url: URL, pool_size: int, idle_ms: int | None, read_only: bool) -> sa.Engine:
    """PostgreSQL's engine: ``idle_ms`` ends a session idle inside a transaction that long (see
    ``SqlStore``), and a ``read_only`` store's sessions refuse every write. Its sessions are in
    autocommit: the store begins its transactions itself (see ``_server``).

    JIT compilation is off in duro's sessions: every duro query reads a handful of rows through an
    index, yet on a large table the planner's estimate for one that names a filter (a namespace, a
    status) passes ``jit_above_cost`` and compiling it takes 250 ms against the 3 ms it runs for
    (a retention batch with 10 million runs in the table)."""
    engine = sa.create_engine(url, pool_size=pool_size, max_overflow=pool_size, isolation_level="AUTOCOMMIT")
    if url.get_backend_name() == "postgresql":

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("SET jit = off")
            if idle_ms is not None:
                cur.execute(f"SET idle_in_transaction_session_timeout = {int(idle_ms)}")
            if read_only:  # every transaction of this session: the server refuses any write
                cur.execute("SET default_transaction_read_only = on")
            cur.close()
            dbapi_conn.commit()

    return engine


def sqlite_engine(
    url: URL, synchronous: str, busy_timeout_ms: int, read_only: bool
) -> tuple[sa.Engine, str | None]:
    """SQLite's engine, and the absolute path of its file (``None`` in memory, or read-only)."""
    path, file = url.database, None
    if read_only:  # the file must exist, and is opened so that SQLite refuses any write
        if not path or path == ":memory:" or path.startswith("file:") or not os.path.isfile(path):
            raise DuroError(
                f"there is no SQLite database at {path!r}: check --database-url (or the project "
                f"directory, whose .duro/dev.db is the default)"
            )
        url = url.set(database=f"file:{os.path.abspath(path)}", query={"mode": "ro", "uri": "true"})
    elif path and path != ":memory:" and not path.startswith("file:"):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        file = os.path.abspath(path)
    options: dict[str, Any] = {}
    if url.query.get("mode") == "memory":  # a shared in-memory database (the harness's): each
        options["poolclass"] = sa.pool.QueuePool  # connection of the pool is one more to it
    # how long a statement waits for another process's write lock (both sqlite3's own wait and
    # the PRAGMA say the same), then fails "database is locked" (see is_unavailable)
    connect_args = {"check_same_thread": False, "timeout": busy_timeout_ms / 1000}
    engine = sa.create_engine(url, connect_args=connect_args, **options)

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # duro issues BEGIN itself (see _on_begin)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        if not read_only:  # a reader takes the file's journal mode as it is
            _enable_wal(cur)
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        driver: sqlite3.Connection = conn.connection.driver_connection  # type: ignore[assignment]
        if driver.in_transaction:
            return  # a write transaction Connector.write began on the driver: SQLAlchemy joins it
        statement = "BEGIN IMMEDIATE" if conn.get_execution_options().get("duro_write") else "BEGIN"
        driver.execute(statement)

    return engine, file


def _enable_wal(cur: Any) -> None:
    """Switch the file to WAL (persistent, so once per file). Several processes opening a new file at
    once race for it and SQLite answers "locked" without waiting: retry for up to 30 s."""
    for attempt in range(600):
        try:
            if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
                return
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or attempt == 599:
                raise
            pause(0.05)


def is_transient(err: BaseException) -> bool:
    """See ``SqlStore.is_transient``."""
    if isinstance(err.orig if isinstance(err, sa.exc.DBAPIError) else err, sqlite3.Error):
        return False
    cause: BaseException | None = err
    if isinstance(err, sa.exc.DBAPIError):
        if isinstance(err, sa.exc.OperationalError) or err.connection_invalidated:
            return True
        cause = err.orig
    # the named queries run on the driver's connection: psycopg's own errors
    pg = _psycopg.loaded()
    return isinstance(cause, (pg.OperationalError, pg.errors.IdleInTransactionSessionTimeout))


def is_unavailable(err: BaseException) -> bool:
    """See ``SqlStore.is_unavailable``."""
    cause = err.orig if isinstance(err, sa.exc.DBAPIError) else err
    if isinstance(cause, sqlite3.Error):
        return sqlite_busy(cause)
    return is_transient(err)


def sqlite_busy(err: BaseException) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (and their extended codes): another connection holds the lock."""
    name = getattr(err, "sqlite_errorname", None) or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    text = str(err).lower()
    return any(
        words in text for words in ("database is locked", "database is busy", "database table is locked")
    )
