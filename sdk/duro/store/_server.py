"""PostgreSQL's transactions, in as few round trips as their statements allow.

The store's sessions are in autocommit, and the store begins a transaction itself: its ``BEGIN``
goes out in one round trip with the transaction's first statement (psycopg would send its own
``BEGIN`` and wait for the answer first), and it ends with ``COMMIT``, or ``ROLLBACK`` after an
error. A transaction that ran no statement sends nothing. Its last statements may go out with the
``COMMIT`` (:meth:`ServerTransactions.committing`): a transaction whose statements all decide alone
(each fenced in its own SQL) is then one round trip, ``BEGIN`` to ``COMMIT``. A one-statement read
or write needs no transaction at all. (A session in autocommit also keeps its prepared statements:
psycopg forgets them at every rollback it makes itself, and a read ended by one would have every
later statement parsed and planned again.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import _psycopg

_BEGIN = b"BEGIN"
_COMMIT = b"COMMIT"


def _driver(conn: Connection) -> Any:
    return conn.connection.driver_connection


class _Unbegun(threading.local):
    driver: Any = None  # the session whose transaction this thread has not begun yet


class ServerTransactions:
    """The transactions and statements of one PostgreSQL store (``engine``: its pool)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine  # its sessions in autocommit (see _engines.server_engine)
        self._unbegun = _Unbegun()
        self.commits = 0  # transactions committed so far (for tests and benchmarks)
        self._counting = threading.Lock()

    def _count(self) -> None:
        with self._counting:
            self.commits += 1

    def session(self) -> Connection:
        """A session of the pool, in autocommit: each statement its own transaction."""
        return self.engine.connect()

    @contextmanager
    def single_write(self) -> Iterator[Connection]:
        """A session for one statement that writes, its own transaction: no ``BEGIN``, no
        ``COMMIT``, no pipeline, the one round trip of the statement."""
        with self.engine.connect() as conn:
            yield conn
        self._count()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A session inside one transaction, begun with its first statement (see :meth:`execute`)."""
        unbegun = self._unbegun
        with self.engine.connect() as conn:
            driver = _driver(conn)
            outer, unbegun.driver = unbegun.driver, driver  # a transaction inside one: its own session
            try:
                yield conn
                unbegun.driver = outer
                status = driver.pgconn.transaction_status
                if status == _psycopg.driver.pq.TransactionStatus.INERROR:  # an error caught inside
                    raise _psycopg.driver.errors.InFailedSqlTransaction(
                        "a statement of the transaction failed: nothing of it is committed"
                    )
                if status != _psycopg.driver.pq.TransactionStatus.IDLE:  # begun, not committed yet
                    driver.execute(_COMMIT)
                    self._count()
            except BaseException:
                unbegun.driver = outer
                _roll_back(conn, driver)
                raise

    @contextmanager
    def committing(self, conn: Connection) -> Iterator[None]:
        """The transaction's last statements, sent with its ``COMMIT`` in one pipeline: their answers
        (rows, ``rowcount``) are there once the block is left, the transaction committed. No
        statement may follow, and none inside may need an answer to decide what comes next."""
        driver = _driver(conn)
        with driver.pipeline():
            yield
            began = self._unbegun.driver is not driver  # by a statement here, or before
            if began:
                driver.execute(_COMMIT)
        if began:
            self._count()

    def execute(self, conn: Connection, sql: str, params: Any) -> Any:
        """Run ``sql`` in ``conn``'s session; the first statement of a transaction takes its
        ``BEGIN`` along, in one pipeline (or in the one already open)."""
        driver = _driver(conn)
        unbegun = self._unbegun
        if unbegun.driver is not driver:
            return driver.execute(sql, params)
        unbegun.driver = None
        if driver.pgconn.pipeline_status:
            driver.execute(_BEGIN)
            return driver.execute(sql, params)
        with driver.pipeline():
            driver.execute(_BEGIN)
            cursor = driver.execute(sql, params)
        return cursor


def _roll_back(conn: Connection, driver: Any) -> None:
    """End a failed transaction; a session that cannot say where it stands leaves the pool."""
    status = driver.pgconn.transaction_status
    pq = _psycopg.driver.pq
    if status == pq.TransactionStatus.IDLE:
        return
    if status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
        try:
            driver.execute(b"ROLLBACK")
            return
        except _psycopg.driver.Error:
            pass
    conn.invalidate()
