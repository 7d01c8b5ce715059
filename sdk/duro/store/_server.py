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

A write transaction asks for its transaction id with its ``BEGIN`` (same round trip). If the answer
to its ``COMMIT`` is lost (the server restarting as it commits, the network cut), nobody can tell
from the error whether it committed, and making the same decision again would be wrong (a release
made twice says the second time that nothing was released; a grant made twice grants twice).
So the store asks the server what became of that transaction id (``pg_xact_status``) before it
says anything: committed, the transaction's result stands; aborted, the error stands and the call
is made again as any transient error is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import _psycopg

log = logging.getLogger("duro.store")

_BEGIN = b"BEGIN"
_COMMIT = b"COMMIT"
_XACT_ID = b"SELECT pg_current_xact_id()::text"
_XACT_STATUS = b"SELECT pg_xact_status(%s::xid8)"


def _driver(conn: Connection) -> Any:
    return conn.connection.driver_connection


class _Write:
    """A write transaction's id, asked for with its ``BEGIN``, in case its ``COMMIT`` goes
    unanswered; and whether that ``COMMIT`` is known to have committed although its answer was lost."""

    __slots__ = ("asked", "committed")

    def __init__(self) -> None:
        self.asked: Any = None  # the cursor that asked for the id (answered before the COMMIT went)
        self.committed = False


class _Unbegun(threading.local):
    driver: Any = None  # the session whose transaction this thread has not begun yet
    write: _Write | None = None  # that transaction's id, a write's (None: a read's, not asked)


class CommitOutcomeUnknown(Exception):
    """The answer to a ``COMMIT`` was lost and the server could not say, within about 30 s, whether
    it committed: the call must not be made again as if it had not."""


OUTCOME_TRIES = 60  # asking what became of a transaction whose COMMIT went unanswered: ~30 s
OUTCOME_PAUSE_S = 0.5


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
    def transaction(self, write: bool = False) -> Iterator[Connection]:
        """A session inside one transaction, begun with its first statement (see :meth:`execute`).
        ``write``: its id is asked for as it begins, so that a ``COMMIT`` whose answer is lost is
        judged by what the server did (see the module's docstring)."""
        unbegun = self._unbegun
        with self.engine.connect() as conn:
            driver = _driver(conn)
            tx = _Write() if write else None
            # a transaction inside one: its own session
            outer = unbegun.driver, unbegun.write
            unbegun.driver, unbegun.write = driver, tx
            try:
                yield conn
                unbegun.driver, unbegun.write = outer
                if tx is not None and tx.committed:  # by committing(), its answer lost: session gone
                    conn.invalidate()
                    return
                status = driver.pgconn.transaction_status
                if status == _psycopg.driver.pq.TransactionStatus.INERROR:  # an error caught inside
                    raise _psycopg.driver.errors.InFailedSqlTransaction(
                        "a statement of the transaction failed: nothing of it is committed"
                    )
                if status != _psycopg.driver.pq.TransactionStatus.IDLE:  # begun, not committed yet
                    try:
                        driver.execute(_COMMIT)
                    except _psycopg.driver.OperationalError:
                        if not self._committed(tx):
                            raise
                        conn.invalidate()
                    self._count()
            except BaseException:
                unbegun.driver, unbegun.write = outer
                _roll_back(conn, driver)
                raise

    @contextmanager
    def committing(self, conn: Connection, answers: bool = True) -> Iterator[None]:
        """The transaction's last statements, sent with its ``COMMIT`` in one pipeline: their answers
        (rows, ``rowcount``) are there once the block is left, the transaction committed. No
        statement may follow, and none inside may need an answer to decide what comes next.

        ``answers=False``: the caller reads none of the answers, so a ``COMMIT`` whose answer was lost
        (with theirs) but that did commit counts as committed (see the module's docstring);
        otherwise the error stands, and the caller's statements must be safe to make again."""
        driver = _driver(conn)
        unbegun = self._unbegun
        tx = None if answers or unbegun.driver is driver else unbegun.write
        began = False
        try:
            with driver.pipeline():
                yield
                began = unbegun.driver is not driver  # by a statement here, or before
                if began:
                    driver.execute(_COMMIT)
        except _psycopg.driver.OperationalError:
            if not (began and self._committed(tx)):
                raise
            assert tx is not None
            tx.committed = True
        if began:
            self._count()

    def _committed(self, tx: _Write | None) -> bool:
        """Whether the transaction whose ``COMMIT`` went unanswered committed after all, if its id is
        known (``tx``: a write's; ``None`` for a transaction that did not ask for it)."""
        if tx is None or tx.asked is None:
            return False
        try:
            xid = tx.asked.fetchone()[0]  # answered with the BEGIN, before the COMMIT was sent
        except (_psycopg.driver.Error, TypeError):
            return False
        outcome = self._outcome(xid)
        log.warning(
            "duro store: the answer to a COMMIT was lost; the database says the transaction %s",
            "committed (its result stands)"
            if outcome == "committed"
            else "did not commit (it is made again)",
        )
        return outcome == "committed"

    def _outcome(self, xid: str) -> str | None:
        """What became of transaction ``xid``: ``committed``, ``aborted`` (or ``None`` if the server
        no longer knows), asked on a new session, again while the server is out of reach or the
        transaction still in progress (its session may not have noticed yet that the client left)."""
        pg = _psycopg.driver
        for _ in range(OUTCOME_TRIES):
            try:
                with self.engine.connect() as conn:
                    status = _driver(conn).execute(_XACT_STATUS, (xid,)).fetchone()[0]
            except (pg.OperationalError, sa.exc.DBAPIError):
                status = "unreachable"
            if status not in ("in progress", "unreachable"):
                return str(status) if status is not None else None
            threading.Event().wait(OUTCOME_PAUSE_S)
        raise CommitOutcomeUnknown(
            f"the answer to a COMMIT was lost and the database could not say within "
            f"{OUTCOME_TRIES * OUTCOME_PAUSE_S:.0f} s whether transaction {xid} committed"
        )

    def execute(self, conn: Connection, sql: str, params: Any) -> Any:
        """Run ``sql`` in ``conn``'s session; the first statement of a transaction takes its
        ``BEGIN`` along, in one pipeline (or in the one already open)."""
        driver = _driver(conn)
        unbegun = self._unbegun
        if unbegun.driver is not driver:
            return driver.execute(sql, params)
        unbegun.driver, tx = None, unbegun.write
        if driver.pgconn.pipeline_status:
            self._begin(driver, tx)
            return driver.execute(sql, params)
        with driver.pipeline():
            self._begin(driver, tx)
            cursor = driver.execute(sql, params)
        return cursor

    @staticmethod
    def _begin(driver: Any, tx: _Write | None) -> None:
        driver.execute(_BEGIN)
        if tx is not None:  # a write: its transaction id, in case its COMMIT goes unanswered
            tx.asked = driver.execute(_XACT_ID)


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
