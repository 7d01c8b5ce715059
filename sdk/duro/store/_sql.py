"""The SQL store: SQLite (embedded default) and PostgreSQL (many processes), one implementation.

Every write that decides something runs in one transaction: on SQLite ``BEGIN IMMEDIATE`` takes
the write lock before the first read, so a count and the insert it allows cannot interleave with
another process; on PostgreSQL a per-key transaction advisory lock does the same for quotas, and
claims use ``FOR UPDATE SKIP LOCKED``. Writes of a run's progress are fenced on its owner and on
its status not being terminal: a worker that lost a run (cancelled, or taken over after its lease
ran out) changes nothing.
"""

from __future__ import annotations

import json
import operator
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from functools import cache, lru_cache
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError

try:
    import psycopg
    from psycopg.errors import UniqueViolation
except ModuleNotFoundError:  # no postgres extra: SQLite only (parse_database_url says which to install)
    from .._extras import PSYCOPG as psycopg  # type: ignore[no-redef]
    from .._extras import NotInstalled as UniqueViolation  # type: ignore[assignment]

from .._clock import pause
from .._definitions import ACTIVE_STATUS_VALUES
from .._durations import Duration, to_ms
from .._errors import ConcurrencyLimitError, DuroError, RunIdConflictError
from .._extras import require
from .._quota import admit
from ._commands import (
    Command,
    ConfirmSlot,
    FinishRun,
    GiveUpSlot,
    OwnStep,
    RecordStep,
    ReleaseSlot,
    RequestSlot,
    TakeSignal,
)
from ._dialect import for_dialect, raw_execute
from ._records import Claim, Fenced, NewRun, QuotaCheck, RunRecord, ScheduleRecord, StepRecord, WouldWait
from ._slots_sql import SLOT_SQL, SlotsStoreMixin
from ._tables import ACTIVE_SQL, SCHEMA_VERSION, meta, metadata, runs, schedules, signals, workers

DEFAULT_SQLITE_URL = "sqlite:///.duro/dev.db"
T = TypeVar("T")

# Schema migrations: MIGRATIONS[n](connection, dialect) upgrades version n to n + 1.
MIGRATIONS: dict[int, Callable[[Connection, str], None]] = {
    # 1 -> 2 adds duro_schedules, a new table: create_all (run just before) has made it already.
    1: lambda conn, dialect: None,
    # 2 -> 3 adds duro_limits and duro_slots: new tables as well.
    2: lambda conn, dialect: None,
    # 3 -> 4: partial indexes (see _tables.Run and _tables.SlotRequest); on PostgreSQL the claims'
    # index on (namespace, status, owner) gives way to duro_runs_active
    3: lambda conn, dialect: _recreate_indexes(
        conn,
        "duro_runs_quota",
        "duro_runs_parent",
        "duro_slots_due",
        "duro_slots_run",
        *(["duro_runs_active"] if dialect == "postgresql" else []),
        dropped=["duro_runs_claim"] if dialect == "postgresql" else [],
    ),
}


def _recreate_indexes(conn: Connection, *names: str, dropped: Iterable[str] = ()) -> None:
    """Drop indexes (``names`` and ``dropped``) and create ``names`` as the schema now defines them."""
    for name in dropped:
        conn.execute(sa.text(f"DROP INDEX IF EXISTS {name}"))
    for table in metadata.sorted_tables:
        for index in table.indexes:
            if index.name in names:
                conn.execute(sa.text(f"DROP INDEX IF EXISTS {index.name}"))
                index.create(conn)


_URL_HINT = "use sqlite:///path/to/file.db or postgresql+psycopg://user:password@host:5432/dbname"
_ACTIVE = list(ACTIVE_STATUS_VALUES)

# The hot path (start, record a step, finish, read a run) runs these fixed statements through the
# driver directly: building SQLAlchemy Core statements per call cost more than SQLite itself.
_RUN_COLUMNS = (
    "id",
    "namespace",
    "workflow",
    "version",
    "status",
    "input",
    "output",
    "error",
    "tags",
    "concurrency_key",
    "parent_id",
    "parent_seq",
    "owner",
    "wake_at",
    "created_at",
    "updated_at",
    "ended_at",
)
_STEP_COLUMNS = (
    "run_id",
    "seq",
    "kind",
    "name",
    "status",
    "started_at",
    "ended_at",
    "wake_at",
    "result",
    "error",
    "detail",
)
# unfinished runs of duro_runs, with the literal values its partial index is defined with (a bound
# IN list would not let the planners use it)
_RUNS_ACTIVE = sa.text(f"duro_runs.status IN {ACTIVE_SQL}")
_HOT_SQL = {
    "select_run": f"SELECT {', '.join(_RUN_COLUMNS)} FROM duro_runs WHERE id = :id",
    "insert_run": f"INSERT INTO duro_runs ({', '.join(_RUN_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in _RUN_COLUMNS)})",
    "fence": f"UPDATE duro_runs SET updated_at = :now WHERE id = :id AND owner = :owner AND status IN {ACTIVE_SQL}",
    "fence_status": f"UPDATE duro_runs SET updated_at = :now, status = :status, wake_at = :wake_at "
    f"WHERE id = :id AND owner = :owner AND status IN {ACTIVE_SQL}",
    "upsert_step": f"INSERT INTO duro_steps ({', '.join(_STEP_COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in _STEP_COLUMNS)}) ON CONFLICT (run_id, seq) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _STEP_COLUMNS[2:]),
    "finish_run": f"UPDATE duro_runs SET status = :status, output = :output, error = :error, ended_at = :now, "
    f"updated_at = :now, wake_at = NULL WHERE id = :id AND owner = :owner AND status IN {ACTIVE_SQL}",
    "select_steps": f"SELECT {', '.join(_STEP_COLUMNS[1:])} FROM duro_steps WHERE run_id = :run_id ORDER BY seq",
}


NOTIFY_CHANNEL = "duro"
_DB_NOW_SQL = "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint"
# a quota key's transaction lock (PostgreSQL): starts on one key decide one after another
_LOCK_KEY_SQL = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"
_NOTIFY_SQL = (
    f"SELECT pg_notify('{NOTIFY_CHANNEL}', payload) FROM unnest(CAST(%(payloads)s AS text[])) AS payload"
)
# SqlStore._claim_pg: first delete the workers the claimer condemned (see duro._lease), each only if
# its heartbeat is still the stamp the claimer saw; then take unfinished runs of the claimer's
# workflows that have no owner, or whose owner has no row (condemned just now or before), oldest
# first through duro_runs_active, skipping rows another worker is claiming; returns each run with
# its status before the claim. The statement's other subqueries see the rows as they were before
# its DELETE, hence ``owner IN dead``. {clock}: the decisions' clock (for updated_at, which only a
# run started by the claim changes).
_CLAIM_PG_SQL = (
    "WITH clock AS (SELECT {clock} AS now), "
    "dead AS (DELETE FROM duro_workers USING unnest(CAST(%(dead)s AS text[]), CAST(%(stamps)s AS bigint[])) "
    "AS d(id, stamp) WHERE duro_workers.id = d.id AND duro_workers.heartbeat_at = d.stamp "
    "RETURNING duro_workers.id) "
    "UPDATE duro_runs SET owner = %(owner)s, "
    "updated_at = CASE WHEN duro_runs.status = 'pending' THEN (SELECT now FROM clock) "
    "ELSE duro_runs.updated_at END, "
    "status = CASE WHEN duro_runs.status = 'pending' THEN 'running' ELSE duro_runs.status END "
    "FROM (SELECT id, status AS was FROM duro_runs "
    f"WHERE namespace = %(namespace)s AND duro_runs.status IN {ACTIVE_SQL} "
    "AND workflow = ANY(CAST(%(workflows)s AS text[])) "
    "AND (owner IS NULL OR owner IN (SELECT id FROM dead) OR owner NOT IN (SELECT id FROM duro_workers)) "
    "ORDER BY created_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS taken "
    f"WHERE duro_runs.id = taken.id RETURNING {', '.join('duro_runs.' + c for c in _RUN_COLUMNS)}, taken.was"
)
# a heartbeat: the stamp moves forward by at least 1 (two beats in one millisecond, or a clock that
# stepped back, still change it: a watcher sees only whether it changed)
_BEAT_SQL = (
    "UPDATE duro_workers SET heartbeat_at = {greatest}(heartbeat_at + 1, :now) WHERE id = :id "
    "RETURNING namespace"
)
_STAMPS_SQL = "SELECT id, heartbeat_at FROM duro_workers WHERE namespace = :namespace"


def parse_database_url(url: str | URL) -> tuple[URL, dict[str, Any]]:
    """Validate and normalise a database URL; returns it and duro's own options taken out of it
    (SQLite: ``synchronous``, and ``busy_timeout`` in milliseconds)."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError:
        raise DuroError(f"database URL {str(url)!r} is not a valid URL: {_URL_HINT}") from None
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
        require("psycopg", "postgres", "PostgreSQL")
    elif backend != "sqlite":
        raise DuroError(
            f"database URL {parsed.render_as_string(hide_password=True)!r} names backend "
            f"{backend!r}, which duro does not support: {_URL_HINT}"
        )
    options: dict[str, Any] = {}
    if "synchronous" in parsed.query:
        if backend != "sqlite":
            raise DuroError("database URL option 'synchronous' applies to SQLite only; remove it")
        value = str(parsed.query["synchronous"]).upper()
        if value not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise DuroError(
                f"database URL option synchronous={value!r} is not one of OFF, NORMAL, FULL, EXTRA"
            )
        options["synchronous"] = value
        parsed = parsed.difference_update_query(["synchronous"])
    if "busy_timeout" in parsed.query:
        if backend != "sqlite":
            raise DuroError("database URL option 'busy_timeout' applies to SQLite only; remove it")
        options["busy_timeout"] = _busy_timeout_ms(parsed.query["busy_timeout"])
        parsed = parsed.difference_update_query(["busy_timeout"])
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, ""):
        raise DuroError(
            f"database URL {str(url)!r} names no SQLite file: {_URL_HINT} "
            f"(an in-memory database cannot be shared by a worker and its clients)"
        )
    return parsed, options


DEFAULT_BUSY_TIMEOUT_MS = 30_000
_MAX_BUSY_TIMEOUT_MS = 3_600_000
_BUSY_TIMEOUT_HINT = (
    "use e.g. busy_timeout=2s, busy_timeout=500ms or whole milliseconds (busy_timeout=2000), "
    "at most 1h; leave it out for the default, 30s"
)


def _busy_timeout_ms(raw: str | Sequence[str]) -> int:
    """The ``busy_timeout`` URL option: how long a SQLite statement waits for another process's
    write lock before it fails with "database is locked" (and the call with StoreUnavailable)."""
    if not isinstance(raw, str):
        raise DuroError(
            f"database URL option busy_timeout is given {len(raw)} times; give it once: {_BUSY_TIMEOUT_HINT}"
        )
    text = raw.strip()
    try:
        ms = int(text) if text.isascii() and text.isdigit() else to_ms(text, "busy_timeout")
    except DuroError:
        raise DuroError(
            f"database URL option busy_timeout={raw!r} is not a duration: {_BUSY_TIMEOUT_HINT}"
        ) from None
    if ms > _MAX_BUSY_TIMEOUT_MS:
        raise DuroError(f"database URL option busy_timeout={raw!r} is too long: {_BUSY_TIMEOUT_HINT}")
    return ms


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


def _sqlite_busy(err: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (and their extended codes): another connection holds the lock."""
    name = getattr(err, "sqlite_errorname", None) or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    text = str(err).lower()
    return any(
        words in text for words in ("database is locked", "database is busy", "database table is locked")
    )


class _CallState(threading.local):
    nowait = False  # inside without_waiting
    committed = False  # ... and a transaction of that call has committed


class _RunExists(Exception):
    """A start's insert found its run id taken by another process's start (see insert_run)."""


def _same_workflow(existing: RunRecord, new: NewRun) -> RunRecord:
    """The run a start's id names, which is that start's run only if it is of the same workflow."""
    if existing.workflow != new.workflow:
        raise RunIdConflictError(new.id, new.workflow, existing.workflow)
    return existing


def _new_run_values(new: NewRun) -> dict[str, Any]:
    return {
        "id": new.id,
        "namespace": new.namespace,
        "workflow": new.workflow,
        "version": new.version,
        "status": "running" if new.owner else "pending",
        "input": new.input,
        "output": None,
        "error": None,
        "tags": json.dumps(new.tags),
        "concurrency_key": new.concurrency_key,
        "parent_id": new.parent_id,
        "parent_seq": new.parent_seq,
        "owner": new.owner,
        "wake_at": None,
        "created_at": new.created_at,
        "updated_at": new.created_at,
        "ended_at": None,
    }


def _tuple_to_run(row: Any) -> RunRecord:
    values = dict(zip(_RUN_COLUMNS, row, strict=True))
    values["tags"] = json.loads(values["tags"] or "[]")
    return RunRecord(**values)


def _tuple_to_step(row: Any) -> StepRecord:
    return StepRecord(*row)


def _row_to_run(row: Any) -> RunRecord:
    m = row._mapping
    return RunRecord(
        id=m["id"],
        namespace=m["namespace"],
        workflow=m["workflow"],
        version=m["version"],
        status=m["status"],
        input=m["input"],
        output=m["output"],
        error=m["error"],
        tags=json.loads(m["tags"] or "[]"),
        concurrency_key=m["concurrency_key"],
        parent_id=m["parent_id"],
        parent_seq=m["parent_seq"],
        owner=m["owner"],
        wake_at=m["wake_at"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        ended_at=m["ended_at"],
    )


def _step_values(run_id: str, step: StepRecord) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "seq": step.seq,
        "kind": step.kind,
        "name": step.name,
        "status": step.status,
        "started_at": step.started_at,
        "ended_at": step.ended_at,
        "wake_at": step.wake_at,
        "result": step.result,
        "error": step.error,
        "detail": step.detail,
    }


_OPTIONAL_STEP_COLUMNS = _STEP_COLUMNS[6:]  # ended_at .. detail: NULL in most records


def _step_rows(steps: Iterable[tuple[str, StepRecord]]) -> dict[int, list[tuple[Any, ...]]]:
    """Step records as positional rows grouped by which optional columns they fill (a bit each):
    binding a parameter costs about as much as SQLite's whole insert, and most are NULL."""
    rows: dict[int, list[tuple[Any, ...]]] = {}
    for run_id, step in steps:
        ended, wake, result, error, detail = step.ended_at, step.wake_at, step.result, step.error, step.detail
        shape = (
            (ended is not None)
            | (wake is not None) << 1
            | (result is not None) << 2
            | (error is not None) << 3
            | (detail is not None) << 4
        )
        row = (
            run_id,
            step.seq,
            step.kind,
            step.name,
            step.status,
            step.started_at,
            ended,
            wake,
            result,
            error,
            detail,
        )
        if shape in rows:
            rows[shape].append(_PICK_COLUMNS[shape](row))
        else:
            rows[shape] = [_PICK_COLUMNS[shape](row)]
    return rows


# per shape, the columns of a full row that shape keeps: the six required ones and its optional ones
_PICK_COLUMNS = [
    operator.itemgetter(*range(6), *(6 + bit for bit in range(5) if shape >> bit & 1)) for shape in range(32)
]


@cache
def _upsert_steps_sql(shape: int) -> str:
    """The positional upsert of step rows of one ``shape`` (see ``_step_rows``): the optional columns
    it leaves out are set NULL when the row exists, as a full upsert would."""
    present = [c for bit, c in enumerate(_OPTIONAL_STEP_COLUMNS) if shape >> bit & 1]
    columns = [*_STEP_COLUMNS[:6], *present]
    updates = [f"{c} = excluded.{c}" for c in columns[2:]]
    updates += [f"{c} = NULL" for c in _OPTIONAL_STEP_COLUMNS if c not in present]
    return (
        f"INSERT INTO duro_steps ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
        f"ON CONFLICT (run_id, seq) DO UPDATE SET {', '.join(updates)}"
    )


class SqlStore(SlotsStoreMixin):
    """The store on SQLite or PostgreSQL through SQLAlchemy Core over the SQLModel tables."""

    # the methods that only read: on SQLite the engine runs them apart from the writes, which may
    # wait seconds for a write lock another process holds (WAL lets reads go on meanwhile)
    reads = frozenset(
        {
            "schema_version",
            "count_active",
            "get_run",
            "list_runs",
            "run_statuses",
            "get_steps",
            "signalled",
            "list_schedules",
            "due_schedules",
            "next_schedule_due",
            "list_workers",
            "local_workers",
            "next_slot_due",
            "slot_states",
            "get_slot",
            "limit_states",
            "limit_slots",
        }
    )

    def __init__(
        self,
        url: str | URL = DEFAULT_SQLITE_URL,
        *,
        pool_size: int = 10,
        decisions_clock: str = "database",
        idle_in_transaction_timeout: Duration | None = "5s",
    ) -> None:
        """``decisions_clock``: on PostgreSQL, ``"database"`` (the default) judges leases and slot
        expiries by the database server's clock, whatever the workers' clocks say; ``"caller"``
        trusts the ``now`` each call passes (tests that drive time themselves). SQLite always
        trusts the caller: one machine, one clock.

        ``idle_in_transaction_timeout`` (PostgreSQL): the server ends a session of this store that
        sits inside a transaction waiting for its client this long. duro's transactions never wait
        for anything but their own statements, so only a frozen process (stopped, a paused VM) hits
        it, and its locks (a limit's row, say) go back to everyone else instead of blocking every
        slot decision until it thaws; the frozen process's call fails as a lost connection and is
        made again. ``None`` leaves the server's setting."""
        if decisions_clock not in ("database", "caller"):
            raise DuroError(f"decisions_clock {decisions_clock!r} is not 'database' or 'caller'")
        idle_ms = (
            None
            if idle_in_transaction_timeout is None
            else to_ms(idle_in_transaction_timeout, "idle_in_transaction_timeout")
        )
        self.url, options = parse_database_url(url)
        self.dialect = self.url.get_backend_name()
        self._database_clock = decisions_clock == "database" and self.dialect == "postgresql"
        try:
            if self.dialect == "sqlite":
                self._engine = self._sqlite_engine(
                    options.get("synchronous", "NORMAL"), options.get("busy_timeout", DEFAULT_BUSY_TIMEOUT_MS)
                )
            else:
                self._engine = self._server_engine(pool_size, idle_ms)
        except (ArgumentError, NoSuchModuleError, TypeError) as err:
            raise DuroError(f"database URL {self.safe_url!r} cannot be used: {err}; {_URL_HINT}") from None
        # what apply_batch takes: on SQLite (one writer at a time anyway) slot requests and releases
        # too; on PostgreSQL they keep transactions of their own, so that a batch never holds the
        # locks of several limits at once (see _slots_sql)
        self.batches: frozenset[type[Command]] = frozenset(
            {RecordStep, FinishRun} | ({RequestSlot, ReleaseSlot} if self.dialect == "sqlite" else set())
        )
        self.notifies = self.dialect == "postgresql"  # LISTEN/NOTIFY; SQLite's workers poll
        self._schema_ready = False
        self._writer: Connection | None = None
        self._writer_lock = threading.RLock()
        self._local = _CallState()  # per thread: inside without_waiting, and its connections there
        self._nowait_connections: list[Connection] = []
        self._sql = {name: for_dialect(sql, self.dialect) for name, sql in {**_HOT_SQL, **SLOT_SQL}.items()}
        if self.dialect == "postgresql":
            # a start's insert that finds its id taken does nothing (see _insert_run_pipelined)
            self._sql["insert_run_new"] = self._sql["insert_run"] + " ON CONFLICT (id) DO NOTHING"
            self._sql["insert_run_announced"] = (  # and a run to claim is announced if inserted
                f"WITH ins AS ({self._sql['insert_run_new']} RETURNING 1) "
                f"SELECT pg_notify('{NOTIFY_CHANNEL}', %(notice)s) FROM ins"
            )
            self._sql["limit_lock"] += " FOR UPDATE"
            if self._database_clock:
                self._sql["limit_lock"] = self._sql["limit_lock"].replace(
                    "CAST(%(now)s AS BIGINT)", _DB_NOW_SQL.removeprefix("SELECT ")
                )
            self._sql["finish_run"] += " RETURNING parent_id"  # a child's end is announced (see _finish)
            clock = _DB_NOW_SQL.removeprefix("SELECT ") if self._database_clock else "CAST(%(now)s AS BIGINT)"
            self._sql["claim"] = _CLAIM_PG_SQL.replace("{clock}", clock)
        self._sql["beat"] = for_dialect(
            _BEAT_SQL.replace("{greatest}", "GREATEST" if self.dialect == "postgresql" else "max"),
            self.dialect,
        )
        self._sql["stamps"] = for_dialect(_STAMPS_SQL, self.dialect)

    @staticmethod
    def is_transient(err: BaseException) -> bool:
        """An error worth the same call again: the server unreachable or restarting, or a transaction
        the server rolled back (deadlock, serialization failure), or a session the server ended
        while its process was frozen inside a transaction (``idle_in_transaction_timeout``).

        SQLite's errors never are: a locked file has already been waited for (``busy_timeout``), and
        waiting again would make that option meaningless (see :meth:`is_unavailable`)."""
        if isinstance(err.orig if isinstance(err, sa.exc.DBAPIError) else err, sqlite3.Error):
            return False
        if isinstance(err, sa.exc.DBAPIError):
            if isinstance(err, sa.exc.OperationalError) or err.connection_invalidated:
                return True
            err = err.orig
        # the hot statements run on the driver's connection (``raw_execute``): psycopg's own errors
        return isinstance(err, (psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout))

    @staticmethod
    def is_unavailable(err: BaseException) -> bool:
        """An error that means the store did not answer in time, and changed nothing: SQLite's file
        locked by another process past ``busy_timeout`` ("database is locked"), or PostgreSQL
        unreachable (what :meth:`is_transient` retries; once retrying gives up, this). A refused
        statement, a missing table or a bug is not."""
        cause = err.orig if isinstance(err, sa.exc.DBAPIError) else err
        if isinstance(cause, sqlite3.Error):
            return _sqlite_busy(cause)
        return SqlStore.is_transient(err)

    @property
    def safe_url(self) -> str:
        return self.url.render_as_string(hide_password=True)

    def _server_engine(self, pool_size: int, idle_ms: int | None) -> sa.Engine:
        engine = sa.create_engine(self.url, pool_size=pool_size, max_overflow=pool_size)
        if idle_ms is not None and self.dialect == "postgresql":

            @sa.event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute(f"SET idle_in_transaction_session_timeout = {int(idle_ms)}")
                cur.close()
                dbapi_conn.commit()

        return engine

    def _sqlite_engine(self, synchronous: str, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> sa.Engine:
        path = self.url.database
        if path and path != ":memory:" and not path.startswith("file:"):
            directory = os.path.dirname(os.path.abspath(path))
            os.makedirs(directory, exist_ok=True)
        options: dict[str, Any] = {}
        if self.url.query.get("mode") == "memory":  # a shared in-memory database (the harness's): each
            options["poolclass"] = sa.pool.QueuePool  # connection of the pool is one more to it
        # how long a statement waits for another process's write lock (both sqlite3's own wait and
        # the PRAGMA say the same), then fails "database is locked" (see is_unavailable)
        connect_args = {"check_same_thread": False, "timeout": busy_timeout_ms / 1000}
        engine = sa.create_engine(self.url, connect_args=connect_args, **options)

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # duro issues BEGIN itself (see _on_begin)
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            _enable_wal(cur)
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            driver = conn.connection.driver_connection
            if driver.in_transaction:  # type: ignore[union-attr]
                return  # a write transaction _write began on the driver: SQLAlchemy joins it
            statement = "BEGIN IMMEDIATE" if conn.get_execution_options().get("duro_write") else "BEGIN"
            driver.execute(statement)  # type: ignore[union-attr]

        return engine

    # -- transactions ----------------------------------------------------------------------------

    # -- calls that must not wait (SQLite, on the event loop) --------------------------------------

    def without_waiting(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a method of this store), here and now, if it needs no lock that another
        process or thread holds; otherwise :class:`WouldWait`, having changed nothing. SQLite only:
        its statements take microseconds unless they wait for a lock, so the engine makes a call
        this way first, on the event loop, and in a thread only when it would wait. Its connections
        here have a busy timeout of 0 and it takes this process's write lock without blocking, so a
        file that another process holds locked answers at once. Once a transaction of the call has
        committed, the rest of the call may wait (nothing done twice)."""
        local = self._local
        if self.dialect != "sqlite" or not self._schema_ready or local.nowait:
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
            conn = self._engine.connect()
            if kind == "writer":
                conn.execution_options(duro_write=True)
            conn.connection.driver_connection.execute("PRAGMA busy_timeout=0")  # type: ignore[union-attr]
            setattr(local, kind, conn)
            with self._writer_lock:
                self._nowait_connections.append(conn)
        return conn

    # -- transactions ----------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A transaction that decides: on SQLite it holds the write lock from its first statement.

        SQLite has one writer at a time anyway, so this process keeps one connection for its writes
        (no pool checkout per transaction), and one more for its writes that must not wait (see
        ``without_waiting``); PostgreSQL writes take pooled connections."""
        self.create_schema()
        if self.dialect != "sqlite":
            with self._engine.connect() as conn:
                with conn.begin():
                    yield conn
            return
        waits = self._waits()
        if not self._writer_lock.acquire(blocking=waits):
            raise WouldWait  # this process's other writer is inside a transaction
        try:
            if not waits:
                writer = self._nowait_connection("writer")
            else:
                if self._writer is None:
                    self._writer = self._engine.connect()
                    self._writer.execution_options(duro_write=True)
                writer = self._writer
            # The transaction is the driver's own (SQLAlchemy's bookkeeping of begin and commit cost
            # about a tenth of a start): a Core statement inside joins it (see _on_begin), and then
            # SQLAlchemy's commit or rollback ends it.
            driver = writer.connection.driver_connection
            try:
                driver.execute("BEGIN IMMEDIATE")  # type: ignore[union-attr]
            except sqlite3.OperationalError as err:
                if not waits and _sqlite_busy(err):
                    raise WouldWait from None  # another process holds the file's write lock
                raise
            try:
                yield writer
                if writer.in_transaction():
                    writer.commit()
                else:
                    driver.commit()  # type: ignore[union-attr]
            except BaseException:
                if writer.in_transaction():
                    writer.rollback()
                if driver.in_transaction:  # type: ignore[union-attr]
                    driver.rollback()  # type: ignore[union-attr]
                raise
            if not waits:
                self._local.committed = True
        finally:
            self._writer_lock.release()

    @contextmanager
    def _read(self, transaction: bool = True) -> Iterator[Connection]:
        """A read; ``transaction=False`` for one statement, which needs none of its own (SQLite
        autocommit; psycopg's implicit one is rolled back when the pool takes the connection back)."""
        self.create_schema()
        if self._waits():
            with self._engine.connect() as conn, conn.begin() if transaction else nullcontext():
                yield conn
            return
        conn = self._nowait_connection("reader")
        try:
            with conn.begin() if transaction else nullcontext():
                yield conn
        except (sa.exc.OperationalError, sqlite3.OperationalError) as err:
            if _sqlite_busy(getattr(err, "orig", None) or err):
                raise WouldWait from None  # a read in WAL mode waits only in rare moments (a recovery)
            raise
        finally:
            if conn.in_transaction():  # this connection stays: it must never keep a snapshot open
                conn.rollback()

    def _single_read(self) -> AbstractContextManager[Connection]:
        return self._read(transaction=False)

    def _x(self, conn: Connection, name: str, params: Any) -> Any:
        """Run fixed statement ``name`` on the driver's connection, inside ``conn``'s transaction."""
        return raw_execute(conn, self._sql[name], params)

    def _lock_key(self, conn: Connection, key: str) -> None:
        if self.dialect == "postgresql":
            raw_execute(conn, _LOCK_KEY_SQL, {"key": key})

    # -- schema ----------------------------------------------------------------------------------

    # -- one clock and cross-process wakeups (PostgreSQL) ----------------------------------------

    def _db_now(self, conn: Connection, now: int) -> int:
        """The instant decisions are judged by. On PostgreSQL the database server's clock, so that
        workers whose clocks disagree never take a slot back early or a lease away too soon; on
        SQLite (one machine) the caller's ``now``."""
        if not self._database_clock:
            return now
        return int(raw_execute(conn, _DB_NOW_SQL, {}).fetchone()[0])

    def _notify(self, conn: Connection, *messages: list[Any]) -> None:
        """Tell other processes' workers what this transaction changed (PostgreSQL ``NOTIFY``: sent
        at commit, dropped on rollback). Each message is a JSON list: ``["run", namespace]`` (a run
        to claim), ``["done", run_id, status]``, ``["signal", run_id, name]``, ``["slot", slot_id,
        due_at]``, ``["sched", namespace]``, ``["limits"]``. Losing one costs only latency: workers
        still poll."""
        if self.dialect == "postgresql" and messages:
            raw_execute(conn, _NOTIFY_SQL, {"payloads": [json.dumps(m) for m in messages]})

    def listen(self, deliver: Callable[[list[Any]], None], stopping: threading.Event) -> None:
        """Block, handing each notification (a decoded JSON list) to ``deliver``, until ``stopping``
        is set. Reconnects after errors (a restarted server, say) and then delivers
        ``["reconnected"]``: whatever was sent meanwhile was lost, so listeners look again.
        PostgreSQL only; returns at once elsewhere."""
        if self.dialect != "postgresql":
            return
        dsn = self.url.set(drivername="postgresql").render_as_string(hide_password=False)
        first = True
        while not stopping.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    if not first:
                        deliver(["reconnected"])
                    first = False
                    while not stopping.is_set():
                        for note in conn.notifies(timeout=0.1):
                            try:
                                message = json.loads(note.payload)
                            except ValueError:
                                continue
                            if isinstance(message, list) and message:
                                deliver(message)
            except psycopg.Error:
                stopping.wait(0.5)

    def create_schema(self) -> None:
        if self._schema_ready:
            return
        try:
            with self._engine.connect() as conn:
                conn.execution_options(duro_write=True)
                with conn.begin():
                    self._lock_key(conn, "duro:schema")
                    metadata.create_all(conn)
                    found = conn.execute(
                        sa.select(meta.c.value).where(meta.c.key == "schema_version")
                    ).scalar()
                    if found is None:
                        conn.execute(meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
                    elif int(found) < SCHEMA_VERSION:
                        self._migrate(conn, int(found))
                    elif int(found) > SCHEMA_VERSION:
                        raise DuroError(
                            f"the database at {self.safe_url} has duro schema version {found}, newer than this "
                            f"duro's {SCHEMA_VERSION}: upgrade duro before using this database"
                        )
        except sa.exc.OperationalError as err:
            raise DuroError(
                f"cannot open the database at {self.safe_url}: {err.orig}; check the URL, "
                f"that the server runs and that the file's folder is writable"
            ) from None
        self._schema_ready = True

    def _migrate(self, conn: Connection, found: int) -> None:
        """Bring a database from schema version ``found`` up to ``SCHEMA_VERSION``, step by step, in
        the schema transaction. ``MIGRATIONS[n]`` upgrades version n to n + 1."""
        for version in range(found, SCHEMA_VERSION):
            step = MIGRATIONS.get(version)
            if step is None:
                raise DuroError(
                    f"the database at {self.safe_url} has duro schema version {found} and this "
                    f"duro has no migration from version {version}; use the duro that created it"
                )
            step(conn, self.dialect)
        conn.execute(meta.update().where(meta.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))

    def schema_version(self) -> int:
        with self._read() as conn:
            return int(
                conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).scalar_one()
            )

    def close(self) -> None:
        with self._writer_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            for conn in self._nowait_connections:
                conn.close()
            self._nowait_connections = []
            self._local = _CallState()
        self._engine.dispose()

    # -- runs ------------------------------------------------------------------------------------

    def _count_active(
        self, conn: Connection, key: str, statuses: Sequence[str], namespace: str | None
    ) -> int:
        """One indexed count on (concurrency_key, status): its cost follows the key's active runs."""
        return int(self._send_count(conn, key, statuses, namespace).fetchone()[0])

    def _send_count(self, conn: Connection, key: str, statuses: Sequence[str], namespace: str | None) -> Any:
        """``_count_active``'s statement, its cursor not read yet (in a pipeline, say)."""
        params = {"key": key} if namespace is None else {"key": key, "namespace": namespace}
        return raw_execute(conn, self._count_sql(tuple(statuses), namespace is not None), params)

    @lru_cache(maxsize=64)  # noqa: B019 - a handful of status sets per store, for its lifetime
    def _count_sql(self, statuses: tuple[str, ...], scoped: bool) -> str:
        known = [
            s
            for s in statuses
            if s in ("pending", "running", "suspended", "blocked", "completed", "failed", "cancelled")
        ]
        listed = ", ".join(f"'{s}'" for s in known) or "NULL"
        sql = f"SELECT count(*) FROM duro_runs WHERE concurrency_key = :key AND status IN ({listed})"
        if scoped:
            sql += " AND namespace = :namespace"
        return for_dialect(sql, self.dialect)

    def count_active(self, key: str, statuses: Sequence[str], namespace: str | None) -> int:
        with self._read() as conn:
            return self._count_active(conn, key, statuses, namespace)

    def insert_run(
        self,
        new: NewRun,
        quota: QuotaCheck | None,
        parent: OwnStep | None = None,
    ) -> tuple[RunRecord, bool]:
        try:
            if self.dialect == "postgresql" and parent is None:
                return self._insert_run_pipelined(new, quota)
            return self._insert_run(new, quota, parent)
        except (IntegrityError, UniqueViolation, _RunExists):
            # The id is taken: by an earlier start (on PostgreSQL without a quota the insert is the
            # existence check), or by another process's start between our check and our insert.
            existing = self.get_run(new.id)
            if existing is None:
                raise
            return _same_workflow(existing, new), False

    def _insert_run(
        self, new: NewRun, quota: QuotaCheck | None, parent: OwnStep | None
    ) -> tuple[RunRecord, bool]:
        with self._write() as conn:
            if quota is not None:
                self._lock_key(conn, f"duro:quota:{quota.key}")
            row = self._x(conn, "select_run", {"id": new.id}).fetchone()
            if row is not None:
                existing = _same_workflow(
                    _tuple_to_run(row), new
                )  # or nothing is written, a parent's step neither
                if parent is not None:
                    self._write_step(
                        conn, parent.run_id, parent.owner, parent.step, None, None, new.created_at
                    )
                return existing, False
            if quota is not None:
                self._admit(quota, self._count_active(conn, quota.key, quota.statuses, quota.namespace))
            values = _new_run_values(new)
            self._x(conn, "insert_run", values)
            if new.owner is None:
                self._notify(conn, ["run", new.namespace])
            if parent is not None and not self._write_step(
                conn,
                parent.run_id,
                parent.owner,
                parent.step,
                "blocked" if parent.step.status == "waiting" else None,
                None,
                new.created_at,
            ):
                conn.rollback()
                raise Fenced(parent.run_id)
            return RunRecord(**{**values, "tags": list(new.tags)}), True

    def _insert_run_pipelined(self, new: NewRun, quota: QuotaCheck | None) -> tuple[RunRecord, bool]:
        """PostgreSQL, a start with no parent step, in two or three round trips instead of six: the
        reads a quota needs (the key's lock, the existing run, the count) in one pipeline; then one
        statement inserts the run and, if it did, announces it; then the commit. Without a quota
        the insert is also the existence check: it does nothing on an id already taken (by an
        earlier start, or one of another process past our check: no lock covers a run id), and
        the start returns that run."""
        with self._write() as conn:
            if quota is not None:
                with self._pipeline(conn):
                    self._lock_key(conn, f"duro:quota:{quota.key}")
                    found = self._x(conn, "select_run", {"id": new.id})
                    counted = self._send_count(conn, quota.key, quota.statuses, quota.namespace)
                row = found.fetchone()
                if row is not None:
                    return _same_workflow(_tuple_to_run(row), new), False
                self._admit(quota, int(counted.fetchone()[0]))
            values = _new_run_values(new)
            if new.owner is None:
                inserted = raw_execute(
                    conn,
                    self._sql["insert_run_announced"],
                    {**values, "notice": json.dumps(["run", new.namespace])},
                )
            else:
                inserted = raw_execute(conn, self._sql["insert_run_new"], values)
            if inserted.rowcount != 1:
                raise _RunExists(new.id)
            return RunRecord(**{**values, "tags": list(new.tags)}), True

    @staticmethod
    def _admit(quota: QuotaCheck, active: int) -> None:
        if not admit(quota.key, quota.limit, active).admitted:
            raise ConcurrencyLimitError(quota.workflow, quota.key, quota.limit, active)

    def get_run(self, run_id: str, namespace: str | None = None) -> RunRecord | None:
        with self._single_read() as conn:
            row = self._x(conn, "select_run", {"id": run_id}).fetchone()
        if row is None:
            return None
        record = _tuple_to_run(row)
        return record if namespace is None or record.namespace == namespace else None

    def list_runs(
        self,
        namespace: str | None,
        workflow: str | None,
        statuses: Sequence[str] | None,
        tag: str | None,
        limit: int,
        before: tuple[int, str] | None = None,
    ) -> list[RunRecord]:
        query = sa.select(runs)
        if namespace is not None:
            query = query.where(runs.c.namespace == namespace)
        if workflow is not None:
            query = query.where(runs.c.workflow == workflow)
        if statuses:
            query = query.where(runs.c.status.in_(list(statuses)))
        if tag is not None:
            if tag.startswith("concurrency:"):
                query = query.where(runs.c.concurrency_key == tag.removeprefix("concurrency:"))
            else:
                query = query.where(runs.c.tags.contains(json.dumps(tag)))
        if before is not None:
            query = query.where(sa.tuple_(runs.c.created_at, runs.c.id) < sa.tuple_(*before))
        query = query.order_by(runs.c.created_at.desc(), runs.c.id.desc()).limit(limit)
        with self._read() as conn:
            return [_row_to_run(r) for r in conn.execute(query)]

    def run_statuses(self, run_ids: Iterable[str]) -> dict[str, str]:
        ids = list(run_ids)
        if not ids:
            return {}
        with self._read() as conn:
            rows = conn.execute(sa.select(runs.c.id, runs.c.status).where(runs.c.id.in_(ids)))
            return {r.id: r.status for r in rows}

    # -- execution -------------------------------------------------------------------------------

    def get_steps(self, run_id: str) -> list[StepRecord]:
        with self._single_read() as conn:
            rows = self._x(conn, "select_steps", {"run_id": run_id})
            return [_tuple_to_step(r) for r in rows]

    def _send_fence(
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
        params: dict[str, Any] = {"id": run_id, "owner": owner, "now": now}
        if status is None:
            return self._x(conn, "fence", params)
        params.update(status=status, wake_at=wake_at)
        return self._x(conn, "fence_status", params)

    def _fence(
        self,
        conn: Connection,
        run_id: str,
        owner: str | None,
        now: int,
        status: str | None = None,
        wake_at: int | None = None,
    ) -> bool:
        return self._send_fence(conn, run_id, owner, now, status, wake_at).rowcount == 1  # type: ignore[no-any-return]

    def _write_step(
        self,
        conn: Connection,
        run_id: str,
        owner: str | None,
        step: StepRecord | None,
        run_status: str | None,
        wake_at: int | None,
        now: int,
    ) -> bool:
        if not self._fence(conn, run_id, owner, now, run_status, wake_at):
            return False
        if step is not None:
            self._x(conn, "upsert_step", _step_values(run_id, step))
        return True

    def _send_step(
        self,
        conn: Connection,
        run_id: str,
        owner: str | None,
        step: StepRecord | None,
        now: int,
        run_status: str | None = None,
        wake_at: int | None = None,
    ) -> Any:
        """``_write_step`` without waiting for the fence's answer: the caller checks the returned
        cursor's ``rowcount`` (after its pipeline syncs) and rolls back if it is not 1."""
        fence = self._send_fence(conn, run_id, owner, now, run_status, wake_at)
        if step is not None:
            self._x(conn, "upsert_step", _step_values(run_id, step))
        return fence

    def _pipeline(self, conn: Connection) -> AbstractContextManager[Any]:
        """Statements whose answers can wait, sent together: a psycopg pipeline on PostgreSQL (one
        round trip at its end), nothing special on SQLite (in process, no round trips)."""
        if self.dialect != "postgresql":
            return nullcontext()
        return conn.connection.driver_connection.pipeline()  # type: ignore[union-attr,no-any-return]

    def apply(self, command: Command) -> Any:
        """Apply one command in a transaction of its own (see ``Store.apply``)."""
        with self._write() as conn:
            return self._dispatch(conn, command)

    def _dispatch(self, conn: Connection, command: Command) -> Any:
        match command:
            case RecordStep(run_id, owner, step, run_status, wake_at, now):
                return self._write_step(conn, run_id, owner, step, run_status, wake_at, now)
            case FinishRun(run_id, owner, status, output, error, now):
                return self._finish(conn, run_id, owner, status, output, error, now)
            case TakeSignal():
                return self._take_signal(conn, command)
            case RequestSlot() | ConfirmSlot() | GiveUpSlot() | ReleaseSlot():
                return self._slot_command(conn, command)

    def apply_batch(self, commands: Sequence[Command]) -> list[Any]:
        """Apply commands of many runs (``RecordStep``, ``FinishRun``; on SQLite also ``RequestSlot``
        and ``ReleaseSlot``) in one transaction.

        Each keeps its own fence and result: a fenced write changes nothing and does not disturb the
        others (on SQLite its fence is read first; on PostgreSQL see ``_apply_pipelined``).
        """
        if self.dialect == "postgresql":
            return self._apply_pipelined(commands)
        if all(type(command) is RecordStep for command in commands):
            return self._apply_steps_sqlite(commands)  # type: ignore[arg-type]
        return self._apply_each(commands)

    def _apply_pipelined(self, commands: Sequence[Command]) -> list[Any]:
        """PostgreSQL: every statement of the batch in one pipeline, one round trip in all instead
        of one per statement. A step's upsert is sent without waiting for its fence, so a fenced
        write (a worker that lost runs: rare) rolls the whole batch back, and the batch is applied
        again statement by statement, where a fenced write changes nothing."""
        try:
            return self._send_batch(commands)
        except Fenced:
            return self._apply_each(commands)

    def _send_batch(self, commands: Sequence[Command]) -> list[Any]:
        with self._write() as conn:
            sent: list[tuple[Any, tuple[str, str] | None]] = []  # (fence's cursor, a finish's run and status)
            with self._pipeline(conn):
                for command in commands:
                    match command:
                        case RecordStep(run_id, owner, step, status, wake_at, now):
                            sent.append(
                                (self._send_step(conn, run_id, owner, step, now, status, wake_at), None)
                            )
                        case FinishRun(run_id, owner, status, output, error, now):
                            finish = self._send_finish(conn, run_id, owner, status, output, error, now)
                            sent.append((finish, (run_id, status)))
                        case _:
                            raise TypeError(f"{type(command).__name__} is not batched on PostgreSQL")
            if any(cursor.rowcount != 1 for cursor, _ in sent):
                raise Fenced("a write of the batch")  # rolled back; each write is made again alone
            # a child's end is announced to its parent (see _finish)
            self._notify(
                conn,
                *(
                    ["done", *end]
                    for cursor, end in sent
                    if end is not None and cursor.fetchone()[0] is not None
                ),
            )
        return [True] * len(commands)

    def _apply_each(self, commands: Sequence[Command]) -> list[Any]:
        with self._write() as conn:
            return [self._dispatch(conn, command) for command in commands]

    def _apply_steps_sqlite(self, commands: Sequence[RecordStep]) -> list[Any]:
        """Step records of many runs: one ownership read for the batch, then one ``executemany``
        for the runs and one for the steps. Under ``BEGIN IMMEDIATE`` nothing can change between the
        read and the writes. A run's last record decides its status and timer; a run whose status
        stays the same is updated without touching the status indexes."""
        final: dict[str, tuple[str | None, str | None, int | None, int]] = {}
        steps: dict[tuple[str, int], StepRecord] = {}  # a step written twice in the batch: its last record
        for command in commands:
            run_id, owner, step, status, wake_at, now = (
                command.run_id,
                command.owner,
                command.step,
                command.run_status,
                command.wake_at,
                command.now,
            )
            if status is None and (previous := final.get(run_id)) is not None:
                status, wake_at = previous[1], previous[2]
            final[run_id] = (owner, status, wake_at, now)
            if step is not None:
                steps[run_id, step.seq] = step
        ids = list(final)
        with self._write() as conn:
            raw = conn.connection.driver_connection
            stored: dict[str, str] = {}  # run id -> status, of the runs the writer still owns
            for chunk in range(0, len(ids), 500):
                part = ids[chunk : chunk + 500]
                marks = ", ".join("?" * len(part))
                for run_id, owner, status in raw.execute(  # type: ignore[union-attr]
                    f"SELECT id, owner, status FROM duro_runs WHERE id IN ({marks}) "
                    f"AND status IN {ACTIVE_SQL}",
                    part,
                ):
                    if final[run_id][0] == owner:
                        stored[run_id] = status
            moved, timed, touched = [], [], []
            for run_id, (_, status, wake_at, now) in final.items():
                was = stored.get(run_id)
                if was is None:
                    continue
                if status is None:
                    touched.append((now, run_id))
                elif status == was:
                    timed.append((now, wake_at, run_id))
                else:
                    moved.append((now, status, wake_at, run_id))
            if moved:
                raw.executemany(  # type: ignore[union-attr]
                    "UPDATE duro_runs SET updated_at = ?, status = ?, wake_at = ? WHERE id = ?", moved
                )
            if timed:
                raw.executemany("UPDATE duro_runs SET updated_at = ?, wake_at = ? WHERE id = ?", timed)  # type: ignore[union-attr]
            if touched:
                raw.executemany("UPDATE duro_runs SET updated_at = ? WHERE id = ?", touched)  # type: ignore[union-attr]
            rows = _step_rows((run_id, step) for (run_id, _), step in steps.items() if run_id in stored)
            for shape, shaped in rows.items():
                raw.executemany(_upsert_steps_sql(shape), shaped)  # type: ignore[union-attr]
        return [command.run_id in stored for command in commands]

    def _send_finish(
        self,
        conn: Connection,
        run_id: str,
        owner: str | None,
        status: str,
        output: str | None,
        error: str | None,
        now: int,
    ) -> Any:
        """End the run if ``owner`` still owns it unfinished; the cursor's ``rowcount`` is 1 if it did
        (on PostgreSQL its row is the run's parent id)."""
        return self._x(
            conn,
            "finish_run",
            {"id": run_id, "owner": owner, "status": status, "output": output, "error": error, "now": now},
        )

    def _finish(
        self,
        conn: Connection,
        run_id: str,
        owner: str | None,
        status: str,
        output: str | None,
        error: str | None,
        now: int,
    ) -> bool:
        result = self._send_finish(conn, run_id, owner, status, output, error, now)
        if result.rowcount != 1:
            return False
        if self.dialect == "postgresql":
            # Only a parent waits on a run's end in another process (a client's result() polls):
            # NOTIFY serializes committing transactions, so a top-level run's end sends none.
            if result.fetchone()[0] is not None:
                self._notify(conn, ["done", run_id, status])
        return True

    def cancel_run(self, run_id: str, namespace: str | None, error: str, now: int) -> list[str]:
        with self._write() as conn:
            query = sa.select(runs.c.id).where(runs.c.id == run_id)
            if namespace is not None:
                query = query.where(runs.c.namespace == namespace)
            if conn.execute(query).first() is None:
                raise DuroError(f"run {run_id!r} does not exist; list runs with engine.list_runs()")
            cancelled: list[str] = []
            frontier = [run_id]
            while frontier:
                current = frontier.pop()
                result = conn.execute(
                    runs.update()
                    .where(runs.c.id == current, runs.c.status.in_(_ACTIVE))
                    .values(status="cancelled", error=error, ended_at=now, updated_at=now, wake_at=None)
                )
                if result.rowcount:
                    cancelled.append(current)
                frontier.extend(
                    conn.execute(
                        sa.select(runs.c.id).where(runs.c.parent_id == current, runs.c.status.in_(_ACTIVE))
                    ).scalars()
                )
            self._notify(conn, *(["done", cancelled_id, "cancelled"] for cancelled_id in cancelled))
            return cancelled

    # -- signals ---------------------------------------------------------------------------------

    def send_signal(self, run_id: str, name: str, payload: str | None, now: int) -> None:
        with self._write() as conn:
            status = conn.execute(sa.select(runs.c.status).where(runs.c.id == run_id)).scalar()
            if status is None:
                raise DuroError(f"cannot signal run {run_id!r}: it does not exist")
            if status not in _ACTIVE:
                raise DuroError(
                    f"cannot signal run {run_id!r}: it is {status}; signals reach only "
                    f"runs that have not finished"
                )
            conn.execute(signals.insert().values(run_id=run_id, name=name, payload=payload, created_at=now))
            self._notify(conn, ["signal", run_id, name])

    def _take_signal(self, conn: Connection, command: TakeSignal) -> StepRecord | None:
        """See :class:`TakeSignal`."""
        run_id, name, step = command.run_id, command.name, command.step
        row = conn.execute(
            sa.select(signals.c.id, signals.c.payload)
            .where(signals.c.run_id == run_id, signals.c.name == name, signals.c.consumed_seq.is_(None))
            .order_by(signals.c.id)
            .limit(1)
        ).first()
        if row is None:
            return None
        conn.execute(signals.update().where(signals.c.id == row.id).values(consumed_seq=step.seq))
        taken = replace(step, status="completed", result=row.payload)
        if not self._write_step(conn, run_id, command.owner, taken, "running", None, step.ended_at or 0):
            conn.rollback()
            raise Fenced(run_id)
        return taken

    def signalled(self, run_ids: Iterable[str]) -> set[tuple[str, str]]:
        ids = list(run_ids)
        if not ids:
            return set()
        with self._read() as conn:
            rows = conn.execute(
                sa.select(signals.c.run_id, signals.c.name).where(
                    signals.c.run_id.in_(ids), signals.c.consumed_seq.is_(None)
                )
            )
            return {(r.run_id, r.name) for r in rows}

    # -- schedules -------------------------------------------------------------------------------

    def put_schedule(self, schedule: ScheduleRecord) -> None:
        definition = {
            "workflow": schedule.workflow,
            "cron": schedule.cron,
            "input": schedule.input,
            "concurrency": schedule.concurrency,
            "next_fire_at": schedule.next_fire_at,
            "updated_at": schedule.updated_at,
        }
        with self._write() as conn:
            where = (schedules.c.namespace == schedule.namespace, schedules.c.name == schedule.name)
            if conn.execute(schedules.update().where(*where).values(**definition)).rowcount == 0:
                conn.execute(
                    schedules.insert().values(
                        namespace=schedule.namespace,
                        name=schedule.name,
                        created_at=schedule.created_at,
                        last_fire_at=None,
                        last_run_id=None,
                        last_error=None,
                        **definition,
                    )
                )
            self._notify(conn, ["sched", schedule.namespace])

    def list_schedules(self, namespace: str) -> list[ScheduleRecord]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(schedules).where(schedules.c.namespace == namespace).order_by(schedules.c.name)
            )
            return [ScheduleRecord(**row._mapping) for row in rows]

    def delete_schedule(self, namespace: str, name: str) -> bool:
        with self._write() as conn:
            deleted = (
                conn.execute(
                    schedules.delete().where(schedules.c.namespace == namespace, schedules.c.name == name)
                ).rowcount
                == 1
            )
            self._notify(conn, ["sched", namespace])
            return deleted

    def due_schedules(self, namespace: str, workflows: Sequence[str], now: int) -> list[ScheduleRecord]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(schedules)
                .where(
                    schedules.c.namespace == namespace,
                    schedules.c.next_fire_at <= now,
                    schedules.c.workflow.in_(list(workflows)),
                )
                .order_by(schedules.c.next_fire_at, schedules.c.name)
            )
            return [ScheduleRecord(**row._mapping) for row in rows]

    def next_schedule_due(self, namespace: str, workflows: Sequence[str]) -> int | None:
        with self._read() as conn:
            return conn.execute(
                sa.select(sa.func.min(schedules.c.next_fire_at)).where(
                    schedules.c.namespace == namespace, schedules.c.workflow.in_(list(workflows))
                )
            ).scalar()

    def claim_schedule_window(self, namespace: str, name: str, due: int, next_due: int, now: int) -> bool:
        with self._write() as conn:
            return (
                conn.execute(
                    schedules.update()
                    .where(
                        schedules.c.namespace == namespace,
                        schedules.c.name == name,
                        schedules.c.next_fire_at == due,
                    )
                    .values(next_fire_at=next_due, updated_at=now)
                ).rowcount
                == 1
            )

    def record_schedule_outcome(
        self, namespace: str, name: str, fired_at: int, run_id: str | None, error: str | None
    ) -> None:
        with self._write() as conn:
            conn.execute(
                schedules.update()
                .where(schedules.c.namespace == namespace, schedules.c.name == name)
                .values(last_fire_at=fired_at, last_run_id=run_id, last_error=error)
            )

    # -- workers and leases ----------------------------------------------------------------------

    def register_worker(self, worker_id: str, namespace: str, host: str, pid: int, now: int) -> None:
        """(Re)join as ``worker_id``; runs a previous life of this id owned are handed back to be claimed."""
        with self._write() as conn:
            now = self._db_now(conn, now)
            conn.execute(workers.delete().where(workers.c.id == worker_id))
            # handing back is bookkeeping, not a change to the run: updated_at stays
            handed_back = conn.execute(
                runs.update().where(runs.c.owner == worker_id, _RUNS_ACTIVE).values(owner=None)
            ).rowcount
            conn.execute(
                workers.insert().values(
                    id=worker_id, namespace=namespace, host=host, pid=pid, started_at=now, heartbeat_at=now
                )
            )
            if handed_back:
                self._notify(conn, ["run", namespace])

    def heartbeat(self, worker_id: str, now: int) -> dict[str, int] | None:
        """Renew the worker's lease. Returns the heartbeat stamp of every worker of its namespace (its
        own included: what a :class:`duro._lease.Watch` judges by), or ``None`` when its row is gone:
        a claim condemned it, and its runs may be someone else's now."""
        with self._write() as conn:
            stamp = self._db_now(conn, now)
            row = self._x(conn, "beat", {"id": worker_id, "now": stamp}).fetchone()
            if row is None:
                return None
            return dict(self._x(conn, "stamps", {"namespace": row[0]}).fetchall())

    def remove_worker(self, worker_id: str, now: int) -> None:
        with self._write() as conn:
            namespace = conn.execute(sa.select(workers.c.namespace).where(workers.c.id == worker_id)).scalar()
            conn.execute(workers.delete().where(workers.c.id == worker_id))
            handed_back = conn.execute(
                runs.update().where(runs.c.owner == worker_id, _RUNS_ACTIVE).values(owner=None)
            ).rowcount  # bookkeeping: updated_at stays
            if handed_back:
                self._notify(conn, ["run", namespace])

    def list_workers(self) -> list[dict[str, Any]]:
        """Every registered worker with its heartbeat age in ms (on the decisions' clock) and how
        many unfinished runs it owns: what ``duro health`` shows."""
        with self._read() as conn:
            now = self._db_now(conn, 0) if self._database_clock else None
            owned = dict(
                conn.execute(
                    sa.select(runs.c.owner, sa.func.count())
                    .where(runs.c.owner.is_not(None), _RUNS_ACTIVE)
                    .group_by(runs.c.owner)
                ).all()
            )
            rows = conn.execute(sa.select(workers).order_by(workers.c.started_at))
            return [
                {
                    "id": r.id,
                    "namespace": r.namespace,
                    "host": r.host,
                    "pid": r.pid,
                    "started_at": r.started_at,
                    "heartbeat_at": r.heartbeat_at,
                    "db_now": now,
                    "runs": owned.get(r.id, 0),
                }
                for r in rows
            ]

    def local_workers(self, host: str) -> list[tuple[str, int]]:
        with self._read() as conn:
            rows = conn.execute(sa.select(workers.c.id, workers.c.pid).where(workers.c.host == host))
            return [(r.id, r.pid) for r in rows]

    def claim_runs(self, claim: Claim) -> list[RunRecord]:
        if not claim.workflows:
            return []
        with self._write() as conn:
            if self.dialect == "postgresql" and not claim.serial:
                return self._claim_pg(conn, claim)
            for worker, stamp in claim.condemned:
                conn.execute(workers.delete().where(workers.c.id == worker, workers.c.heartbeat_at == stamp))
            return self._claim(conn, claim, self._db_now(conn, claim.now))

    def _claim_pg(self, conn: Connection, claim: Claim) -> list[RunRecord]:
        """The claim on PostgreSQL as one fixed statement (the common case: no serial workflows).
        Built with SQLAlchemy on every pass it cost a worker a third of its CPU when every start
        woke every worker; and the decisions' clock is read inside it, not in a round trip of its
        own. Same rules as ``_claim``."""
        rows = raw_execute(
            conn,
            self._sql["claim"],
            {
                "namespace": claim.namespace,
                "workflows": list(claim.workflows),
                "owner": claim.worker_id,
                "now": claim.now,
                "limit": claim.limit,
                "dead": [worker for worker, _ in claim.condemned],
                "stamps": [stamp for _, stamp in claim.condemned],
            },
        ).fetchall()
        return [replace(_tuple_to_run(row[:-1]), fresh=row[-1] == "pending") for row in rows]

    def _claim(self, conn: Connection, claim: Claim, now: int) -> list[RunRecord]:
        """Unfinished runs of the claimer's workflows with no owner, or whose owner has no row (the
        condemned workers' rows were deleted just before, in this transaction)."""
        registered = sa.select(workers.c.id)
        candidates = (
            sa.select(runs.c.id)
            .where(
                runs.c.namespace == claim.namespace,
                _RUNS_ACTIVE,
                runs.c.workflow.in_(list(claim.workflows)),
                sa.or_(runs.c.owner.is_(None), runs.c.owner.not_in(registered)),
            )
            .order_by(runs.c.created_at, runs.c.id)
            .limit(claim.limit)
        )
        if claim.serial:
            # A pending run of a serial workflow starts only when no other run of it is active and it
            # is the oldest pending one; the rest wait (status pending) in creation order.
            other = runs.alias("other")
            busy = sa.exists().where(
                other.c.namespace == claim.namespace,
                other.c.workflow == runs.c.workflow,
                other.c.status.in_(["running", "suspended", "blocked"]),
            )
            oldest = (
                sa.select(other.c.id)
                .where(
                    other.c.namespace == claim.namespace,
                    other.c.workflow == runs.c.workflow,
                    other.c.status == "pending",
                )
                .order_by(other.c.created_at, other.c.id)
                .limit(1)
                .scalar_subquery()
            )
            candidates = candidates.where(
                sa.not_(
                    sa.and_(
                        runs.c.workflow.in_(list(claim.serial)),
                        runs.c.status == "pending",
                        sa.or_(busy, runs.c.id != oldest),
                    )
                )
            )
        if self.dialect == "postgresql":
            candidates = candidates.with_for_update(skip_locked=True)
        for name in sorted(claim.serial):  # two workers never start two runs of one serial workflow
            self._lock_key(conn, f"duro:serial:{claim.namespace}:{name}")
        # Each run's status before the claim comes back with it: a run taken from pending never
        # executed (RunRecord.fresh), and its worker skips reading its history.
        # a claim changes a run's record (and updated_at) only when it starts it: taking up a run
        # handed back or left by a dead worker is bookkeeping
        claiming = {
            "owner": claim.worker_id,
            "updated_at": sa.case((runs.c.status == "pending", now), else_=runs.c.updated_at),
            "status": sa.case((runs.c.status == "pending", "running"), else_=runs.c.status),
        }
        if self.dialect == "sqlite":
            # SQLite's RETURNING cannot name an UPDATE's FROM; under BEGIN IMMEDIATE nothing
            # changes between reading the candidates and claiming them
            was = dict(conn.execute(candidates.add_columns(runs.c.status)).all())
            if not was:
                return []
            rows = conn.execute(
                runs.update().where(runs.c.id.in_(list(was))).values(**claiming).returning(*runs.c)
            ).all()
            before = was
        else:
            taken = candidates.add_columns(runs.c.status.label("was")).subquery("taken")
            rows = conn.execute(
                runs.update()
                .where(runs.c.id == taken.c.id)
                .values(**claiming)
                .returning(*runs.c, taken.c.was)
            ).all()
            before = {row.id: row.was for row in rows}
        return [replace(run, fresh=before[run.id] == "pending") for run in map(_row_to_run, rows)]
