"""The store's connection to its database: engines, transactions, and running named queries.

Every write that decides something runs in one transaction (:meth:`Connector.write`): on SQLite
``BEGIN IMMEDIATE`` takes the write lock before the first read, so a count and the insert it allows
cannot interleave with another process; on PostgreSQL a per-key transaction advisory lock
(:meth:`Connector.lock_key`) does the same where a decision needs it. Statements are the named
queries of :mod:`._queries`, run on the driver's own connection inside the transaction.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from .._errors import DuroError, StoreUnavailable
from .._states import RunState
from ..rules._slots import SlotRow
from ._commands import OwnStep
from ._engines import server_engine, sqlite_busy, sqlite_engine
from ._notify import Notice, payloads
from ._queries import DB_NOW, POSTGRESQL, QUERIES, SQLITE
from ._records import StepRecord, WouldWait
from ._schema import create_schema
from ._server import ServerTransactions
from ._urls import DEFAULT_BUSY_TIMEOUT_MS, URL_HINT, parse_database_url

if TYPE_CHECKING:
    import psycopg
import json
from dataclasses import dataclass

from .._states import WAITING
from ..definitions._config import LimitConfig
from ..rules._slots import LimitView
from ._queries import RUN_COLUMNS, SLOT_COLUMNS, STEP_COLUMNS
from ._records import RunRecord

T = TypeVar("T")
_NAMED = re.compile(r"(?<![:\w]):(\w+)")
_LISTED = re.compile(r"IN \(:(\w+)\)")


def driver_of(conn: Connection) -> sqlite3.Connection | psycopg.Connection[Any]:
    """The driver's connection under ``conn``: sqlite3's or psycopg's, the two drivers a URL may name
    (SQLAlchemy types it as PEP 249's, which has no ``execute`` or transaction state)."""
    return cast("sqlite3.Connection | psycopg.Connection[Any]", conn.connection.driver_connection)


def sqlite_driver(conn: Connection) -> sqlite3.Connection:
    """The sqlite3 connection under ``conn``, on SQLite (see :func:`driver_of`)."""
    return cast(sqlite3.Connection, conn.connection.driver_connection)


def raw_execute(conn: Connection, sql: str, params: Any) -> Any:
    """Run ``sql`` on the driver connection under ``conn``, inside its transaction (SQLite; on
    PostgreSQL :meth:`._server.ServerTransactions.execute` begins the transaction with it)."""
    return driver_of(conn).execute(sql, params)


class TurnLock:
    """A reentrant lock handed to its waiters first come, first served: the process's SQLite writer.

    ``threading.RLock`` lets the thread that releases it take it straight back, before a waiter
    wakes: a thread writing a long grant pass in bounded transactions (see ``_slots.GRANT_BATCH``)
    would then keep the writer for the whole grant pass, and a slot request beside it wait as long.
    With turns, a request waits for one transaction at the most."""

    def __init__(self) -> None:
        # the condition's own lock, entered directly: a Lock's with is C code, a Condition's Python
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._owner: int | None = None
        self._depth = 0
        self._queue: deque[int] = deque()  # the tickets of the threads waiting, in order
        self._tickets = 0

    def acquire(self, blocking: bool = True) -> bool:
        me = threading.get_ident()
        with self._mutex:
            if self._owner == me:
                self._depth += 1
                return True
            if self._owner is None and not self._queue:
                self._owner, self._depth = me, 1
                return True
            if not blocking:
                return False
            self._tickets += 1
            ticket = self._tickets
            self._queue.append(ticket)
            try:
                while self._owner is not None or self._queue[0] != ticket:
                    self._cond.wait()
            except BaseException:
                self._queue.remove(ticket)
                self._cond.notify_all()
                raise
            self._queue.popleft()
            self._owner, self._depth = me, 1
            return True

    def release(self) -> None:
        with self._mutex:
            if self._owner != threading.get_ident():
                raise RuntimeError("TurnLock released by a thread that does not hold it")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                if self._queue:
                    self._cond.notify_all()

    def __enter__(self) -> TurnLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class _CallState(threading.local):
    nowait = False  # inside without_waiting
    committed = False  # ... and a transaction of that call has committed


class Connector:
    """One database: its engine, its transactions and its named queries in the dialect's style.

    ``database_clock``: decisions are judged by the PostgreSQL server's clock (``{clock}`` in a
    query, :meth:`now`), not by the ``now`` the caller passes."""

    def __init__(
        self,
        url: str | URL,
        *,
        pool_size: int,
        database_clock: bool,
        idle_ms: int | None,
        read_only: bool = False,
    ) -> None:
        self.url, options = parse_database_url(url)
        self.dialect = self.url.get_backend_name()
        self.read_only = read_only
        self.file: str | None = (
            None  # a SQLite file (not in memory): its path, and the identity it was opened with
        )
        self._identity: tuple[int, int] | None = None
        self.database_clock = database_clock and self.dialect == "postgresql"
        try:
            if self.dialect == "sqlite":
                self.engine, self.file = sqlite_engine(
                    self.url,
                    options.get("synchronous", "NORMAL"),
                    options.get("busy_timeout", DEFAULT_BUSY_TIMEOUT_MS),
                    read_only,
                )
                if self.file is not None:
                    sa.event.listen(self.engine, "connect", self._note_identity)
                self._execute = raw_execute
            else:
                self.engine = server_engine(self.url, pool_size, idle_ms, read_only)
                self._server = ServerTransactions(self.engine)
                self._execute = self._server.execute
        except (ArgumentError, NoSuchModuleError, TypeError) as err:
            raise DuroError(f"database URL {self.safe_url!r} cannot be used: {err}; {URL_HINT}") from None
        self.schema_ready = False
        self._source = {**QUERIES, **(POSTGRESQL if self.dialect == "postgresql" else SQLITE)}
        self.queries = {name: self.adapt(sql) for name, sql in self._source.items()}  # by name, ready to run
        self._expanded: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}
        self._positional: dict[str, str] = {}
        self._writer: Connection | None = None
        self._writer_lock = TurnLock()  # in turn: a long grant pass's batches let other writes in
        self.writes = 0  # SQLite write transactions begun by this process (see _notify.watch_sqlite)
        self._local = _CallState()  # per thread: inside without_waiting, and its connections there
        self._nowait_connections: list[Connection] = []

    @property
    def server_commits(self) -> int:
        """PostgreSQL: the transactions committed so far (the store begins and commits its own)."""
        return self._server.commits

    @property
    def safe_url(self) -> str:
        return self.url.render_as_string(hide_password=True)

    # -- queries ---------------------------------------------------------------------------------

    def adapt(self, sql: str) -> str:
        """A query of :mod:`._queries` as this database runs it (see that module's conventions)."""
        clock = DB_NOW if self.database_clock else "CAST(:now AS BIGINT)"
        sql = sql.replace("{clock}", clock)
        return sql if self.dialect == "sqlite" else _NAMED.sub(r"%(\1)s", sql)

    def run(self, conn: Connection, name: str, params: Any) -> Any:
        """Run named query ``name`` inside ``conn``'s transaction; returns the driver's cursor."""
        return self._execute(conn, self.queries[name], params)

    def run_text(self, conn: Connection, sql: str, params: dict[str, Any]) -> Any:
        """Run ``sql`` (a query of :mod:`._queries`, by text), binding each list in ``params`` to its
        ``IN (:name)``, one parameter per item; a list of tuples binds row values (``(a, b) IN
        (VALUES (...), ...)``, one parameter per member)."""
        lengths = tuple(
            (k, len(v), len(v[0]) if v and isinstance(v[0], tuple) else 0)
            for k, v in params.items()
            if isinstance(v, (list, tuple))
        )
        key = (sql, lengths)
        text = self._expanded.get(key)
        if text is None:
            counts = {name: (n, width) for name, n, width in lengths}

            def expand(match: re.Match[str]) -> str:
                name = match[1]
                if name not in counts:
                    return match[0]
                n, width = counts[name]
                if width:
                    rows = ", ".join(
                        "(" + ", ".join(f":{name}_{i}_{j}" for j in range(width)) + ")" for i in range(n)
                    )
                    return f"IN (VALUES {rows})"
                return f"IN ({', '.join(f':{name}_{i}' for i in range(n)) or 'NULL'})"

            text = self._expanded[key] = self.adapt(_LISTED.sub(expand, sql))
        if lengths:
            flat = {k: v for k, v in params.items() if not isinstance(v, (list, tuple))}
            for name, _, width in lengths:
                for i, value in enumerate(params[name]):
                    if width:
                        flat.update((f"{name}_{i}_{j}", member) for j, member in enumerate(value))
                    else:
                        flat[f"{name}_{i}"] = value
            params = flat
        return self._execute(conn, text, params)

    def run_in(self, conn: Connection, name: str, params: dict[str, Any]) -> Any:
        """Named query ``name`` with list parameters (see :meth:`run_text`)."""
        return self.run_text(conn, self._source[name], params)

    def run_many(self, conn: Connection, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """SQLite: ``sql`` (a query's text) once per row, in one driver call (``executemany``); each
        row gives the parameters in the order they appear. Positional rows: binding by name cost
        about as much as SQLite's whole insert."""
        positional = self._positional.get(sql)
        if positional is None:
            positional = self._positional[sql] = _NAMED.sub("?", sql)
        sqlite_driver(conn).executemany(positional, rows)

    def pipeline(self, conn: Connection) -> AbstractContextManager[Any]:
        """Statements whose answers can wait, sent together: a psycopg pipeline on PostgreSQL (one
        round trip at its end), nothing special on SQLite (in process, no round trips)."""
        if self.dialect != "postgresql":
            return nullcontext()
        return cast("psycopg.Connection[Any]", driver_of(conn)).pipeline()

    def single_write(self) -> AbstractContextManager[Connection]:
        """A write of one statement, which decides alone (fenced in its own SQL): on PostgreSQL in
        autocommit, the statement its own transaction (see :mod:`._server`); a transaction of
        :meth:`write` on SQLite."""
        if self.dialect != "postgresql":
            return self.write()
        self.ensure_schema()
        return self._server.single_write()

    def committing(self, conn: Connection, answers: bool = True) -> AbstractContextManager[Any]:
        """A write transaction's last statements, sent with its commit (PostgreSQL: one round trip,
        see :mod:`._server`); their answers are read once the block is left, the transaction
        committed, so each must decide alone (fenced in its own SQL). SQLite commits as always.
        ``answers=False``: the caller reads none of them, and a commit whose answer was lost but
        that did commit is taken as committed (PostgreSQL: see :mod:`._server`)."""
        if self.dialect != "postgresql":
            return nullcontext()
        return self._server.committing(conn, answers)

    def lock_key(self, conn: Connection, key: str) -> None:
        """PostgreSQL: a transaction lock on ``key`` (decisions on one key, one after another);
        SQLite's write transaction holds the whole database already."""
        if self.dialect == "postgresql":
            self.run(conn, "lock_key", {"key": key})

    def now(self, conn: Connection, now: int) -> int:
        """The instant decisions are judged by. On PostgreSQL the database server's clock, so that
        workers whose clocks disagree never take a slot back early or a lease away too soon; on
        SQLite (one machine) the caller's ``now``."""
        if not self.database_clock:
            return now
        return int(self.run(conn, "db_now", {}).fetchone()[0])

    def notify(self, conn: Connection, *notices: Notice) -> None:
        """Tell other processes' workers what this transaction changed (see :mod:`._notify`): sent at
        commit, dropped on rollback. PostgreSQL only."""
        if self.dialect == "postgresql" and notices:
            self.run(conn, "notify", payloads(notices))

    def ensure_schema(self) -> None:
        if not self.schema_ready:
            create_schema(self)

    def _note_identity(self, _dbapi_conn: Any, _record: Any) -> None:
        """Remember the file this process writes, as first opened (see :meth:`_check_file`)."""
        if self.file is not None and self._identity is None:
            found = os.stat(self.file)
            self._identity = (found.st_dev, found.st_ino)

    # -- calls that must not wait (SQLite, on the event loop) --------------------------------------

    def without_waiting(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a method of the store), here and now, if it needs no lock that another
        process or thread holds; otherwise :class:`WouldWait`, having changed nothing. SQLite only:
        its statements take microseconds unless they wait for a lock, so the engine makes a call
        this way first, on the event loop, and in a thread only when it would wait. Its connections
        here have a busy timeout of 0 and it takes this process's write lock without blocking, so a
        file that another process holds locked answers at once. Once a transaction of the call has
        committed, the rest of the call may wait (nothing done twice)."""
        local = self._local
        if self.dialect != "sqlite" or not self.schema_ready or local.nowait:
            raise WouldWait
        local.nowait, local.committed = True, False
        try:
            return fn(*args)
        finally:
            local.nowait = False

    def _waits(self) -> bool:
        """Whether this thread's transaction may wait for a lock (not inside ``without_waiting``)."""
        local = self._local
        return not local.nowait or local.committed

    def _nowait_connection(self, kind: str) -> Connection:
        """This thread's ``kind`` ("writer" or "reader") connection whose busy timeout is 0."""
        local = self._local
        conn: Connection | None = getattr(local, kind, None)
        if conn is None:
            conn = self.engine.connect()
            if kind == "writer":
                conn.execution_options(duro_write=True)
            sqlite_driver(conn).execute("PRAGMA busy_timeout=0")
            setattr(local, kind, conn)
            with self._writer_lock:
                self._nowait_connections.append(conn)
        return conn

    # -- transactions ----------------------------------------------------------------------------

    def _check_file(self) -> None:
        """A SQLite file deleted or replaced (renamed over) since this process opened it takes no
        more writes: they would go to a file nobody opens again (every one lost at the next start),
        or mix two databases. A stat per write transaction: about a microsecond."""
        if self._identity is None:
            return
        try:
            found = os.stat(self.file or "")
        except FileNotFoundError:
            what = "deleted"
        else:
            if (found.st_dev, found.st_ino) == self._identity:
                return
            what = "replaced by another file"
        raise StoreUnavailable(
            f"the SQLite file {self.file} was {what} after this process opened it, so it takes no "
            f"more writes (they would be lost): put the file back, or restart this process to open "
            f"the file now at that path"
        )

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A transaction that decides: on SQLite it holds the write lock from its first statement.

        SQLite has one writer at a time anyway, so this process keeps one connection for its writes
        (no pool checkout per transaction), and one more for its writes that must not wait (see
        ``without_waiting``); PostgreSQL writes take pooled connections."""
        self.ensure_schema()
        if self.dialect != "sqlite":
            with self._server.transaction(write=True) as conn:
                yield conn
            return
        self._check_file()
        waits = self._waits()
        if not self._writer_lock.acquire(blocking=waits):
            raise WouldWait  # this process's other writer is inside a transaction
        try:
            if not waits:
                writer = self._nowait_connection("writer")
            else:
                if self._writer is None:
                    self._writer = self.engine.connect()
                    self._writer.execution_options(duro_write=True)
                writer = self._writer
            # The transaction is the driver's own (SQLAlchemy's bookkeeping of begin and commit cost
            # about a tenth of a start): a SQLAlchemy statement inside joins it (see _on_begin), and
            # then SQLAlchemy's commit or rollback ends it.
            driver = sqlite_driver(writer)
            try:
                driver.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as err:
                if not waits and sqlite_busy(err):
                    raise WouldWait from None  # another process holds the file's write lock
                raise
            self.writes += 1  # under the writer lock
            try:
                yield writer
                if writer.in_transaction():
                    writer.commit()
                else:
                    driver.commit()
            except BaseException:
                if writer.in_transaction():
                    writer.rollback()
                if driver.in_transaction:
                    driver.rollback()
                raise
            if not waits:
                self._local.committed = True
        finally:
            self._writer_lock.release()

    @contextmanager
    def read(self, transaction: bool = True) -> Iterator[Connection]:
        """A read; ``transaction=False`` for one statement, which needs no transaction of its own
        (SQLite's autocommit; on PostgreSQL see :mod:`._server`)."""
        self.ensure_schema()
        if self.dialect != "sqlite":
            with self._server.transaction() if transaction else self._server.session() as conn:
                yield conn
            return
        if self._waits():
            with self.engine.connect() as conn, conn.begin() if transaction else nullcontext():
                yield conn
            return
        conn = self._nowait_connection("reader")
        try:
            with conn.begin() if transaction else nullcontext():
                yield conn
        except (sa.exc.OperationalError, sqlite3.OperationalError) as err:
            if sqlite_busy(getattr(err, "orig", None) or err):
                raise WouldWait from None  # a read in WAL mode waits only in rare moments (a recovery)
            raise
        finally:
            if conn.in_transaction():  # this connection stays: it must never keep a snapshot open
                conn.rollback()

    @contextmanager
    def schema_transaction(self) -> Iterator[Connection]:
        """The transaction that creates or migrates the schema (:meth:`write` would make sure of
        the schema first). On PostgreSQL a statement of the store's must come first (``lock_key``):
        it begins the transaction, which SQLAlchemy's DDL then joins."""
        if self.dialect != "sqlite":
            with self._server.transaction() as conn:
                yield conn
            return
        with self.engine.connect() as conn:
            conn.execution_options(duro_write=True)
            with conn.begin():
                yield conn

    # -- the fence ------------------------------------------------------------------------------
    # A run's writes are fenced on its owner and on its status not being terminal: a worker that
    # lost a run (cancelled, or taken over after its lease ran out) changes nothing. Each write
    # touches the run first (the fence); the caller learns from the fence's row count whether it
    # still owns the run. On PostgreSQL the fence and the write are one statement.

    def send_fence(
        self,
        conn: Connection,
        run_id: str,
        owner: str | None,
        now: int,
        status: str | None = None,
        wake_at: int | None = None,
    ) -> Any:
        """Touch the run if ``owner`` still owns it unfinished (and set its status and timer); the
        cursor's ``rowcount`` is 1 if it did."""
        if status is None:
            return self.run(conn, "fence", {"id": run_id, "owner": owner, "now": now})
        return self.run(
            conn,
            "fence_status",
            {
                "id": run_id,
                "owner": owner,
                "now": now,
                "status": status,
                "wake_at": wake_at,
                "due_at": due_for(status, wake_at, now),
            },
        )

    def write_step(
        self,
        conn: Connection,
        run_id: str,
        owner: str | None,
        step: StepRecord | None,
        run_status: RunState | None,
        wake_at: int | None,
        now: int,
    ) -> bool:
        """Record ``step`` (if any) and set the run's status and timer, if ``owner`` still owns it."""
        if step is not None and self.dialect == "postgresql":
            touched: int = self.send_step(conn, run_id, owner, step, now, run_status, wake_at).rowcount
            return touched == 1
        if self.send_fence(conn, run_id, owner, now, run_status, wake_at).rowcount != 1:
            return False
        if step is not None:
            self.run(conn, "upsert_step", step_values(run_id, step))
        return True

    def send_step(
        self,
        conn: Connection,
        run_id: str,
        owner: str | None,
        step: StepRecord | None,
        now: int,
        run_status: RunState | None = None,
        wake_at: int | None = None,
    ) -> Any:
        """``write_step`` without waiting for the fence's answer (in a pipeline): the returned cursor's
        ``rowcount`` is 1 once the pipeline syncs if ``owner`` still owned the run. On PostgreSQL the
        fence is inside the step's write (one statement: a fenced one writes nothing); on SQLite the
        step is written whatever the fence says, and the caller rolls back when it is not 1."""
        if step is None:
            return self.send_fence(conn, run_id, owner, now, run_status, wake_at)
        if self.dialect == "postgresql":
            values = step_values(run_id, step)
            values.update(owner=owner, now=now)
            if run_status is None:
                return self.run(conn, "fenced_step", values)
            values.update(
                run_status=run_status, run_wake_at=wake_at, run_due_at=due_for(run_status, wake_at, now)
            )
            return self.run(conn, "fenced_step_status", values)
        fence = self.send_fence(conn, run_id, owner, now, run_status, wake_at)
        self.run(conn, "upsert_step", step_values(run_id, step))
        return fence

    def send_slot_read(
        self, conn: Connection, slot_id: str, hook: OwnStep | None, now: int
    ) -> Callable[[], tuple[SlotRow | None, int | None]]:
        """Send the slot's read and the hook's fence, after the limit's lock; the call returned gives
        the slot and how many runs the fence touched (``None`` without a hook) once they are in.
        On PostgreSQL the two are one statement: only holders of the limit's lock write its slots,
        so the read's snapshot cannot miss a change while the fence waits for the run's row."""
        if hook is not None and self.dialect == "postgresql":
            params = {"id": slot_id, "run_id": hook.run_id, "owner": hook.owner, "now": now}
            cursor = self.run(conn, "slot_select_fenced", params)

            def fenced() -> tuple[SlotRow | None, int | None]:
                touched, *values = cursor.fetchone()
                return (None if values[0] is None else slot_row(values)), int(touched)

            return fenced
        found = self.run(conn, "slot_select", {"id": slot_id})
        fence = None if hook is None else self.send_fence(conn, hook.run_id, hook.owner, now)

        def read() -> tuple[SlotRow | None, int | None]:
            slot = found.fetchone()
            return (None if slot is None else slot_row(slot)), (None if fence is None else fence.rowcount)

        return read

    def single_read(self) -> AbstractContextManager[Connection]:
        return self.read(transaction=False)

    def close(self) -> None:
        with self._writer_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            for conn in self._nowait_connections:
                conn.close()
            self._nowait_connections = []
            self._local = _CallState()
        self.engine.dispose()


# -- the rows as values ----------------------------------------------------------------------------
# The rows the store's parts share, as values: a step's and a slot's as written, a run's, a slot's
# and a limit's as read (no I/O: the fence every write of a run passes is the connector's, see
# ``Connector.write_step``).


def step_values(run_id: str, step: StepRecord) -> dict[str, Any]:
    return dict(zip(STEP_COLUMNS, (run_id, *step), strict=True))


def due_for(status: str, wake_at: int | None, now: int) -> int | None:
    """When a run written with ``status`` (and timer ``wake_at``) at ``now`` falls due if nobody
    holds it: a waiting run when its timer ends (never, with no timer: what it waits for makes it
    due), any other at once (see ``_tables.Run.due_at``)."""
    return wake_at if status in WAITING else now


@dataclass(frozen=True)
class LimitState:
    """A limit's row: overrides and live counts (for the admin listing)."""

    name: str
    capacity_override: int | None
    max_hold_override_ms: int | None
    busy: int
    reserved: int
    waiting: int
    capacity: int | None = None  # as declared by the last worker to start with it in its config
    max_hold_ms: int | None = None
    per_key: int | None = None


def slot_row(values: Any) -> SlotRow:
    """A slot's row as selected (``SLOT_COLUMNS``: its fields, then ``due_at``, which it derives)."""
    return SlotRow(*values[:-1])


def slot_values(row: SlotRow) -> dict[str, Any]:
    return dict(zip(SLOT_COLUMNS, (*row, row.due_at), strict=True))


def limit_view(config: LimitConfig, row: Sequence[Any]) -> tuple[LimitView, int]:
    """A limit as its locked row (``limit_lock``) and its config say, and the instant to judge by."""
    capacity_override, max_hold_override, busy, reserved, waiting, next_pos, judged = row[:7]
    return LimitView(
        name=config.name,
        capacity=capacity_override or config.capacity,
        max_hold_ms=max_hold_override or config.max_hold_ms,
        busy=busy,
        reserved=reserved,
        waiting=waiting,
        next_pos=next_pos,
        per_key=config.per_key,
    ), int(judged)


def to_run(row: Any) -> RunRecord:
    values = dict(zip(RUN_COLUMNS, row, strict=True))
    try:
        tags = json.loads(values["tags"] or "[]")
    except ValueError:
        tags = []  # a corrupt or hostile row: its tags are unreadable, the run is not
    values["tags"] = tags if isinstance(tags, list) else []
    return RunRecord(**values)
