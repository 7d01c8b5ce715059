"""The SQL store: SQLite (embedded default) and PostgreSQL (many processes), one implementation.

``SqlStore`` composes one part per concern over one :class:`._connection.Connector` (the engine,
the transactions, the named queries of :mod:`._queries`): runs, steps and the commands, signals,
claims, slots, schedules and workers. Each method here says which part answers it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

import sqlalchemy as sa
from sqlalchemy.engine import URL

from .._config import LimitConfig
from .._durations import Duration, to_ms
from .._errors import DuroError
from .._slots import SlotEvent, SlotRow
from . import _connection, _notify, _schema
from ._claims import Claims
from ._commands import (
    Command,
    ConfirmSlot,
    FinishRun,
    GiveUpSlot,
    OwnStep,
    RecordStep,
    ReleaseSlot,
    RequestSlot,
    SendSignal,
    SlotOutcome,
    TakeSignal,
    Unload,
)
from ._connection import Connector
from ._records import CancelOutcome, Claim, NewRun, QuotaCheck, RunRecord, ScheduleRecord, StepRecord
from ._runs import Runs
from ._schedules import Schedules
from ._signals import Signals
from ._slot_rows import LimitState
from ._slot_stats import SlotStats, limit_stats, queued_limits
from ._slots import Slots
from ._steps import Steps
from ._urls import DEFAULT_SQLITE_URL
from ._versions import unfinished_by_version
from ._workers import Workers

log = logging.getLogger("duro.store")

T = TypeVar("T")


class SqlStore:
    """The store on SQLite or PostgreSQL: named SQL queries over the SQLModel tables."""

    # the methods that only read: on SQLite the engine runs them apart from the writes, which may
    # wait seconds for a write lock another process holds (WAL lets reads go on meanwhile)
    reads = frozenset(
        {
            "schema_version",
            "count_active",
            "recent_durations",
            "get_run",
            "list_runs",
            "run_statuses",
            "cancel_requested",
            "get_steps",
            "get_steps_page",
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
            "limit_stats",
            "queued_limits",
            "unfinished_by_version",
        }
    )

    # the methods that may write many transactions (a hand-out of many slots, 1,000 grants each):
    # never tried on the event loop, and on SQLite in a thread of their own (see StoreGateway.call)
    bulk = frozenset({"set_limit_override", "slots_expire", "slots_leave"})

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
        self._runs = Runs(db)
        self._signals = Signals(db)
        # called with what committed slot decisions did (duro._slots.SlotEvent), in the thread that
        # committed them: the engine's metrics and logs listen here (see duro._observe)
        self.slot_listeners: list[Callable[[Sequence[SlotEvent]], None]] = []
        self._slots = Slots(db, self._tell_slots)
        self._steps = Steps(db, self._signals, self._slots)
        self._claims = Claims(db)
        self._schedules = Schedules(db)
        self._workers = Workers(db)

    @property
    def safe_url(self) -> str:
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
        return _connection.is_transient(err)

    @staticmethod
    def is_unavailable(err: BaseException) -> bool:
        """An error that means the store did not answer in time, and changed nothing: SQLite's file
        locked by another process past ``busy_timeout`` ("database is locked"), or PostgreSQL
        unreachable (what :meth:`is_transient` retries; once retrying gives up, this). A refused
        statement, a missing table or a bug is not."""
        return _connection.is_unavailable(err)

    def without_waiting(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a method of this store), here and now, if it needs no lock that another
        process or thread holds; otherwise :class:`WouldWait`, having changed nothing. SQLite only:
        its statements take microseconds unless they wait for a lock, so the engine makes a call
        this way first, on the event loop, and in a thread only when it would wait. Its connections
        here have a busy timeout of 0 and it takes this process's write lock without blocking, so a
        file that another process holds locked answers at once. Once a transaction of the call has
        committed, the rest of the call may wait (nothing done twice)."""
        return self.db.without_waiting(fn, *args)

    def listen(self, deliver: Callable[[list[Any]], None], stopping: Any) -> None:
        """Block, handing each notice (see :mod:`._notify`) to ``deliver``, until ``stopping`` is
        set. On SQLite, another process's commit is said as ``["changed"]``."""
        if self.dialect == "postgresql":
            _notify.listen(self.url, deliver, stopping)
        elif (path := self.db.file) is not None:
            _notify.watch_sqlite(path, lambda: self.db.writes, deliver, stopping)

    def create_schema(self) -> None:
        _schema.create_schema(self.db)

    def schema_version(self) -> int:
        return _schema.schema_version(self.db)

    def close(self) -> None:
        self.db.close()

    # -- runs ------------------------------------------------------------------------------------

    def insert_run(
        self, new: NewRun, quota: QuotaCheck | None, parent: OwnStep | None = None
    ) -> tuple[RunRecord, bool]:
        return self._runs.insert(new, quota, parent)

    def get_run(self, run_id: str, namespace: str | None = None) -> RunRecord | None:
        return self._runs.get(run_id, namespace)

    def list_runs(
        self,
        namespace: str | None,
        workflow: str | None,
        statuses: Sequence[str] | None,
        tag: str | None,
        limit: int,
        before: tuple[int, str] | None = None,
    ) -> list[RunRecord]:
        return self._runs.find(namespace, workflow, statuses, tag, limit, before)

    def count_active(self, key: str, statuses: Sequence[str], namespace: str | None) -> int:
        return self._runs.count_active(key, statuses, namespace)

    def recent_durations(self, key: str, namespace: str | None, n: int = 20) -> list[int]:
        return self._runs.recent_durations(key, namespace, n)

    def run_statuses(self, run_ids: Iterable[str]) -> dict[str, str]:
        return self._runs.statuses(run_ids)

    def cancel_run(self, run_id: str, namespace: str | None, error: str, now: int) -> CancelOutcome:
        return self._runs.cancel(run_id, namespace, error, now)

    def cancel_requested(self, run_ids: Iterable[str]) -> set[str]:
        return self._runs.cancel_requested(run_ids)

    # -- a run's progress ------------------------------------------------------------------------

    def get_steps(self, run_id: str) -> list[StepRecord]:
        return self._steps.get(run_id)

    def get_steps_page(self, run_id: str, after: int, limit: int) -> list[StepRecord]:
        return self._steps.page(run_id, after, limit)

    @overload
    def apply(self, command: RecordStep | FinishRun | SendSignal) -> bool: ...
    @overload
    def apply(self, command: TakeSignal) -> StepRecord | None: ...
    @overload
    def apply(self, command: RequestSlot | ConfirmSlot | GiveUpSlot | ReleaseSlot) -> SlotOutcome: ...
    @overload
    def apply(self, command: Unload) -> list[str]: ...
    def apply(self, command: Command) -> bool | StepRecord | SlotOutcome | list[str] | None:
        """Apply one command in a transaction of its own (see ``Store.apply``)."""
        result: bool | StepRecord | SlotOutcome | list[str] | None = self._steps.apply(command)
        if type(result) is SlotOutcome:
            self._tell_slots(result.events)
        return result

    def apply_batch(self, commands: Sequence[Command]) -> list[Any]:
        """Apply commands of many runs (``RecordStep``, ``FinishRun``; on SQLite also ``RequestSlot``
        and ``ReleaseSlot``) in one transaction, each with its own fence and result."""
        results = self._steps.apply_batch(commands)
        for result in results:
            if type(result) is SlotOutcome:
                self._tell_slots(result.events)
        return results

    def _tell_slots(self, events: Sequence[SlotEvent]) -> None:
        if not events:
            return
        for listener in tuple(self.slot_listeners):
            try:
                listener(events)
            except Exception:  # noqa: BLE001 - an observer must never undo what committed
                log.exception("duro: a slot listener failed; it is dropped")
                self.slot_listeners.remove(listener)

    # -- signals ---------------------------------------------------------------------------------

    def send_signal(self, run_id: str, name: str, payload: str | None, now: int) -> None:
        self._signals.send(run_id, name, payload, now)

    def signalled(self, run_ids: Iterable[str]) -> set[tuple[str, str]]:
        return self._signals.signalled(run_ids)

    # -- schedules -------------------------------------------------------------------------------

    def put_schedule(self, schedule: ScheduleRecord) -> None:
        self._schedules.put(schedule)

    def list_schedules(self, namespace: str) -> list[ScheduleRecord]:
        return self._schedules.all(namespace)

    def delete_schedule(self, namespace: str, name: str) -> bool:
        return self._schedules.delete(namespace, name)

    def due_schedules(self, namespace: str, workflows: Sequence[str], now: int) -> list[ScheduleRecord]:
        return self._schedules.due(namespace, workflows, now)

    def next_schedule_due(self, namespace: str, workflows: Sequence[str]) -> int | None:
        return self._schedules.next_due(namespace, workflows)

    def claim_schedule_window(self, namespace: str, name: str, due: int, next_due: int, now: int) -> bool:
        return self._schedules.claim_window(namespace, name, due, next_due, now)

    def record_schedule_outcome(
        self, namespace: str, name: str, fired_at: int, run_id: str | None, error: str | None
    ) -> None:
        self._schedules.record_outcome(namespace, name, fired_at, run_id, error)

    # -- limits and slots ------------------------------------------------------------------------

    def slots_leave(
        self, configs: Mapping[str, LimitConfig], run_ids: Iterable[str], now: int
    ) -> list[SlotRow]:
        return self._slots.slots_leave(configs, run_ids, now)

    def slots_expire(
        self, configs: Mapping[str, LimitConfig], now: int
    ) -> tuple[list[SlotRow], list[SlotRow]]:
        return self._slots.slots_expire(configs, now)

    def next_slot_due(self, now: int | None = None, limits: Iterable[str] | None = None) -> int | None:
        return self._slots.next_slot_due(now, limits)

    def get_slot(self, slot_id: str) -> SlotRow | None:
        return self._slots.get_slot(slot_id)

    def slot_states(self, slot_ids: Iterable[str]) -> dict[str, str]:
        return self._slots.slot_states(slot_ids)

    def limit_states(self) -> dict[str, LimitState]:
        return self._slots.limit_states()

    def declare_limits(self, configs: Iterable[LimitConfig], now: int) -> None:
        self._slots.declare_limits(configs, now)

    def limit_slots(self, name: str, max_rows: int = 10_000) -> list[SlotRow]:
        return self._slots.limit_slots(name, max_rows)

    def set_limit_override(
        self, config: LimitConfig, field: str, value: int | None, now: int
    ) -> list[SlotRow]:
        return self._slots.set_limit_override(config, field, value, now)

    def limit_stats(self, name: str, since_ms: int) -> SlotStats:
        return limit_stats(self.db, name, since_ms)

    def queued_limits(self, run_ids: Iterable[str]) -> dict[str, str]:
        return queued_limits(self.db, run_ids)

    def unfinished_by_version(self, namespace: str) -> dict[tuple[str, str], int]:
        return unfinished_by_version(self.db, namespace)

    # -- workers, leases and claims --------------------------------------------------------------

    def register_worker(self, worker_id: str, namespace: str, host: str, pid: int, now: int) -> None:
        """(Re)join as ``worker_id``; runs a previous life of this id owned are handed back to be claimed."""
        self._workers.register(worker_id, namespace, host, pid, now)

    def heartbeat(self, worker_id: str, now: int) -> dict[str, int] | None:
        """Renew the worker's lease. Returns the heartbeat stamp of every worker of its namespace (its
        own included: what a :class:`duro._lease.Watch` judges by), or ``None`` when its row is gone:
        a claim condemned it, and its runs may be someone else's now."""
        return self._workers.heartbeat(worker_id, now)

    def count_recovery(self, run_id: str, owner: str) -> int | None:
        return self._runs.count_recovery(run_id, owner)

    def remove_worker(self, worker_id: str, now: int, dead: bool = False) -> None:
        self._workers.remove(worker_id, now, dead)

    def list_workers(self) -> list[dict[str, Any]]:
        """Every registered worker with its heartbeat age in ms (on the decisions' clock) and how
        many unfinished runs it owns: what ``duro health`` shows."""
        return self._workers.all()

    def local_workers(self, host: str) -> list[tuple[str, int]]:
        return self._workers.local(host)

    def claim_runs(self, claim: Claim) -> list[RunRecord]:
        return self._claims.claim(claim)

    def next_due(self, claim: Claim) -> int | None:
        return self._claims.next_due(claim)
