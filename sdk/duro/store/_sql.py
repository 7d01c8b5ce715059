"""The SQL store: SQLite (embedded default) and PostgreSQL (many processes), one implementation.

``SqlStore`` is composed of one part per concern, each an object over the one
:class:`._connection.Connector` it opens (the engine, the transactions, the named queries of
:mod:`._queries`): ``runs``, ``steps`` (and every write of a run's progress), ``signals``,
``slots`` (the slot transactions, a keyed limit's keys and operators' overrides with them),
``limits`` (what operators read), ``rates``, ``schedules`` and ``workers``. No part imports
another: ``steps`` applies a signal's or a slot's command through the calls it is handed. Each operation is
written once, in its part, with its docstring, marked where it is defined when it only reads
(``@reads``) or may write many transactions (``@bulk``); this module holds what the store is as a
whole: how it opens, its parts, and its connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL

from .._durations import Duration, to_ms
from .._errors import DuroError
from . import _engines, _notify, _schema
from ._commands import Command, FinishRun, RecordStep, ReleaseSlot, RequestSlot
from ._connection import Connector
from ._limits import Limits
from ._notify import Notice
from ._rates import Rates
from ._records import reads
from ._runs import Runs
from ._schedules import Schedules
from ._signals import Signals
from ._slots import Slots
from ._steps import Steps
from ._urls import DEFAULT_SQLITE_URL
from ._workers import Workers

T = TypeVar("T")


class SqlStore:
    """The store on SQLite or PostgreSQL: named SQL queries over the SQLModel tables, by part.

    What the engine needs of a store, every operation mandatory. What varies between the dialects
    is said by the attributes (``dialect``, ``batches``, ``notifies``), never probed. The contract
    suite (``tests/integration/store_contract``) runs against both."""

    def __init__(
        self,
        url: str | URL = DEFAULT_SQLITE_URL,
        *,
        pool_size: int = 10,
        decisions_clock: str = "database",
        idle_in_transaction_timeout: Duration | None = "5s",
        read_only: bool = False,
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
        made again. ``None`` leaves the server's setting.

        ``read_only``: a reader that must change nothing (``duro replay-check``, ``duro runs
        export``): SQLite opens the file with ``mode=ro`` (a path that does not exist is refused,
        never created), PostgreSQL sessions are ``default_transaction_read_only``, and the schema is
        never created or migrated: one of another version is refused with what to do."""
        if decisions_clock not in ("database", "caller"):
            raise DuroError(f"decisions_clock {decisions_clock!r} is not 'database' or 'caller'")
        idle_ms = (
            None
            if idle_in_transaction_timeout is None
            else to_ms(idle_in_transaction_timeout, "idle_in_transaction_timeout")
        )
        self.db = db = Connector(
            url,
            pool_size=pool_size,
            database_clock=decisions_clock == "database",
            idle_ms=idle_ms,
            read_only=read_only,
        )
        if read_only:
            try:
                _schema.check_readable(db)
            except BaseException:
                db.close()
                raise
        self.url, self.dialect = db.url, db.dialect
        # what apply_batch takes: on SQLite (one writer at a time anyway) slot requests and releases
        # too; on PostgreSQL they keep transactions of their own, so that a batch never holds the
        # locks of several limits at once (see _slots)
        self.batches: frozenset[type[Command]] = frozenset(
            {RecordStep, FinishRun} | ({RequestSlot, ReleaseSlot} if self.dialect == "sqlite" else set())
        )
        # PostgreSQL: LISTEN/NOTIFY; a SQLite file: its data_version (see _notify.watch_sqlite)
        self.notifies = self.dialect == "postgresql" or db.file is not None
        self.runs = Runs(db)
        self.signals = Signals(db)
        self.slots = Slots(db)
        self.steps = Steps(
            db, self.signals.take, self.signals.send_from_run, self.slots.apply, self.slots.tell
        )
        self.limits = Limits(db)
        self.rates = Rates(db)
        self.schedules = Schedules(db)
        self.workers = Workers(db)

    @property
    def safe_url(self) -> str:
        """The database's URL without its password, for messages."""
        return self.db.safe_url

    @property
    def _engine(self) -> sa.Engine:
        """The SQLAlchemy engine (tests and benchmarks watch its events)."""
        return self.db.engine

    # -- the connection --------------------------------------------------------------------------

    @staticmethod
    def is_transient(err: BaseException) -> bool:
        """An error worth the same call again: the server unreachable or restarting, or a transaction
        the server rolled back (deadlock, serialization failure), or a session the server ended
        while its process was frozen inside a transaction (``idle_in_transaction_timeout``).

        SQLite's errors never are: a locked file has already been waited for (``busy_timeout``), and
        waiting again would make that option meaningless (see :meth:`is_unavailable`)."""
        return _engines.is_transient(err)

    @staticmethod
    def is_unavailable(err: BaseException) -> bool:
        """An error that means the store did not answer in time, and changed nothing: SQLite's file
        locked by another process past ``busy_timeout`` ("database is locked"), or PostgreSQL
        unreachable (what :meth:`is_transient` retries; once retrying gives up, this). A refused
        statement, a missing table or a bug is not."""
        return _engines.is_unavailable(err)

    def listen(self, deliver: Callable[[Notice], None], stopping: Any, ready: Any = None) -> None:
        """Block, handing each notice (see :mod:`._notify`) to ``deliver``, until ``stopping`` is
        set; ``ready`` (a ``threading.Event``) is set once notices are heard. On SQLite, another
        process's commit is said as a ``changed`` notice."""
        if self.dialect == "postgresql":
            _notify.listen(self.url, deliver, stopping, ready)
            return
        if ready is not None:
            ready.set()  # SQLite's watch sees every commit after its first read: none is missed
        if (path := self.db.file) is not None:
            _notify.watch_sqlite(path, lambda: self.db.writes, deliver, stopping)

    def create_schema(self) -> None:
        """Create the tables, or migrate them to this version; idempotent."""
        _schema.create_schema(self.db)

    @reads
    def schema_version(self) -> int:
        return _schema.schema_version(self.db)

    def close(self) -> None:
        """Release pooled connections; a later call opens them again."""
        self.db.close()


Store = SqlStore  # the name ``Engine(store=...)`` and the contract suite type a store by
